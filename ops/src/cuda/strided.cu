// GPU strided kernels: one thread per output element in a grid-stride loop, as the CPU's
// (each element computed once, reductions in the same row-major order).
#include <cmath>

#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

__global__ void strided_kernel(const float* src, std::ptrdiff_t src_offset, float* dst,
                               std::ptrdiff_t dst_offset, Strided s, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    std::size_t rest = i;
    std::ptrdiff_t is = src_offset, id = dst_offset;
    for (int d = s.ndim - 1; d >= 0; --d) {
      const auto idx = static_cast<std::ptrdiff_t>(rest % s.shape[d]);
      rest /= s.shape[d];
      is += idx * s.src_stride[d];
      id += idx * s.dst_stride[d];
    }
    dst[id] = src[is];
  }
}

__global__ void reduce_axes_kernel(Reduce op, const float* a, ReduceAxes r, std::size_t n,
                                   std::size_t count, float* out) {
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < n;
       j += std::size_t{gridDim.x} * blockDim.x) {
    std::size_t base = 0, rest = j;
    for (int d = r.out_ndim - 1; d >= 0; --d) {
      base += (rest % r.out_shape[d]) * r.out_stride[d];
      rest /= r.out_shape[d];
    }
    double sum = 0.0;
    float best = -INFINITY;
    bool nan = false;
    for (std::size_t k = 0; k < count; ++k) {
      std::size_t off = base, kr = k;
      for (int d = r.red_ndim - 1; d >= 0; --d) {
        off += (kr % r.red_shape[d]) * r.red_stride[d];
        kr /= r.red_shape[d];
      }
      const float v = a[off];
      sum += v;
      if (isnan(v)) nan = true;
      if (v > best) best = v;
    }
    if (op == Reduce::sum) {
      out[j] = static_cast<float>(sum);
    } else if (op == Reduce::mean) {
      out[j] = static_cast<float>(sum / static_cast<double>(count));
    } else {
      out[j] = nan ? NAN : best;
    }
  }
}

}  // namespace

void strided_copy(const RunContext& ctx, const float* src, std::ptrdiff_t src_offset, float* dst,
                  std::ptrdiff_t dst_offset, const Strided& s) {
  cudaStream_t st = detail::stream_of(ctx, "strided_copy");
  std::size_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.shape[d];
  if (n == 0) return;
  strided_kernel<<<detail::blocks_for(n), detail::kThreads, 0, st>>>(src, src_offset, dst,
                                                                     dst_offset, s, n);
  detail::check_launch(ctx, "strided_copy");
}

void reduce_axes(const RunContext& ctx, Reduce op, const float* a, const ReduceAxes& r,
                 float* out) {
  cudaStream_t st = detail::stream_of(ctx, "reduce_axes");
  std::size_t n = 1, count = 1;
  for (int d = 0; d < r.out_ndim; ++d) n *= r.out_shape[d];
  for (int d = 0; d < r.red_ndim; ++d) count *= r.red_shape[d];
  if (n == 0) return;
  reduce_axes_kernel<<<detail::blocks_for(n), detail::kThreads, 0, st>>>(op, a, r, n, count, out);
  detail::check_launch(ctx, "reduce_axes");
}

}  // namespace depengine::ops::cuda
