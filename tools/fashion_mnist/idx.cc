// IDX reading through zlib's gz* functions, which read gzip and plain files alike.
#include "fashion_mnist/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "depengine/error.h"

namespace depengine::fashion_mnist {
namespace {

// Bounds that no real IDX image file exceeds; beyond them the header is taken as corrupt
// rather than as a request for gigabytes.
constexpr std::uint32_t kMaxSide = 1u << 16;
constexpr std::uint32_t kMaxCount = 1u << 28;
// Bytes read per step: a header that claims more data than the file holds fails once the
// data runs out, without first allocating what the header claims.
constexpr std::size_t kReadStep = std::size_t{16} << 20;

struct GzCloser {
  void operator()(gzFile_s* f) const noexcept { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("IDX file " + path + ": " + what);
}

// Opens without blocking and checks for a regular file first: opening a FIFO for reading
// would otherwise wait for a writer forever, and a device or directory is never IDX data.
GzFile open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      fail(path, "not found (install Debian's dataset-fashion-mnist, or pass --data DIR)");
    }
    fail(path, std::string("cannot be opened: ") + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    fail(path, dir ? "is a directory" : "is not a regular file");
  }
  // Regular files never block; clearing the flag keeps zlib's reads ordinary.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    fail(path, "cannot be opened (out of memory)");
  }
  return GzFile(f);
}

// Reads exactly `n` bytes into `out` (which grows with them); `what` names them in the
// error when the file ends early.
void read_exact(gzFile f, const std::string& path, std::vector<std::uint8_t>& out, std::size_t n,
                const char* what) {
  out.clear();
  std::size_t got = 0;
  while (got < n) {
    if (out.size() == got) out.resize(std::min(n, got + kReadStep));
    unsigned char* p = out.data();
    const unsigned chunk = static_cast<unsigned>(
        std::min<std::size_t>(out.size() - got, std::numeric_limits<int>::max()));
    const int r = gzread(f, p + got, chunk);
    if (r <= 0) {
      int code = Z_OK;
      const char* msg = gzerror(f, &code);
      std::string detail = code != Z_OK && msg && *msg ? std::string(" (") + msg + ")" : "";
      fail(path, "truncated: " + std::string(what) + " needs " + std::to_string(n) +
                     " bytes, the file has " + std::to_string(got) + detail);
    }
    got += static_cast<std::size_t>(r);
  }
}

std::uint32_t read_u32(gzFile f, const std::string& path, const char* what) {
  std::vector<std::uint8_t> b;
  read_exact(f, path, b, 4, what);
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         std::uint32_t{b[3]};
}

void check_magic(gzFile f, const std::string& path, std::uint32_t expected, const char* kind) {
  const std::uint32_t magic = read_u32(f, path, "the header");
  if (magic != expected) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "wrong magic 0x%08x, expected 0x%08x (%s)", magic, expected,
                  kind);
    fail(path, buf);
  }
}

void check_at_end(gzFile f, const std::string& path) {
  unsigned char extra;
  if (gzread(f, &extra, 1) > 0) fail(path, "longer than its header says (trailing bytes)");
}

}  // namespace

Images read_images(const std::string& path) {
  GzFile f = open_for_reading(path);
  check_magic(f.get(), path, kImagesMagic, "IDX3 unsigned-byte images");
  const std::uint32_t count = read_u32(f.get(), path, "the header");
  const std::uint32_t rows = read_u32(f.get(), path, "the header");
  const std::uint32_t cols = read_u32(f.get(), path, "the header");
  if (count > kMaxCount || rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide) {
    fail(path, "implausible dimensions " + std::to_string(count) + " x " + std::to_string(rows) +
                   " x " + std::to_string(cols));
  }
  Images img;
  img.count = count;
  img.rows = rows;
  img.cols = cols;
  read_exact(f.get(), path, img.pixels, img.count * img.rows * img.cols, "the pixel data");
  check_at_end(f.get(), path);
  return img;
}

std::vector<std::uint8_t> read_labels(const std::string& path, int classes) {
  if (classes <= 0 || classes > 256) {
    throw Error("read_labels: classes must be in [1, 256], not " + std::to_string(classes));
  }
  GzFile f = open_for_reading(path);
  check_magic(f.get(), path, kLabelsMagic, "IDX1 unsigned-byte labels");
  const std::uint32_t count = read_u32(f.get(), path, "the header");
  if (count > kMaxCount) fail(path, "implausible label count " + std::to_string(count));
  std::vector<std::uint8_t> labels;
  read_exact(f.get(), path, labels, count, "the labels");
  check_at_end(f.get(), path);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= classes) {
      fail(path, "label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                     " is out of range [0, " + std::to_string(classes) + ")");
    }
  }
  return labels;
}

Dataset load(const std::string& dir, Split split) {
  const std::string prefix = dir + (split == Split::train ? "/train" : "/t10k");
  Dataset d;
  d.images = read_images(prefix + "-images-idx3-ubyte.gz");
  // Valid IDX, but nothing to train or test on: said here, where the file is known.
  if (d.images.count == 0) fail(prefix + "-images-idx3-ubyte.gz", "holds no images");
  d.labels = read_labels(prefix + "-labels-idx1-ubyte.gz");
  if (d.labels.size() != d.images.count) {
    throw Error("Fashion-MNIST in " + dir + ": " + std::to_string(d.images.count) +
                " images but " + std::to_string(d.labels.size()) + " labels");
  }
  return d;
}

void write_idx(const std::string& path, std::uint32_t magic,
               const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data,
               bool gzip) {
  std::vector<unsigned char> bytes;
  auto put = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<unsigned char>(v >> s));
  };
  put(magic);
  for (std::uint32_t d : dims) put(d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), gzip ? "wb" : "wbT");
  if (!f) throw Error("write_idx: cannot create " + path + ": " + std::strerror(errno));
  const int w = bytes.empty() ? 0 : gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  const int c = gzclose(f);
  if (w != static_cast<int>(bytes.size()) || c != Z_OK) {
    throw Error("write_idx: writing " + path + " failed");
  }
}

}  // namespace depengine::fashion_mnist
