// depengine/ops/elementwise.h — elementwise kernels: unary maps, binary maps, binary maps
// with a scalar, and binary maps with broadcasting.
//
// Every kernel takes the RunContext of the operation that calls it (a CUDA build reads its
// stream from there), raw float32 pointers and sizes. Outputs may alias inputs exactly (an
// in-place `x += y`), never partially. Results do not depend on the number of threads.
//
//   engine.push([=](const depengine::RunContext& ctx) {
//     depengine::ops::cpu::binary(ctx, depengine::ops::Binary::add, a, b, out, n);
//   }, {va, vb}, {vout});
//
// Kernels are thread-safe: they share no state between calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "depengine/stream.h"

namespace depengine::ops {

enum class Unary : std::uint8_t { neg, exp, log, relu, sigmoid, tanh, sqrt, abs, square };
// mod and floor_div follow NumPy's sign rule (the remainder has the divisor's sign, and
// x == floor_div(x, y) · y + mod(x, y)); the comparisons give 1.0f where they hold, else 0.0f.
enum class Binary : std::uint8_t {
  add, sub, mul, div, pow, maximum, minimum, mod, floor_div,
  equal, not_equal, less, less_equal, greater, greater_equal
};

// "neg", "exp", ...; "add", "sub", ... (used in error messages and op names).
const char* name(Unary op) noexcept;
const char* name(Binary op) noexcept;

// The scalar reference of each op, used by the kernels and by tests.
float apply(Unary op, float x) noexcept;
float apply(Binary op, float x, float y) noexcept;

// A broadcast binary op, its output shape collapsed to at most kMaxDims dimensions. Strides
// are in elements, row-major, 0 along a dimension where the input is broadcast.
struct Broadcast {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  std::size_t shape[kMaxDims] = {};
  std::size_t a_stride[kMaxDims] = {};
  std::size_t b_stride[kMaxDims] = {};
};

namespace cpu {

// out[i] = op(a[i]) for i < n.
void unary(const RunContext& ctx, Unary op, const float* a, float* out, std::size_t n);

// out[i] = op(a[i], b[i]) for i < n.
void binary(const RunContext& ctx, Binary op, const float* a, const float* b, float* out,
            std::size_t n);

// out[i] = op(a[i], s), or op(s, a[i]) when `scalar_first` (for `2.0f - x`).
void binary_scalar(const RunContext& ctx, Binary op, const float* a, float s,
                   bool scalar_first, float* out, std::size_t n);

// out[idx] = op(a[idx · a_stride], b[idx · b_stride]) over every index of `shape`.
void binary_broadcast(const RunContext& ctx, Binary op, const float* a, const float* b,
                      float* out, const Broadcast& shape);

}  // namespace cpu
}  // namespace depengine::ops
