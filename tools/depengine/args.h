// Command-line parsing shared by the `depengine` subcommands, and the one exit-code rule
// they follow:
//   0  success;
//   1  a runtime failure: a file that cannot be read or written (missing, a directory, a
//      FIFO where a data file belongs, a full disk), an op that failed, out of memory;
//   2  a usage error: an unknown flag, a missing or malformed value, a value out of its
//      range, a bad DEPENGINE_* environment variable, a malformed graph file. One line on
//      stderr names the flag (or variable, or op and field) and what it accepts.
// Every check that can fail with 2, and the check that outputs can be written, happens
// before a command starts its work.
#pragma once

#include <charconv>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace depengine::cli {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Bad command-line usage (exit code 2); the message names the flag and what it accepts.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "--name value" (or "--name=value") flags, switches and positional arguments, checked
// against what a command accepts. Getters throw UsageError for a value they cannot take.
//
//   const Args args(argc, argv, {"--threads"}, {"--quick"});
//   const int threads = args.integer("--threads", 4, 1, 1024);
class Args {
 public:
  // `valued`: flags that take a value; `switches`: flags that do not. Throws UsageError
  // for any other flag and for a valued flag without its value.
  Args(int argc, char** argv, std::vector<std::string> valued, std::vector<std::string> switches);

  bool has(const std::string& flag) const { return flags_.contains(flag); }
  std::string str(const std::string& flag, std::string fallback = "") const;
  // One of `choices`, or `fallback` when the flag is absent.
  std::string choice(const std::string& flag, std::string fallback,
                     const std::vector<std::string>& choices) const;
  // An integer in [lo, hi] (decimal digits, optionally '-', nothing else).
  template <class T>
  T integer(const std::string& flag, T fallback, T lo, T hi) const {
    auto it = flags_.find(flag);
    if (it == flags_.end()) return fallback;
    const std::string& s = it->second;
    T v{};
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
      throw UsageError(flag + " must be an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got '" + s + "'");
    }
    return v;
  }
  // Any integer that T holds, for a value whose range the caller checks (and names) later.
  template <class T>
  T any_integer(const std::string& flag, T fallback) const {
    auto it = flags_.find(flag);
    if (it == flags_.end()) return fallback;
    const std::string& s = it->second;
    T v{};
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      throw UsageError(flag + " must be an integer, got '" + s + "'");
    }
    return v;
  }
  // A finite number in [lo, hi].
  double number(const std::string& flag, double fallback, double lo, double hi) const;
  // A finite number in (0, hi].
  double positive(const std::string& flag, double fallback, double hi) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  const std::string* find(const std::string& flag) const;

  std::map<std::string, std::string> flags_;
  std::vector<std::string> positional_;
};

// Whether the arguments ask for --help (or -h).
bool wants_help(int argc, char** argv);

// Checks, before any work, that `path` (the value of `flag`) can be written: opens it for
// writing, creating it when it does not exist (and removing it again). Throws
// std::runtime_error naming the flag, the path and the reason (exit code 1). "-" (standard
// output) passes.
void check_writable(const std::string& flag, const std::string& path);

// Throws UsageError when two of the output flags in `flags` name the same file (the second
// write would replace the first) or both "-" (standard output), or one names an input file
// in `inputs` (it would replace the input; "-", standard input, is not a file).
void check_distinct_outputs(const Args& args, const std::vector<std::string>& flags,
                            const std::vector<std::string>& inputs = {});

}  // namespace depengine::cli
