// CPU pooling: one task per fixed chunk of (image, channel) planes; within a plane, windows
// in row-major order, so the gradients' additions happen in the same order on every run.
#include "depengine/ops/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "depengine/error.h"
#include "parallel.h"
#include "window.h"

namespace depengine::ops {

void check_pool2d(const char* op, const Pool2d& g) {
  detail::check_window(op, "kernel", g.height, g.width, g.kernel_h, g.kernel_w, g.stride_h,
                       g.stride_w, g.pad_h, g.pad_w);
  if (g.pad_h >= g.kernel_h || g.pad_w >= g.kernel_w) {
    throw Error(std::string(op) + ": pad (" + std::to_string(g.pad_h) + ", " +
                std::to_string(g.pad_w) + ") must be smaller than the kernel (" +
                std::to_string(g.kernel_h) + ", " + std::to_string(g.kernel_w) +
                "), so that every window holds an input element");
  }
}

namespace cpu {
namespace {

// Planes per task: about 16 Ki input elements.
std::size_t plane_grain(const Pool2d& g) {
  return std::max<std::size_t>(1, (16 * 1024) / std::max<std::size_t>(1, g.height * g.width));
}

inline bool beats(float v, float best) { return v > best || (std::isnan(v) && !std::isnan(best)); }

// The window of output (y, x), clipped to the input: rows [y0, y1), columns [x0, x1).
struct Window {
  std::size_t y0, y1, x0, x1;
};

inline Window window(const Pool2d& g, std::size_t y, std::size_t x) {
  const std::size_t ty = y * g.stride_h, tx = x * g.stride_w;  // + pad
  return {ty > g.pad_h ? ty - g.pad_h : 0, std::min(g.height, ty + g.kernel_h - g.pad_h),
          tx > g.pad_w ? tx - g.pad_w : 0, std::min(g.width, tx + g.kernel_w - g.pad_w)};
}

// The offset of the first maximum of the window within the plane.
inline std::size_t argmax(const Pool2d& g, const float* plane, const Window& w) {
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

inline float divisor(const Pool2d& g, const Window& w) {
  return static_cast<float>(g.count_include_pad ? g.kernel_h * g.kernel_w
                                                : (w.y1 - w.y0) * (w.x1 - w.x0));
}

// Max pooling without padding: every window lies inside the plane, so the loops need no
// clipping, and the maximum is a branch-free select (the first NaN, as in argmax, wins: once
// m is NaN nothing replaces it but another NaN).
void max_unpadded(const Pool2d& g, std::size_t oh, std::size_t ow, const float* plane,
                  float* dst) {
  for (std::size_t i = 0; i < oh; ++i) {
    float* __restrict o = dst + i * ow;
    const float* top = plane + i * g.stride_h * g.width;
    for (std::size_t j = 0; j < ow; ++j) o[j] = top[j * g.stride_w];
    for (std::size_t r = 0; r < g.kernel_h; ++r) {
      const float* __restrict row = top + r * g.width;
      for (std::size_t c = r == 0 ? 1 : 0; c < g.kernel_w; ++c) {
        for (std::size_t j = 0; j < ow; ++j) {
          const float v = row[j * g.stride_w + c], m = o[j];
          o[j] = (v > m || (v != v && m == m)) ? v : m;
        }
      }
    }
  }
}

// Whether the windows tile the plane without overlapping (stride = kernel, as in the usual
// 2×2 max-pooling): every input row belongs to at most one row of windows.
bool tiles(const Pool2d& g) { return g.stride_h == g.kernel_h && g.stride_w == g.kernel_w; }

// The max-pooling gradient without padding: each window's first maximum (argmax's rule, by
// the same selects as max_unpadded) gets the window's dy, in row-major window order. The
// maxima of a row of windows are found together (the selects vectorize across windows), then
// the gradients are added one window after another. dst is zero beforehand, except where the
// windows tile the plane: then each row of windows zeroes its own input rows just before
// adding into them (while they are in cache), and the rows below the last window row are
// zeroed at the end, so the plane is written once instead of filled and then updated.
void max_backward_unpadded(const Pool2d& g, std::size_t oh, std::size_t ow, const float* plane,
                           const float* grad, float* dst) {
  const bool tiled = tiles(g);
  thread_local std::vector<float> best;
  thread_local std::vector<std::uint32_t> offset;  // from the window's origin; < kh·width
  if (best.size() < ow) {
    best.resize(ow);
    offset.resize(ow);
  }
  float* __restrict m = best.data();
  std::uint32_t* __restrict at = offset.data();
  for (std::size_t i = 0; i < oh; ++i) {
    const float* top = plane + i * g.stride_h * g.width;
    for (std::size_t j = 0; j < ow; ++j) {
      m[j] = top[j * g.stride_w];
      at[j] = 0;
    }
    for (std::size_t r = 0; r < g.kernel_h; ++r) {
      const float* __restrict row = top + r * g.width;
      for (std::size_t c = r == 0 ? 1 : 0; c < g.kernel_w; ++c) {
        const auto here = static_cast<std::uint32_t>(r * g.width + c);
        for (std::size_t j = 0; j < ow; ++j) {
          const float v = row[j * g.stride_w + c];
          // Non-short-circuit & and |: a select without branches (with || and &&, g++
          // branches on each comparison, and random data mispredicts half of them).
          const bool take = (v > m[j]) | ((v != v) & (m[j] == m[j]));
          m[j] = take ? v : m[j];
          at[j] = take ? here : at[j];
        }
      }
    }
    float* out = dst + i * g.stride_h * g.width;
    if (tiled) std::fill(out, out + g.kernel_h * g.width, 0.0f);
    for (std::size_t j = 0; j < ow; ++j) out[j * g.stride_w + at[j]] += grad[i * ow + j];
  }
  if (tiled) std::fill(dst + oh * g.kernel_h * g.width, dst + g.height * g.width, 0.0f);
}

}  // namespace

void pool2d_forward(const RunContext&, Pool op, const Pool2d& g, const float* x, float* y) {
  check_pool2d("pool2d_forward", g);
  const std::size_t oh = g.out_h(), ow = g.out_w(), in = g.height * g.width, out = oh * ow;
  const bool unpadded = op == Pool::max && g.pad_h == 0 && g.pad_w == 0;
  detail::parallel_chunks(g.batch * g.channels, plane_grain(g), [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const float* plane = x + p * in;
      float* dst = y + p * out;
      if (unpadded) {
        max_unpadded(g, oh, ow, plane, dst);
        continue;
      }
      for (std::size_t i = 0; i < oh; ++i) {
        for (std::size_t j = 0; j < ow; ++j) {
          const Window w = window(g, i, j);
          if (op == Pool::max) {
            dst[i * ow + j] = plane[argmax(g, plane, w)];
            continue;
          }
          float s = 0.0f;
          for (std::size_t r = w.y0; r < w.y1; ++r) {
            for (std::size_t c = w.x0; c < w.x1; ++c) s += plane[r * g.width + c];
          }
          dst[i * ow + j] = s / divisor(g, w);
        }
      }
    }
  });
}

void pool2d_backward(const RunContext&, Pool op, const Pool2d& g, const float* x,
                     const float* dy, float* dx) {
  check_pool2d("pool2d_backward", g);
  const std::size_t oh = g.out_h(), ow = g.out_w(), in = g.height * g.width, out = oh * ow;
  // (The window offsets of max_backward_unpadded are 32-bit.)
  const bool unpadded = op == Pool::max && g.pad_h == 0 && g.pad_w == 0 &&
                        g.kernel_h * g.width <= UINT32_MAX;
  detail::parallel_chunks(g.batch * g.channels, plane_grain(g), [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const float* plane = x + p * in;
      const float* grad = dy + p * out;
      float* dst = dx + p * in;
      if (unpadded) {
        if (!tiles(g)) std::fill(dst, dst + in, 0.0f);
        max_backward_unpadded(g, oh, ow, plane, grad, dst);
        continue;
      }
      std::fill(dst, dst + in, 0.0f);
      for (std::size_t i = 0; i < oh; ++i) {
        for (std::size_t j = 0; j < ow; ++j) {
          const Window w = window(g, i, j);
          const float d = grad[i * ow + j];
          if (op == Pool::max) {
            dst[argmax(g, plane, w)] += d;
            continue;
          }
          const float share = d / divisor(g, w);
          for (std::size_t r = w.y0; r < w.y1; ++r) {
            for (std::size_t c = w.x0; c < w.x1; ++c) dst[r * g.width + c] += share;
          }
        }
      }
    }
  });
}

}  // namespace cpu
}  // namespace depengine::ops
