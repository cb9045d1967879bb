// CPU 2-D transpose: square tiles small enough that a tile's rows of `a` and of `out`
// both stay in L1 while it is copied.
#include "depengine/ops/transpose.h"

#include <algorithm>

#include "parallel.h"

namespace depengine::ops::cpu {

void transpose(const RunContext&, const float* a, std::size_t rows, std::size_t cols,
               float* out) {
  constexpr std::size_t kTile = 32;
  const std::size_t row_tiles = detail::ceil_div(rows, kTile);
  // Parallel over bands of kTile rows of `a` (grain: enough bands for ~kElementGrain). Divided
  // in two steps: kTile · cols wraps (to 0 for cols = 2^59) when `a` has no rows.
  const std::size_t grain =
      std::max<std::size_t>(1, detail::kElementGrain / kTile / std::max<std::size_t>(cols, 1));
  detail::parallel_chunks(row_tiles, grain, [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t r0 = t * kTile, r1 = std::min(rows, r0 + kTile);
      for (std::size_t c0 = 0; c0 < cols; c0 += kTile) {
        const std::size_t c1 = std::min(cols, c0 + kTile);
        for (std::size_t r = r0; r < r1; ++r) {
          for (std::size_t c = c0; c < c1; ++c) out[c * rows + r] = a[r * cols + c];
        }
      }
    }
  });
}

}  // namespace depengine::ops::cpu
