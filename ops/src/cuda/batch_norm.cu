// GPU batch normalization: one block per channel computes the channel's sums (a fixed-order
// block tree, in double) and then writes the channel's outputs.
#include "block_reduce.cuh"
#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

// The e-th element of channel c: e = o·inner + i.
__device__ inline std::size_t at(const BatchNorm& g, std::size_t c, std::size_t e) {
  return (e / g.inner * g.channels + c) * g.inner + e % g.inner;
}

__global__ void train_kernel(BatchNorm g, const float* x, const float* gamma, const float* beta,
                             float eps, float* y, float* mean, float* var, float* inv_std) {
  __shared__ double shared[detail::kReduceThreads];
  const std::size_t c = blockIdx.x, count = g.outer * g.inner;
  double s = 0.0;
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) s += x[at(g, c, e)];
  const double m = count ? detail::block_sum(s, shared) / static_cast<double>(count) : 0.0;
  double q = 0.0;
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    const double d = x[at(g, c, e)] - m;
    q += d * d;
  }
  const double v = count ? detail::block_sum(q, shared) / static_cast<double>(count) : 0.0;
  const double inv = 1.0 / sqrt(v + static_cast<double>(eps));
  if (threadIdx.x == 0) {
    mean[c] = static_cast<float>(m);
    var[c] = static_cast<float>(v);
    inv_std[c] = static_cast<float>(inv);
  }
  const double scale = (gamma ? gamma[c] : 1.0) * inv;
  const float fs = static_cast<float>(scale), fb = static_cast<float>(beta[c] - m * scale);
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    y[at(g, c, e)] = x[at(g, c, e)] * fs + fb;
  }
}

__global__ void infer_kernel(BatchNorm g, const float* x, const float* gamma, const float* beta,
                             const float* rmean, const float* rvar, float eps, float* y) {
  const std::size_t total = g.outer * g.channels * g.inner;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t c = e / g.inner % g.channels;
    const double inv = 1.0 / sqrt(static_cast<double>(rvar[c]) + eps);
    const double scale = (gamma ? gamma[c] : 1.0) * inv;
    y[e] = x[e] * static_cast<float>(scale) + static_cast<float>(beta[c] - rmean[c] * scale);
  }
}

// train == true: the training forward's gradient (mean, inv_std given); else the
// inference forward's (running statistics, constants).
__global__ void backward_kernel(BatchNorm g, bool train, const float* x, const float* dy,
                                const float* gamma, const float* mean, const float* inv_std,
                                const float* rvar, float eps, float* dx, float* dgamma,
                                float* dbeta) {
  __shared__ double shared[detail::kReduceThreads];
  const std::size_t c = blockIdx.x, count = g.outer * g.inner;
  const double m = mean[c];
  const double inv = train ? static_cast<double>(inv_std[c])
                           : 1.0 / sqrt(static_cast<double>(rvar[c]) + eps);
  double sd = 0.0, sx = 0.0;
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::size_t i = at(g, c, e);
    sd += dy[i];
    sx += static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - m);
  }
  sd = detail::block_sum(sd, shared);
  sx = detail::block_sum(sx, shared) * inv;
  if (threadIdx.x == 0) {
    if (dgamma) dgamma[c] = static_cast<float>(sx);
    dbeta[c] = static_cast<float>(sd);
  }
  const double k = (gamma ? gamma[c] : 1.0) * inv;
  const double n = count ? static_cast<double>(count) : 1.0;
  const double b = train ? -k * inv * sx / n : 0.0;
  const double d = train ? -k * sd / n - b * m : 0.0;
  const float fa = static_cast<float>(k), fb = static_cast<float>(b), fd = static_cast<float>(d);
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::size_t i = at(g, c, e);
    dx[i] = fa * dy[i] + fb * x[i] + fd;
  }
}

__global__ void update_kernel(std::size_t channels, float momentum, const float* mean,
                              const float* var, float* rmean, float* rvar) {
  for (std::size_t c = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; c < channels;
       c += std::size_t{gridDim.x} * blockDim.x) {
    rmean[c] = momentum * rmean[c] + (1.0f - momentum) * mean[c];
    rvar[c] = momentum * rvar[c] + (1.0f - momentum) * var[c];
  }
}

unsigned channel_blocks(const BatchNorm& g, const char* op) {
  if (g.channels > 0x7fffffffu) {
    throw Error(std::string(op) + ": " + std::to_string(g.channels) +
                " channels exceed the grid limit");
  }
  return static_cast<unsigned>(g.channels);
}

}  // namespace

void batch_norm_train(const RunContext& ctx, const BatchNorm& g, const float* x,
                      const float* gamma, const float* beta, float eps, float* y, float* mean,
                      float* var, float* inv_std) {
  cudaStream_t s = detail::stream_of(ctx, "batch_norm");
  if (g.channels == 0) return;
  train_kernel<<<channel_blocks(g, "batch_norm"), detail::kReduceThreads, 0, s>>>(
      g, x, gamma, beta, eps, y, mean, var, inv_std);
  detail::check_launch(ctx, "batch_norm");
}

void batch_norm_infer(const RunContext& ctx, const BatchNorm& g, const float* x,
                      const float* gamma, const float* beta, const float* running_mean,
                      const float* running_var, float eps, float* y) {
  cudaStream_t s = detail::stream_of(ctx, "batch_norm");
  const std::size_t total = g.outer * g.channels * g.inner;
  if (total == 0) return;
  infer_kernel<<<detail::blocks_for(total), detail::kThreads, 0, s>>>(g, x, gamma, beta,
                                                                      running_mean, running_var,
                                                                      eps, y);
  detail::check_launch(ctx, "batch_norm");
}

void batch_norm_backward(const RunContext& ctx, const BatchNorm& g, const float* x,
                         const float* dy, const float* gamma, const float* mean,
                         const float* inv_std, float* dx, float* dgamma, float* dbeta) {
  cudaStream_t s = detail::stream_of(ctx, "batch_norm_backward");
  if (g.channels == 0) return;
  backward_kernel<<<channel_blocks(g, "batch_norm_backward"), detail::kReduceThreads, 0, s>>>(
      g, true, x, dy, gamma, mean, inv_std, nullptr, 0.0f, dx, dgamma, dbeta);
  detail::check_launch(ctx, "batch_norm_backward");
}

void batch_norm_update_running(const RunContext& ctx, const BatchNorm& g, float momentum,
                               const float* mean, const float* var, float* running_mean,
                               float* running_var) {
  cudaStream_t s = detail::stream_of(ctx, "batch_norm");
  if (g.channels == 0) return;
  update_kernel<<<detail::blocks_for(g.channels), detail::kThreads, 0, s>>>(
      g.channels, momentum, mean, var, running_mean, running_var);
  detail::check_launch(ctx, "batch_norm");
}

void batch_norm_infer_backward(const RunContext& ctx, const BatchNorm& g, const float* x,
                               const float* dy, const float* gamma,
                               const float* running_mean, const float* running_var, float eps,
                               float* dx, float* dgamma, float* dbeta) {
  cudaStream_t s = detail::stream_of(ctx, "batch_norm_backward");
  if (g.channels == 0) return;
  backward_kernel<<<channel_blocks(g, "batch_norm_backward"), detail::kReduceThreads, 0, s>>>(
      g, false, x, dy, gamma, running_mean, nullptr, running_var, eps, dx, dgamma, dbeta);
  detail::check_launch(ctx, "batch_norm_backward");
}

}  // namespace depengine::ops::cuda
