// GPU pooling: one thread per output for the forward; the backward gathers, one thread per
// input element over the windows that cover it in row-major order — the CPU's order of
// additions, without atomics.
#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

struct Window {
  std::size_t y0, y1, x0, x1;
};

__device__ inline Window window(const Pool2d& g, std::size_t y, std::size_t x) {
  const std::size_t ty = y * g.stride_h, tx = x * g.stride_w;
  const std::size_t ey = ty + g.kernel_h - g.pad_h, ex = tx + g.kernel_w - g.pad_w;
  return {ty > g.pad_h ? ty - g.pad_h : 0, ey < g.height ? ey : g.height,
          tx > g.pad_w ? tx - g.pad_w : 0, ex < g.width ? ex : g.width};
}

__device__ inline bool beats(float v, float best) {
  return v > best || (isnan(v) && !isnan(best));
}

__device__ inline std::size_t argmax(const Pool2d& g, const float* plane, const Window& w) {
  std::size_t at = w.y0 * g.width + w.x0;
  float best = plane[at];
  for (std::size_t i = w.y0; i < w.y1; ++i) {
    for (std::size_t j = w.x0; j < w.x1; ++j) {
      if (beats(plane[i * g.width + j], best)) {
        best = plane[i * g.width + j];
        at = i * g.width + j;
      }
    }
  }
  return at;
}

__device__ inline float divisor(const Pool2d& g, const Window& w) {
  return static_cast<float>(g.count_include_pad ? g.kernel_h * g.kernel_w
                                                : (w.y1 - w.y0) * (w.x1 - w.x0));
}

__global__ void forward_kernel(Pool op, Pool2d g, std::size_t oh, std::size_t ow, const float* x,
                               float* y) {
  const std::size_t total = g.batch * g.channels * oh * ow;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t j = e % ow, i = e / ow % oh, p = e / (ow * oh);
    const float* plane = x + p * g.height * g.width;
    const Window w = window(g, i, j);
    if (op == Pool::max) {
      y[e] = plane[argmax(g, plane, w)];
      continue;
    }
    float s = 0.0f;
    for (std::size_t r = w.y0; r < w.y1; ++r) {
      for (std::size_t c = w.x0; c < w.x1; ++c) s += plane[r * g.width + c];
    }
    y[e] = s / divisor(g, w);
  }
}

__global__ void backward_kernel(Pool op, Pool2d g, std::size_t oh, std::size_t ow,
                                const float* x, const float* dy, float* dx) {
  const std::size_t total = g.batch * g.channels * g.height * g.width;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t xx = e % g.width, yy = e / g.width % g.height, p = e / (g.width * g.height);
    const std::size_t self = yy * g.width + xx;
    const float* plane = x + p * g.height * g.width;
    const float* grad = dy + p * oh * ow;
    // Outputs i with i·s − pad <= yy < i·s − pad + k.
    const std::size_t ty = yy + g.pad_h, tx = xx + g.pad_w;
    const std::size_t i0 = ty + 1 > g.kernel_h ? (ty + 1 - g.kernel_h + g.stride_h - 1) / g.stride_h : 0;
    const std::size_t j0 = tx + 1 > g.kernel_w ? (tx + 1 - g.kernel_w + g.stride_w - 1) / g.stride_w : 0;
    const std::size_t i1 = ty / g.stride_h + 1 < oh ? ty / g.stride_h + 1 : oh;
    const std::size_t j1 = tx / g.stride_w + 1 < ow ? tx / g.stride_w + 1 : ow;
    float s = 0.0f;
    for (std::size_t i = i0; i < i1; ++i) {
      for (std::size_t j = j0; j < j1; ++j) {
        const Window w = window(g, i, j);
        if (op == Pool::max) {
          if (argmax(g, plane, w) == self) s += grad[i * ow + j];
        } else {
          s += grad[i * ow + j] / divisor(g, w);
        }
      }
    }
    dx[e] = s;
  }
}

}  // namespace

void pool2d_forward(const RunContext& ctx, Pool op, const Pool2d& g, const float* x, float* y) {
  cudaStream_t s = detail::stream_of(ctx, "pool2d_forward");
  check_pool2d("pool2d_forward", g);
  const std::size_t oh = g.out_h(), ow = g.out_w(), total = g.batch * g.channels * oh * ow;
  if (total == 0) return;
  forward_kernel<<<detail::blocks_for(total), detail::kThreads, 0, s>>>(op, g, oh, ow, x, y);
  detail::check_launch(ctx, "pool2d_forward");
}

void pool2d_backward(const RunContext& ctx, Pool op, const Pool2d& g, const float* x,
                     const float* dy, float* dx) {
  cudaStream_t s = detail::stream_of(ctx, "pool2d_backward");
  check_pool2d("pool2d_backward", g);
  const std::size_t total = g.batch * g.channels * g.height * g.width;
  if (total == 0) return;
  backward_kernel<<<detail::blocks_for(total), detail::kThreads, 0, s>>>(op, g, g.out_h(),
                                                                        g.out_w(), x, dy, dx);
  detail::check_launch(ctx, "pool2d_backward");
}

}  // namespace depengine::ops::cuda
