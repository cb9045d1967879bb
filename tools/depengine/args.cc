#include "args.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace depengine::cli {
namespace {

bool listed(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// 1000, 0.5, 1e6 (not %g's 1e+06).
std::string format_bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  if (const std::size_t e = s.find("e+"); e != std::string::npos) {
    const std::size_t digits = s.find_first_not_of('0', e + 2);
    s = s.substr(0, e + 1) + s.substr(digits == std::string::npos ? s.size() : digits);
  }
  return s;
}

// A finite number (from_chars: no leading spaces, no locale), or UsageError.
double parse_finite(const std::string& flag, const std::string& s, const std::string& range) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) {
    throw UsageError(flag + " must be a number in " + range + ", got '" + s + "'");
  }
  return v;
}

}  // namespace

Args::Args(int argc, char** argv, std::vector<std::string> valued,
           std::vector<std::string> switches) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-' && a != "-") {
      std::string value;
      bool has_value = false;
      if (const std::size_t eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_value = true;
      }
      if (listed(switches, a)) {
        if (has_value) throw UsageError(a + " takes no value");
        flags_[a] = "1";
      } else if (listed(valued, a)) {
        if (!has_value) {
          if (i + 1 >= argc) throw UsageError(a + " needs a value");
          value = argv[++i];
        }
        flags_[a] = value;
      } else {
        throw UsageError("unknown option '" + a + "'");
      }
    } else {
      positional_.push_back(a);
    }
  }
}

const std::string* Args::find(const std::string& flag) const {
  auto it = flags_.find(flag);
  return it == flags_.end() ? nullptr : &it->second;
}

std::string Args::str(const std::string& flag, std::string fallback) const {
  const std::string* v = find(flag);
  return v ? *v : fallback;
}

std::string Args::choice(const std::string& flag, std::string fallback,
                         const std::vector<std::string>& choices) const {
  const std::string* v = find(flag);
  if (!v) return fallback;
  if (!listed(choices, *v)) {
    std::string list;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    }
    throw UsageError(flag + " must be " + list + ", got '" + *v + "'");
  }
  return *v;
}

double Args::number(const std::string& flag, double fallback, double lo, double hi) const {
  const std::string* s = find(flag);
  if (!s) return fallback;
  const std::string range = "[" + format_bound(lo) + ", " + format_bound(hi) + "]";
  const double v = parse_finite(flag, *s, range);
  if (v < lo || v > hi) {
    throw UsageError(flag + " must be a number in " + range + ", got '" + *s + "'");
  }
  return v;
}

double Args::positive(const std::string& flag, double fallback, double hi) const {
  const std::string* s = find(flag);
  if (!s) return fallback;
  const std::string range = "(0, " + format_bound(hi) + "]";
  const double v = parse_finite(flag, *s, range);
  if (!(v > 0) || v > hi) {
    throw UsageError(flag + " must be a number in " + range + ", got '" + *s + "'");
  }
  return v;
}

bool wants_help(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  }
  return false;
}

void check_writable(const std::string& flag, const std::string& path) {
  if (path == "-") return;
  // O_EXCL tells a file this check created (removed again, so a run that fails later leaves
  // nothing behind) from one that was there (opened, never truncated here).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return;
  }
  if (errno == EEXIST) {
    // O_NONBLOCK: a FIFO with no reader yet fails with ENXIO instead of blocking; writing
    // to it later is what the caller asked for.
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    if (errno == ENXIO) return;
  }
  throw std::runtime_error(flag + " '" + path + "': cannot write: " + std::strerror(errno));
}

namespace {
// The file a path names, for comparing paths: canonical where it can be resolved.
std::filesystem::path same_file_key(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) p = std::filesystem::path(path).lexically_normal();
  return p;
}
}  // namespace

void check_distinct_outputs(const Args& args, const std::vector<std::string>& flags,
                            const std::vector<std::string>& inputs) {
  std::vector<std::pair<std::string, std::filesystem::path>> seen;
  std::string to_stdout;  // the first output flag given "-"
  for (const std::string& f : flags) {
    if (!args.has(f)) continue;
    if (args.str(f) == "-") {
      // Two of them would interleave into one stream that no reader parses.
      if (!to_stdout.empty()) {
        throw UsageError(to_stdout + " '-' and " + f + " '-' both write to standard output");
      }
      to_stdout = f;
      continue;
    }
    std::filesystem::path p = same_file_key(args.str(f));
    for (const std::string& in : inputs) {
      if (in != "-" && same_file_key(in) == p) {
        throw UsageError(f + " '" + args.str(f) + "' names the input file '" + in +
                         "' (writing it would replace the input)");
      }
    }
    for (const auto& [other, q] : seen) {
      if (p == q) {
        throw UsageError(other + " '" + args.str(other) + "' and " + f + " '" + args.str(f) +
                         "' name the same file");
      }
    }
    seen.emplace_back(f, std::move(p));
  }
}

}  // namespace depengine::cli
