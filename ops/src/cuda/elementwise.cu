// GPU elementwise kernels: one grid-stride loop per shape of op, the op chosen per element by
// a switch that is uniform across a warp.
#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

__device__ inline float apply_unary(Unary op, float x) {
  switch (op) {
    case Unary::neg: return -x;
    case Unary::exp: return expf(x);
    case Unary::log: return logf(x);
    case Unary::relu: return x > 0.0f ? x : 0.0f;
    case Unary::sigmoid: return 1.0f / (1.0f + expf(-x));
    case Unary::tanh: return tanhf(x);
    case Unary::sqrt: return sqrtf(x);
    case Unary::abs: return fabsf(x);
    case Unary::square: return x * x;
  }
  return x;
}

// As the CPU kernels' (NumPy's npy_divmodf).
__device__ inline float numpy_mod(float x, float y) {
  float r = fmodf(x, y);
  if (y == 0.0f) return r;
  if (r != 0.0f) {
    if ((y < 0.0f) != (r < 0.0f)) r += y;
  } else {
    r = copysignf(0.0f, y);
  }
  return r;
}

__device__ inline float numpy_floor_div(float x, float y) {
  if (y == 0.0f) return x / y;
  float r = fmodf(x, y);
  float q = (x - r) / y;
  if (r != 0.0f && (y < 0.0f) != (r < 0.0f)) q -= 1.0f;
  if (q == 0.0f) return copysignf(0.0f, x / y);
  float f = floorf(q);
  if (q - f > 0.5f) f += 1.0f;
  return f;
}

__device__ inline float apply_binary(Binary op, float x, float y) {
  switch (op) {
    case Binary::add: return x + y;
    case Binary::sub: return x - y;
    case Binary::mul: return x * y;
    case Binary::div: return x / y;
    case Binary::pow: return powf(x, y);
    case Binary::maximum: return isnan(x) || x > y ? x : y;
    case Binary::minimum: return isnan(x) || x < y ? x : y;
    case Binary::mod: return numpy_mod(x, y);
    case Binary::floor_div: return numpy_floor_div(x, y);
    case Binary::equal: return x == y ? 1.0f : 0.0f;
    case Binary::not_equal: return x != y ? 1.0f : 0.0f;
    case Binary::less: return x < y ? 1.0f : 0.0f;
    case Binary::less_equal: return x <= y ? 1.0f : 0.0f;
    case Binary::greater: return x > y ? 1.0f : 0.0f;
    case Binary::greater_equal: return x >= y ? 1.0f : 0.0f;
  }
  return x;
}

__global__ void unary_kernel(Unary op, const float* a, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    out[i] = apply_unary(op, a[i]);
  }
}

__global__ void binary_kernel(Binary op, const float* a, const float* b, float* out,
                              std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    out[i] = apply_binary(op, a[i], b[i]);
  }
}

__global__ void scalar_kernel(Binary op, const float* a, float s, bool scalar_first, float* out,
                              std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    out[i] = scalar_first ? apply_binary(op, s, a[i]) : apply_binary(op, a[i], s);
  }
}

__global__ void broadcast_kernel(Binary op, const float* a, const float* b, float* out,
                                 Broadcast bc, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    std::size_t rest = i, ia = 0, ib = 0;
    for (int d = bc.ndim - 1; d >= 0; --d) {
      const std::size_t idx = rest % bc.shape[d];
      rest /= bc.shape[d];
      ia += idx * bc.a_stride[d];
      ib += idx * bc.b_stride[d];
    }
    out[i] = apply_binary(op, a[ia], b[ib]);
  }
}

}  // namespace

void unary(const RunContext& ctx, Unary op, const float* a, float* out, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, name(op));
  if (n == 0) return;
  unary_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(op, a, out, n);
  detail::check_launch(ctx, name(op));
}

void binary(const RunContext& ctx, Binary op, const float* a, const float* b, float* out,
            std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, name(op));
  if (n == 0) return;
  binary_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(op, a, b, out, n);
  detail::check_launch(ctx, name(op));
}

void binary_scalar(const RunContext& ctx, Binary op, const float* a, float v, bool scalar_first,
                   float* out, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, name(op));
  if (n == 0) return;
  scalar_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(op, a, v, scalar_first, out, n);
  detail::check_launch(ctx, name(op));
}

void binary_broadcast(const RunContext& ctx, Binary op, const float* a, const float* b,
                      float* out, const Broadcast& shape) {
  cudaStream_t s = detail::stream_of(ctx, name(op));
  std::size_t n = 1;
  for (int d = 0; d < shape.ndim; ++d) n *= shape.shape[d];
  if (n == 0) return;
  broadcast_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(op, a, b, out, shape, n);
  detail::check_launch(ctx, name(op));
}

}  // namespace depengine::ops::cuda
