// fashion_mnist/idx.h — reads the IDX files of (Fashion-)MNIST, gzip-compressed or plain.
//
//   auto train = depengine::fashion_mnist::load(depengine::fashion_mnist::kDefaultDir,
//                                               depengine::fashion_mnist::Split::train);
//   // train.images.count == 60000, rows == cols == 28, labels in [0, 10)
//
// Every problem with a file — missing, not a regular file (a FIFO, device or directory is
// refused without waiting on it), not IDX (wrong magic), dimensions that make no sense,
// shorter or longer than its header says, a label out of range, image and label files that
// disagree on the count — throws depengine::Error naming the file and what is wrong.
// Functions share no state and are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace depengine::fashion_mnist {

// Where Debian's dataset-fashion-mnist installs the files.
inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kClasses = 10;

// IDX magic numbers: unsigned bytes, 3 dimensions (images) or 1 (labels).
inline constexpr std::uint32_t kImagesMagic = 0x00000803;
inline constexpr std::uint32_t kLabelsMagic = 0x00000801;

struct Images {
  std::size_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count × rows × cols, row-major

  std::size_t pixels_per_image() const noexcept { return rows * cols; }
};

// An IDX3 file of unsigned bytes.
Images read_images(const std::string& path);

// An IDX1 file of unsigned bytes, each < `classes`.
std::vector<std::uint8_t> read_labels(const std::string& path, int classes = kClasses);

struct Dataset {
  Images images;
  std::vector<std::uint8_t> labels;  // one per image

  std::size_t size() const noexcept { return images.count; }
};

enum class Split { train, test };

// "<dir>/train-images-idx3-ubyte.gz" and "<dir>/train-labels-idx1-ubyte.gz" (t10k-... for
// the test split), checked to hold the same number of examples, at least one.
Dataset load(const std::string& dir, Split split);

// Writes an IDX file, gzip-compressed when `gzip` (tests and tools make small data sets
// with it). `dims` are the sizes of the dimensions; `data` holds their product of bytes
// unless the caller wants a corrupt file. Throws Error when the file cannot be written.
void write_idx(const std::string& path, std::uint32_t magic, const std::vector<std::uint32_t>& dims,
               const std::vector<std::uint8_t>& data, bool gzip = true);

}  // namespace depengine::fashion_mnist
