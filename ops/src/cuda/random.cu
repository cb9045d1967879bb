// GPU Philox4x32-10: element i of a call is word i%4 of block (key, counter + i/4), exactly
// as ops::cpu::random_*, so the same key and counter give the same uniform words. Uniforms
// use explicitly rounded multiply and add (no fused multiply-add), so they equal the CPU's.
#include <numbers>

#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

__device__ inline void philox(std::uint64_t key, std::uint64_t counter, std::uint32_t w[4]) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter);
  std::uint32_t c1 = static_cast<std::uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const std::uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0;
  w[1] = c1;
  w[2] = c2;
  w[3] = c3;
}

__device__ inline float unit(std::uint32_t word) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

__global__ void uniform_kernel(std::uint64_t key, std::uint64_t counter, float low, float span,
                               float* out, std::size_t n) {
  const std::size_t blocks = (n + 3) / 4;
  for (std::size_t b = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; b < blocks;
       b += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t w[4];
    philox(key, counter + b, w);
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) out[b * 4 + j] = __fadd_rn(low, __fmul_rn(span, unit(w[j])));
  }
}

__global__ void normal_kernel(std::uint64_t key, std::uint64_t counter, float mean, float stddev,
                              float* out, std::size_t n) {
  constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;
  const std::size_t blocks = (n + 3) / 4;
  for (std::size_t b = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; b < blocks;
       b += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t w[4];
    philox(key, counter + b, w);
    float v[4];
    for (int j = 0; j < 4; j += 2) {
      const float u1 = unit(w[j]) + 1.0f / 16777216.0f;
      const float u2 = unit(w[j + 1]);
      const float r = sqrtf(-2.0f * logf(u1));
      v[j] = mean + stddev * r * cosf(kTwoPi * u2);
      v[j + 1] = mean + stddev * r * sinf(kTwoPi * u2);
    }
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) out[b * 4 + j] = v[j];
  }
}

}  // namespace

void random_uniform(const RunContext& ctx, std::uint64_t key, std::uint64_t counter, float low,
                    float high, float* out, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "random_uniform");
  if (n == 0) return;
  uniform_kernel<<<detail::blocks_for((n + 3) / 4), detail::kThreads, 0, s>>>(key, counter, low,
                                                                              high - low, out, n);
  detail::check_launch(ctx, "random_uniform");
}

void random_normal(const RunContext& ctx, std::uint64_t key, std::uint64_t counter, float mean,
                   float stddev, float* out, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "random_normal");
  if (n == 0) return;
  normal_kernel<<<detail::blocks_for((n + 3) / 4), detail::kThreads, 0, s>>>(key, counter, mean,
                                                                             stddev, out, n);
  detail::check_launch(ctx, "random_normal");
}

}  // namespace depengine::ops::cuda
