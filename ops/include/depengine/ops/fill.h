// depengine/ops/fill.h — fills, ranges and copies. Thread-safe.
//
//   depengine::ops::cpu::fill(ctx, out, n, 1.0f);
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops::cpu {

// out[i] = value.
void fill(const RunContext& ctx, float* out, std::size_t n, float value);

// out[i] = start + i · step, computed in double and rounded once.
void arange(const RunContext& ctx, float* out, std::size_t n, double start, double step);

// dst[i] = src[i]; the ranges must not overlap.
void copy(const RunContext& ctx, const float* src, float* dst, std::size_t n);

}  // namespace depengine::ops::cpu
