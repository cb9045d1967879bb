// depengine/ops/transpose.h — 2-D transpose, in cache-sized tiles. Thread-safe.
//
//   depengine::ops::cpu::transpose(ctx, a, rows, cols, out);
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops::cpu {

// out (cols×rows) = aᵀ for a row-major rows×cols `a`; out must not alias a.
void transpose(const RunContext& ctx, const float* a, std::size_t rows, std::size_t cols,
               float* out);

}  // namespace depengine::ops::cpu
