// depengine/ops/pooling.h — 2-D max and average pooling, NCHW, forward and backward.
//
//   depengine::ops::Pool2d g{.batch = 64, .channels = 64, .height = 24, .width = 24,
//                            .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
//   depengine::ops::cpu::pool2d_forward(ctx, depengine::ops::Pool::max, g, x, y);
//
// Windows start at oh·stride − pad (MXNet's "valid" convention: out = (in + 2·pad − kernel)
// / stride + 1). Max pooling ignores the padding; its gradient goes to the first maximum of
// each window in row-major order (NaN counts as the largest value, as in numpy), so it is
// the same on every run. Average pooling divides by kernel_h·kernel_w when
// count_include_pad (MXNet's and PyTorch's default), else by the window's elements inside
// the input. Global pooling is the case kernel = (height, width), stride 1, pad 0.
// The CPU kernels split the (image, channel) planes over oneTBB in fixed chunks; each plane
// is computed by one task in a fixed order, so results do not depend on the thread count.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "depengine/stream.h"

namespace depengine::ops {

enum class Pool : std::uint8_t { max, avg };

struct Pool2d {
  std::size_t batch = 0, channels = 0, height = 0, width = 0;
  std::size_t kernel_h = 0, kernel_w = 0;
  std::size_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;

  std::size_t out_h() const noexcept { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::size_t out_w() const noexcept { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
};

// Throws depengine::Error "<op>: ..." unless the kernel is at least 1×1 and fits in the
// padded input, the strides are at least 1 and each pad is smaller than the kernel (so
// every window holds at least one input element).
void check_pool2d(const char* op, const Pool2d& g);

namespace cpu {

// y (batch, channels, out_h, out_w) from x (batch, channels, height, width).
void pool2d_forward(const RunContext& ctx, Pool op, const Pool2d& g, const float* x, float* y);
// dx (like x, overwritten) from dy (like y); max pooling reads x to find each window's maximum.
void pool2d_backward(const RunContext& ctx, Pool op, const Pool2d& g, const float* x,
                     const float* dy, float* dx);

}  // namespace cpu
}  // namespace depengine::ops
