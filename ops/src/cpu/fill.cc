// CPU fills, ranges and copies.
#include "depengine/ops/fill.h"

#include <algorithm>
#include <cstring>

#include "parallel.h"

namespace depengine::ops::cpu {

using detail::kElementGrain;
using detail::parallel_chunks;

void fill(const RunContext&, float* out, std::size_t n, float value) {
  parallel_chunks(n, kElementGrain,
                  [&](std::size_t b, std::size_t e) { std::fill(out + b, out + e, value); });
}

void arange(const RunContext&, float* out, std::size_t n, double start, double step) {
  parallel_chunks(n, kElementGrain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      out[i] = static_cast<float>(start + static_cast<double>(i) * step);
    }
  });
}

void copy(const RunContext&, const float* src, float* dst, std::size_t n) {
  parallel_chunks(n, kElementGrain, [&](std::size_t b, std::size_t e) {
    std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
  });
}

}  // namespace depengine::ops::cpu
