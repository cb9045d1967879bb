// depengine/ops/reduce.h — reductions over a whole array or along one axis.
//
// Sums accumulate in double over fixed blocks whose partial results are combined in a
// fixed order, so a result is the same bits on any number of threads. Thread-safe.
//
//   depengine::ops::cpu::reduce_all(ctx, depengine::ops::Reduce::sum, a, n, out);
#pragma once

#include <cstddef>
#include <cstdint>

#include "depengine/stream.h"

namespace depengine::ops {

// argmax writes the index (first occurrence) as a float, exact below 2^24. max and argmax
// treat NaN as the largest value, as numpy does.
enum class Reduce : std::uint8_t { sum, mean, max, argmax };

const char* name(Reduce op) noexcept;

namespace cpu {

// out[0] = op(a[0..n)). max and argmax need n > 0; sum of nothing is 0, mean NaN.
void reduce_all(const RunContext& ctx, Reduce op, const float* a, std::size_t n, float* out);

// `a` viewed as [outer, len, inner] row-major; out[o·inner + i] = op over k of
// a[(o·len + k)·inner + i]. max and argmax need len > 0.
void reduce_axis(const RunContext& ctx, Reduce op, const float* a, std::size_t outer,
                 std::size_t len, std::size_t inner, float* out);

}  // namespace cpu
}  // namespace depengine::ops
