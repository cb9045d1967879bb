// The checks that convolution and pooling share: a sliding window over a padded plane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "depengine/error.h"

namespace depengine::ops::detail {

// Throws Error "<op>: <what> (kh, kw) ..." unless kh, kw >= 1, the strides >= 1 and the
// window fits in the padded (height, width) plane. A padding so large that the padded size
// wraps is rejected too.
inline void check_window(const char* op, const char* what, std::size_t height,
                         std::size_t width, std::size_t kh, std::size_t kw, std::size_t sh,
                         std::size_t sw, std::size_t ph, std::size_t pw) {
  // Appended piece by piece: g++ 12 at -O3 warns (-Wrestrict, a false positive) on
  // "(" + std::to_string(a).
  auto pair = [](std::size_t a, std::size_t b) {
    std::string s(1, '(');
    s += std::to_string(a);
    s += ", ";
    s += std::to_string(b);
    s += ')';
    return s;
  };
  const std::string o = std::string(op) + ": ";
  if (kh == 0 || kw == 0) throw Error(o + what + " " + pair(kh, kw) + " is empty");
  if (sh == 0 || sw == 0) throw Error(o + "stride " + pair(sh, sw) + " must be at least 1");
  constexpr std::size_t kMaxPad = SIZE_MAX / 4;
  if (ph > kMaxPad || pw > kMaxPad || height > kMaxPad || width > kMaxPad) {
    throw Error(o + "padding " + pair(ph, pw) + " of a " + pair(height, width) +
                " input is too large");
  }
  if (kh > height + 2 * ph || kw > width + 2 * pw) {
    throw Error(o + what + " " + pair(kh, kw) + " is larger than the padded input " +
                pair(height + 2 * ph, width + 2 * pw) + " (input " + pair(height, width) +
                ", pad " + pair(ph, pw) + ")");
  }
}

}  // namespace depengine::ops::detail
