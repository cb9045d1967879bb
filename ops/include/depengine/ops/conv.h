// depengine/ops/conv.h — 2-D convolution, NCHW, with stride and zero padding (dilation 1):
// forward, and the gradients with respect to the input, the weight and the bias.
//
//   depengine::ops::Conv2d g{.batch = 64, .in_channels = 32, .height = 26, .width = 26,
//                            .out_channels = 64, .kernel_h = 3, .kernel_w = 3};
//   depengine::ops::check_conv2d("convolution", g);
//   depengine::ops::cpu::conv2d_forward(ctx, g, x, w, b, y);
//
// x is (batch, in_channels, height, width), w (out_channels, in_channels, kernel_h, kernel_w),
// b (out_channels,), y (batch, out_channels, out_h(), out_w()), all row-major.
// The CPU kernels lower each image to columns (im2col) and multiply with OpenBLAS
// (cblas_sgemm, one thread) in oneTBB tasks of fixed image chunks, inside the caller's
// arena; the forward pass of a stride-1 convolution with at most 512 taps
// (in_channels·kh·kw) runs as a direct convolution instead (AVX2, where the CPU has it). Every output element is computed by the same sequence of operations whatever the
// thread count (the weight gradient sums its per-chunk partial products in chunk order), so
// results are bitwise reproducible. Thread-safe: calls share no state.
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops {

struct Conv2d {
  std::size_t batch = 0, in_channels = 0, height = 0, width = 0;
  std::size_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  std::size_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;

  // (height + 2·pad_h − kernel_h) / stride_h + 1, for a geometry that passed check_conv2d.
  std::size_t out_h() const noexcept { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::size_t out_w() const noexcept { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
};

// Throws depengine::Error "<op>: ..." unless the kernel is at least 1×1 and fits in the
// padded input, the strides are at least 1, and every size the kernels compute (the
// columns of one image, the weight's rows) fits BLAS's int. The kernels call it first.
void check_conv2d(const char* op, const Conv2d& g);

namespace cpu {

// y = conv(x, w) + b; b may be nullptr (no bias). With relu, y = max(that, 0) as the
// elementwise relu computes it (y > 0 ? y : 0), applied before each output is stored (the
// CUDA twin has no relu: a GPU array composes convolution and relu).
void conv2d_forward(const RunContext& ctx, const Conv2d& g, const float* x, const float* w,
                    const float* b, float* y, bool relu = false);
// dx = the gradient of the forward's y with respect to x, given dy (overwritten, not added).
void conv2d_backward_data(const RunContext& ctx, const Conv2d& g, const float* dy,
                          const float* w, float* dx);
// dw = Σ over the batch of dy_n · im2col(x_n)ᵀ (overwritten).
void conv2d_backward_weight(const RunContext& ctx, const Conv2d& g, const float* x,
                            const float* dy, float* dw);
// db[k] = Σ over the batch and the output positions of dy[n, k] (overwritten).
void conv2d_backward_bias(const RunContext& ctx, const Conv2d& g, const float* dy, float* db);

}  // namespace cpu
}  // namespace depengine::ops
