// GPU softmax and NLL: one warp per line along the softmax axis (lane-strided sums in
// double, then a shuffle tree, the same order on every run); NLL one thread per row.
#include <cmath>

#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

constexpr unsigned kWarp = 32, kRowsPerBlock = 8;

__device__ inline double warp_sum(double v) {
  for (unsigned o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (unsigned o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Line r of [outer, len, inner]: its first element, the others `inner` apart.
__device__ inline std::size_t line_start(std::size_t r, std::size_t len, std::size_t inner) {
  return r / inner * len * inner + r % inner;
}

__global__ void forward_kernel(bool log, const float* x, std::size_t rows, std::size_t len,
                               std::size_t inner, float* y) {
  const std::size_t r = blockIdx.x * std::size_t{kRowsPerBlock} + threadIdx.y;
  if (r >= rows) return;  // the whole warp leaves together
  const float* z = x + line_start(r, len, inner);
  float* out = y + line_start(r, len, inner);
  float m = -INFINITY;
  for (std::size_t j = threadIdx.x; j < len; j += kWarp) m = fmaxf(m, z[j * inner]);
  m = warp_max(m);
  double d = 0.0;
  for (std::size_t j = threadIdx.x; j < len; j += kWarp) {
    d += exp(static_cast<double>(z[j * inner] - m));
  }
  d = warp_sum(d);
  if (log) {
    const float shift = m + static_cast<float>(::log(d));
    for (std::size_t j = threadIdx.x; j < len; j += kWarp) out[j * inner] = z[j * inner] - shift;
  } else {
    const double inv = 1.0 / d;
    for (std::size_t j = threadIdx.x; j < len; j += kWarp) {
      out[j * inner] = static_cast<float>(exp(static_cast<double>(z[j * inner] - m)) * inv);
    }
  }
}

__global__ void backward_kernel(bool log, const float* y, const float* dy, std::size_t rows,
                                std::size_t len, std::size_t inner, float* dx) {
  const std::size_t r = blockIdx.x * std::size_t{kRowsPerBlock} + threadIdx.y;
  if (r >= rows) return;
  const std::size_t at = line_start(r, len, inner);
  const float* yr = y + at;
  const float* dr = dy + at;
  float* out = dx + at;
  double s = 0.0;
  for (std::size_t j = threadIdx.x; j < len; j += kWarp) {
    const std::size_t e = j * inner;
    s += log ? static_cast<double>(dr[e]) : static_cast<double>(dr[e]) * yr[e];
  }
  const float sum = static_cast<float>(warp_sum(s));
  for (std::size_t j = threadIdx.x; j < len; j += kWarp) {
    const std::size_t e = j * inner;
    out[e] = log ? dr[e] - expf(yr[e]) * sum : yr[e] * (dr[e] - sum);
  }
}

__device__ inline bool valid_label(float label, std::size_t cols) {
  return label >= 0.0f && label < static_cast<float>(cols) && label == floorf(label);
}

__global__ void nll_kernel(const float* logp, const float* labels, std::size_t rows,
                           std::size_t cols, float* loss) {
  for (std::size_t r = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; r < rows;
       r += std::size_t{gridDim.x} * blockDim.x) {
    const float l = labels[r];
    loss[r] = valid_label(l, cols) ? -logp[r * cols + static_cast<std::size_t>(l)] : NAN;
  }
}

__global__ void nll_backward_kernel(const float* dloss, const float* labels, std::size_t rows,
                                    std::size_t cols, float* dlogp) {
  const std::size_t total = rows * cols;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t r = e / cols, j = e % cols;
    const float l = labels[r];
    dlogp[e] = !valid_label(l, cols) ? NAN : static_cast<std::size_t>(l) == j ? -dloss[r] : 0.0f;
  }
}

unsigned row_blocks(std::size_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

void check_rows(std::size_t rows, const char* op) {
  if ((rows + kRowsPerBlock - 1) / kRowsPerBlock > 0x7fffffffu) {
    throw Error(std::string(op) + ": " + std::to_string(rows) + " rows exceed the grid limit");
  }
}

}  // namespace

void softmax_forward(const RunContext& ctx, bool log, const float* x, std::size_t outer,
                     std::size_t len, std::size_t inner, float* y) {
  cudaStream_t s = detail::stream_of(ctx, "softmax_forward");
  const std::size_t rows = outer * inner;
  if (rows == 0 || len == 0) return;
  check_rows(rows, "softmax_forward");
  forward_kernel<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, s>>>(log, x, rows, len, inner,
                                                                         y);
  detail::check_launch(ctx, "softmax_forward");
}

void softmax_backward(const RunContext& ctx, bool log, const float* y, const float* dy,
                      std::size_t outer, std::size_t len, std::size_t inner, float* dx) {
  cudaStream_t s = detail::stream_of(ctx, "softmax_backward");
  const std::size_t rows = outer * inner;
  if (rows == 0 || len == 0) return;
  check_rows(rows, "softmax_backward");
  backward_kernel<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, s>>>(log, y, dy, rows, len,
                                                                          inner, dx);
  detail::check_launch(ctx, "softmax_backward");
}

void nll_loss_forward(const RunContext& ctx, const float* logp, const float* labels,
                      std::size_t rows, std::size_t cols, float* loss) {
  cudaStream_t s = detail::stream_of(ctx, "nll_loss");
  if (rows == 0) return;
  nll_kernel<<<detail::blocks_for(rows), detail::kThreads, 0, s>>>(logp, labels, rows, cols, loss);
  detail::check_launch(ctx, "nll_loss");
}

void nll_loss_backward(const RunContext& ctx, const float* dloss, const float* labels,
                       std::size_t rows, std::size_t cols, float* dlogp) {
  cudaStream_t s = detail::stream_of(ctx, "nll_loss_backward");
  if (rows == 0 || cols == 0) return;
  nll_backward_kernel<<<detail::blocks_for(rows * cols), detail::kThreads, 0, s>>>(
      dloss, labels, rows, cols, dlogp);
  detail::check_launch(ctx, "nll_loss_backward");
}

}  // namespace depengine::ops::cuda
