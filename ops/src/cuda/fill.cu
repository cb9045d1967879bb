// GPU fills, ranges and device copies.
#include "common.cuh"
#include "depengine/ops/size.h"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

__global__ void fill_kernel(float* out, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

// As the CPU kernel: start + i · step in double (not fused, as on the CPU), rounded once.
__global__ void arange_kernel(float* out, std::size_t n, double start, double step) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<float>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
}

}  // namespace

void fill(const RunContext& ctx, float* out, std::size_t n, float value) {
  cudaStream_t s = detail::stream_of(ctx, "fill");
  if (n == 0) return;
  fill_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(out, n, value);
  detail::check_launch(ctx, "fill");
}

void arange(const RunContext& ctx, float* out, std::size_t n, double start, double step) {
  cudaStream_t s = detail::stream_of(ctx, "arange");
  if (n == 0) return;
  arange_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(out, n, start, step);
  detail::check_launch(ctx, "arange");
}

void copy(const RunContext& ctx, const float* src, float* dst, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "copy");
  if (n == 0) return;
  detail::check(
      cudaMemcpyAsync(dst, src, float_bytes(n, "copy"), cudaMemcpyDeviceToDevice, s), ctx,
      "copy (cudaMemcpyAsync)");
}

}  // namespace depengine::ops::cuda
