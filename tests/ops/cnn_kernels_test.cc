// The CNN kernels of depengine::ops (conv.h, pooling.h, softmax.h, batch_norm.h) on the CPU
// against direct loops in double: padding and stride cases, kernels that do not fit, bad
// labels, and the same bits in arenas of 1 and 2 threads (fixed chunking).
#include <gtest/gtest.h>

#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "depengine/ops/batch_norm.h"
#include "depengine/ops/conv.h"
#include "depengine/ops/pooling.h"
#include "depengine/ops/softmax.h"
#include "support/test_support.h"

namespace depengine::ops {
namespace {

using depengine::test::expect_error;
using depengine::test::ints;

const RunContext kCtx{};

std::vector<float> reals(std::size_t n, unsigned seed) {
  std::vector<float> v = ints(n, -1000, 1000, seed);
  for (float& x : v) x /= 500.0f;
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want,
                 const char* what, double tol = 1e-4) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " at " << i;
  }
}

// ---- convolution -------------------------------------------------------------------------

struct ConvData {
  Conv2d g;
  std::vector<float> x, w, b, dy;
  std::size_t oh, ow;
};

ConvData conv_data(const Conv2d& g, unsigned seed) {
  ConvData d{g, {}, {}, {}, {}, g.out_h(), g.out_w()};
  d.x = reals(g.batch * g.in_channels * g.height * g.width, seed);
  d.w = reals(g.out_channels * g.in_channels * g.kernel_h * g.kernel_w, seed + 1);
  d.b = reals(g.out_channels, seed + 2);
  d.dy = reals(g.batch * g.out_channels * d.oh * d.ow, seed + 3);
  return d;
}

// Calls f(n, k, c, oy, ox, i, j, x index, y index) for every tap that reads the input.
template <class F>
void each_tap(const ConvData& d, F&& f) {
  const Conv2d& g = d.g;
  for (std::size_t n = 0; n < g.batch; ++n)
    for (std::size_t k = 0; k < g.out_channels; ++k)
      for (std::size_t oy = 0; oy < d.oh; ++oy)
        for (std::size_t ox = 0; ox < d.ow; ++ox)
          for (std::size_t c = 0; c < g.in_channels; ++c)
            for (std::size_t i = 0; i < g.kernel_h; ++i)
              for (std::size_t j = 0; j < g.kernel_w; ++j) {
                const long iy = static_cast<long>(oy * g.stride_h + i) - static_cast<long>(g.pad_h);
                const long ix = static_cast<long>(ox * g.stride_w + j) - static_cast<long>(g.pad_w);
                if (iy < 0 || ix < 0 || iy >= static_cast<long>(g.height) ||
                    ix >= static_cast<long>(g.width)) {
                  continue;
                }
                const std::size_t xi =
                    ((n * g.in_channels + c) * g.height + static_cast<std::size_t>(iy)) * g.width +
                    static_cast<std::size_t>(ix);
                const std::size_t yi = ((n * g.out_channels + k) * d.oh + oy) * d.ow + ox;
                const std::size_t wi = ((k * g.in_channels + c) * g.kernel_h + i) * g.kernel_w + j;
                f(xi, yi, wi, k);
              }
}

const Conv2d kConvCases[] = {
    {.batch = 2, .in_channels = 3, .height = 7, .width = 6, .out_channels = 4, .kernel_h = 3, .kernel_w = 3},
    {.batch = 3, .in_channels = 2, .height = 9, .width = 8, .out_channels = 5, .kernel_h = 3, .kernel_w = 2,
     .stride_h = 2, .stride_w = 3, .pad_h = 1, .pad_w = 2},
    {.batch = 1, .in_channels = 4, .height = 5, .width = 5, .out_channels = 3, .kernel_h = 1, .kernel_w = 1},
    {.batch = 2, .in_channels = 1, .height = 4, .width = 4, .out_channels = 2, .kernel_h = 5, .kernel_w = 5,
     .pad_h = 2, .pad_w = 2},
    {.batch = 2, .in_channels = 2, .height = 6, .width = 6, .out_channels = 2, .kernel_h = 2, .kernel_w = 2,
     .stride_h = 2, .stride_w = 2},
    {.batch = 1, .in_channels = 1, .height = 3, .width = 3, .out_channels = 1, .kernel_h = 3, .kernel_w = 3},
    // Stride 1, few taps and rows of at least 8 outputs: the forward's direct convolution
    // (on AVX2 CPUs), with rows of 3, 2+2 and 1 vectors (the last one overlapping where 8
    // does not divide the width), channel counts that leave partial tiles, and padding.
    {.batch = 2, .in_channels = 3, .height = 5, .width = 26, .out_channels = 5, .kernel_h = 3, .kernel_w = 3},
    {.batch = 2, .in_channels = 2, .height = 9, .width = 30, .out_channels = 13, .kernel_h = 2, .kernel_w = 5,
     .pad_w = 2},
    {.batch = 3, .in_channels = 1, .height = 12, .width = 28, .out_channels = 9, .kernel_h = 3, .kernel_w = 3,
     .pad_h = 1, .pad_w = 1},
    {.batch = 1, .in_channels = 4, .height = 6, .width = 10, .out_channels = 10, .kernel_h = 3, .kernel_w = 3},
    {.batch = 1, .in_channels = 2, .height = 4, .width = 11, .out_channels = 3, .kernel_h = 1, .kernel_w = 2},
    // Rows of 20 and 12: fewer than 8 per vector of the row's ⌈ow/8⌉ (groups of 2 + 1, 1 + 1).
    {.batch = 1, .in_channels = 3, .height = 5, .width = 22, .out_channels = 7, .kernel_h = 3, .kernel_w = 3},
    {.batch = 2, .in_channels = 1, .height = 3, .width = 14, .out_channels = 2, .kernel_h = 3, .kernel_w = 3},
};

TEST(OpsConv, ForwardMatchesDirectLoop) {
  unsigned seed = 10;
  for (const Conv2d& g : kConvCases) {
    const ConvData d = conv_data(g, seed += 10);
    std::vector<double> want(d.dy.size());
    for (std::size_t yi = 0; yi < want.size(); ++yi) want[yi] = d.b[yi / (d.oh * d.ow) % g.out_channels];
    each_tap(d, [&](std::size_t xi, std::size_t yi, std::size_t wi, std::size_t) {
      want[yi] += static_cast<double>(d.x[xi]) * d.w[wi];
    });
    std::vector<float> y(want.size());
    cpu::conv2d_forward(kCtx, g, d.x.data(), d.w.data(), d.b.data(), y.data());
    expect_near(y, want, "forward");
    // relu fused: the plain forward's outputs through the elementwise relu's select, bitwise.
    std::vector<float> r(want.size());
    cpu::conv2d_forward(kCtx, g, d.x.data(), d.w.data(), d.b.data(), r.data(), true);
    for (float& v : y) v = v > 0.0f ? v : 0.0f;
    EXPECT_EQ(std::memcmp(r.data(), y.data(), y.size() * sizeof(float)), 0) << "relu";
    // No bias.
    cpu::conv2d_forward(kCtx, g, d.x.data(), d.w.data(), nullptr, y.data());
    for (std::size_t yi = 0; yi < want.size(); ++yi) want[yi] -= d.b[yi / (d.oh * d.ow) % g.out_channels];
    expect_near(y, want, "forward without bias");
  }
}

TEST(OpsConv, BackwardMatchesDirectLoop) {
  unsigned seed = 100;
  for (const Conv2d& g : kConvCases) {
    const ConvData d = conv_data(g, seed += 10);
    std::vector<double> dx(d.x.size()), dw(d.w.size()), db(g.out_channels);
    each_tap(d, [&](std::size_t xi, std::size_t yi, std::size_t wi, std::size_t) {
      dx[xi] += static_cast<double>(d.dy[yi]) * d.w[wi];
      dw[wi] += static_cast<double>(d.dy[yi]) * d.x[xi];
    });
    for (std::size_t yi = 0; yi < d.dy.size(); ++yi) db[yi / (d.oh * d.ow) % g.out_channels] += d.dy[yi];
    std::vector<float> gx(dx.size(), 7.0f), gw(dw.size(), 7.0f), gb(db.size(), 7.0f);
    cpu::conv2d_backward_data(kCtx, g, d.dy.data(), d.w.data(), gx.data());
    cpu::conv2d_backward_weight(kCtx, g, d.x.data(), d.dy.data(), gw.data());
    cpu::conv2d_backward_bias(kCtx, g, d.dy.data(), gb.data());
    expect_near(gx, dx, "backward data");
    expect_near(gw, dw, "backward weight");
    expect_near(gb, db, "backward bias");
  }
}

TEST(OpsConv, KernelLargerThanPaddedInputIsAnError) {
  const Conv2d g{.batch = 1, .in_channels = 1, .height = 4, .width = 4, .out_channels = 1,
                 .kernel_h = 5, .kernel_w = 3};
  std::vector<float> x(16), w(15), y(16);
  expect_error([&] { cpu::conv2d_forward(kCtx, g, x.data(), w.data(), nullptr, y.data()); },
               {"conv2d_forward", "kernel (5, 3) is larger than the padded input (4, 4)"});
  Conv2d s = g;
  s.kernel_h = 3;
  s.stride_w = 0;
  expect_error([&] { check_conv2d("convolution", s); }, {"convolution", "stride (1, 0)"});
  Conv2d c = g;
  c.in_channels = 0;
  expect_error([&] { check_conv2d("convolution", c); }, {"convolution", "channels"});
  Conv2d p = g;
  p.pad_h = std::numeric_limits<std::size_t>::max() / 2;
  expect_error([&] { check_conv2d("convolution", p); }, {"convolution", "too large"});
}

// Runs f in an arena of `threads` threads.
template <class F>
void in_arena(int threads, F&& f) {
  oneapi::tbb::task_arena arena(threads);
  arena.execute(f);
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

void expect_conv_same_bits(const Conv2d& g) {
  const ConvData d = conv_data(g, 7);
  auto run = [&](int threads) {
    std::vector<float> y(d.dy.size()), dx(d.x.size()), dw(d.w.size()), db(d.b.size());
    in_arena(threads, [&] {
      cpu::conv2d_forward(kCtx, g, d.x.data(), d.w.data(), d.b.data(), y.data());
      cpu::conv2d_backward_data(kCtx, g, d.dy.data(), d.w.data(), dx.data());
      cpu::conv2d_backward_weight(kCtx, g, d.x.data(), d.dy.data(), dw.data());
      cpu::conv2d_backward_bias(kCtx, g, d.dy.data(), db.data());
    });
    return std::vector<std::vector<float>>{y, dx, dw, db};
  };
  const auto one = run(1), two = run(2);
  const char* names[] = {"forward", "backward data", "backward weight", "backward bias"};
  for (std::size_t i = 0; i < one.size(); ++i) expect_same_bits(one[i], two[i], names[i]);
}

TEST(OpsConv, SameBitsOnOneAndTwoThreads) {
  // 20 images of 115 Ki multiply-adds: several chunks of images, and several partial
  // weight gradients.
  expect_conv_same_bits({.batch = 20, .in_channels = 8, .height = 12, .width = 12,
                         .out_channels = 16, .kernel_h = 3, .kernel_w = 3, .pad_h = 1,
                         .pad_w = 1});
  // MNIST's first layer (1 → 32, 3×3 on 28×28): the direct forward.
  expect_conv_same_bits({.batch = 24, .in_channels = 1, .height = 28, .width = 28,
                         .out_channels = 32, .kernel_h = 3, .kernel_w = 3});
}

// ---- pooling -----------------------------------------------------------------------------

struct PoolRef {
  std::vector<double> y, dx;
};

PoolRef pool_ref(Pool op, const Pool2d& g, const std::vector<float>& x,
                 const std::vector<float>& dy) {
  const std::size_t oh = g.out_h(), ow = g.out_w();
  PoolRef r{std::vector<double>(g.batch * g.channels * oh * ow),
            std::vector<double>(x.size())};
  for (std::size_t p = 0; p < g.batch * g.channels; ++p)
    for (std::size_t oy = 0; oy < oh; ++oy)
      for (std::size_t ox = 0; ox < ow; ++ox) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0.0;
        std::size_t at = 0, inside = 0;
        for (std::size_t i = 0; i < g.kernel_h; ++i)
          for (std::size_t j = 0; j < g.kernel_w; ++j) {
            const long iy = static_cast<long>(oy * g.stride_h + i) - static_cast<long>(g.pad_h);
            const long ix = static_cast<long>(ox * g.stride_w + j) - static_cast<long>(g.pad_w);
            if (iy < 0 || ix < 0 || iy >= static_cast<long>(g.height) ||
                ix >= static_cast<long>(g.width)) {
              continue;
            }
            const std::size_t xi = (p * g.height + static_cast<std::size_t>(iy)) * g.width +
                                   static_cast<std::size_t>(ix);
            ++inside;
            sum += x[xi];
            if (x[xi] > best) {
              best = x[xi];
              at = xi;
            }
          }
        const std::size_t yi = (p * oh + oy) * ow + ox;
        const double area = g.count_include_pad ? double(g.kernel_h * g.kernel_w) : double(inside);
        if (op == Pool::max) {
          r.y[yi] = best;
          r.dx[at] += dy[yi];
        } else {
          r.y[yi] = sum / area;
          for (std::size_t i = 0; i < g.kernel_h; ++i)
            for (std::size_t j = 0; j < g.kernel_w; ++j) {
              const long iy = static_cast<long>(oy * g.stride_h + i) - static_cast<long>(g.pad_h);
              const long ix = static_cast<long>(ox * g.stride_w + j) - static_cast<long>(g.pad_w);
              if (iy < 0 || ix < 0 || iy >= static_cast<long>(g.height) ||
                  ix >= static_cast<long>(g.width)) {
                continue;
              }
              r.dx[(p * g.height + static_cast<std::size_t>(iy)) * g.width +
                   static_cast<std::size_t>(ix)] += dy[yi] / area;
            }
        }
      }
  return r;
}

const Pool2d kPoolCases[] = {
    {.batch = 2, .channels = 3, .height = 6, .width = 6, .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2},
    {.batch = 1, .channels = 2, .height = 7, .width = 5, .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 1,
     .pad_h = 1, .pad_w = 1},
    {.batch = 2, .channels = 2, .height = 5, .width = 4, .kernel_h = 3, .kernel_w = 2, .stride_h = 1, .stride_w = 1,
     .pad_h = 1, .pad_w = 1, .count_include_pad = false},
    // Global pooling.
    {.batch = 3, .channels = 4, .height = 5, .width = 3, .kernel_h = 5, .kernel_w = 3},
    // Windows that tile the plane (stride = kernel, no padding), with rows and columns left
    // over below and right of the last windows: the max gradient writes every element of
    // dx (which starts at 7 in the test), zeros included.
    {.batch = 2, .channels = 3, .height = 7, .width = 5, .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2},
    {.batch = 1, .channels = 2, .height = 11, .width = 10, .kernel_h = 3, .kernel_w = 3, .stride_h = 3, .stride_w = 3},
    // Overlapping windows without padding.
    {.batch = 1, .channels = 2, .height = 7, .width = 9, .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2},
};

TEST(OpsPooling, MaxAndAvgMatchDirectLoop) {
  unsigned seed = 300;
  for (const Pool2d& g : kPoolCases) {
    // Small integers: windows with ties, whose gradient goes to the first maximum.
    const std::vector<float> x = ints(g.batch * g.channels * g.height * g.width, -3, 3, ++seed);
    const std::vector<float> dy = reals(g.batch * g.channels * g.out_h() * g.out_w(), ++seed);
    for (Pool op : {Pool::max, Pool::avg}) {
      const PoolRef r = pool_ref(op, g, x, dy);
      std::vector<float> y(r.y.size()), dx(x.size(), 7.0f);
      cpu::pool2d_forward(kCtx, op, g, x.data(), y.data());
      cpu::pool2d_backward(kCtx, op, g, x.data(), dy.data(), dx.data());
      expect_near(y, r.y, op == Pool::max ? "max forward" : "avg forward");
      expect_near(dx, r.dx, op == Pool::max ? "max backward" : "avg backward");
    }
  }
}

TEST(OpsPooling, MaxTreatsNaNAsTheLargestValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // One 2×4 plane, two 2×2 windows: a NaN after a larger value, and a NaN first.
  const std::vector<float> x = {1, 5, nan, 2, nan, 3, 4, nan};
  for (std::size_t pad : {0, 1}) {
    const Pool2d g{.batch = 1, .channels = 1, .height = 2, .width = 4, .kernel_h = 2,
                   .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 0, .pad_w = pad};
    std::vector<float> y(g.out_h() * g.out_w()), dx(8);
    const std::vector<float> dy(y.size(), 1.0f);
    cpu::pool2d_forward(kCtx, Pool::max, g, x.data(), y.data());
    cpu::pool2d_backward(kCtx, Pool::max, g, x.data(), dy.data(), dx.data());
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << "pad " << pad;
    if (pad == 0) {
      EXPECT_EQ(dx, (std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0}));
    }
  }
}

TEST(OpsPooling, BadWindowsAreErrors) {
  Pool2d g{.batch = 1, .channels = 1, .height = 3, .width = 3, .kernel_h = 4, .kernel_w = 2};
  std::vector<float> x(9), y(9);
  expect_error([&] { cpu::pool2d_forward(kCtx, Pool::max, g, x.data(), y.data()); },
               {"pool2d_forward", "kernel (4, 2) is larger than the padded input (3, 3)"});
  g.kernel_h = 2;
  g.pad_w = 2;
  expect_error([&] { check_pool2d("pooling", g); }, {"pooling", "pad (0, 2)", "smaller than the kernel"});
}

TEST(OpsPooling, SameBitsOnOneAndTwoThreads) {
  const Pool2d g{.batch = 16, .channels = 32, .height = 24, .width = 24, .kernel_h = 3,
                 .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  const std::vector<float> x = reals(g.batch * g.channels * g.height * g.width, 5);
  const std::vector<float> dy = reals(g.batch * g.channels * g.out_h() * g.out_w(), 6);
  for (Pool op : {Pool::max, Pool::avg}) {
    auto run = [&](int threads) {
      std::vector<float> y(dy.size()), dx(x.size());
      in_arena(threads, [&] {
        cpu::pool2d_forward(kCtx, op, g, x.data(), y.data());
        cpu::pool2d_backward(kCtx, op, g, x.data(), dy.data(), dx.data());
      });
      y.insert(y.end(), dx.begin(), dx.end());
      return y;
    };
    expect_same_bits(run(1), run(2), "pooling");
  }
}

// ---- softmax and NLL ---------------------------------------------------------------------

TEST(OpsSoftmax, ForwardAndBackwardMatchDirectLoop) {
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{1, 1}, {5, 10}, {33, 7}, {3, 3000}}) {
    std::vector<float> x = reals(rows * cols, 40 + unsigned(cols));
    for (float& v : x) v *= 20.0f;  // large logits: the max shift matters
    const std::vector<float> dy = reals(rows * cols, 41);
    std::vector<double> p(x.size()), lp(x.size()), dsm(x.size()), dlsm(x.size());
    for (std::size_t r = 0; r < rows; ++r) {
      double m = -1e300, s = 0.0;
      for (std::size_t j = 0; j < cols; ++j) m = std::max(m, double(x[r * cols + j]));
      for (std::size_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j] - m);
      double sdy = 0.0, sdyp = 0.0;
      for (std::size_t j = 0; j < cols; ++j) {
        const std::size_t e = r * cols + j;
        p[e] = std::exp(x[e] - m) / s;
        lp[e] = x[e] - m - std::log(s);
        sdy += dy[e];
        sdyp += dy[e] * p[e];
      }
      for (std::size_t j = 0; j < cols; ++j) {
        const std::size_t e = r * cols + j;
        dsm[e] = p[e] * (dy[e] - sdyp);
        dlsm[e] = dy[e] - p[e] * sdy;
      }
    }
    std::vector<float> y(x.size()), ly(x.size()), dx(x.size()), ldx(x.size());
    cpu::softmax_forward(kCtx, false, x.data(), rows, cols, 1, y.data());
    cpu::softmax_forward(kCtx, true, x.data(), rows, cols, 1, ly.data());
    cpu::softmax_backward(kCtx, false, y.data(), dy.data(), rows, cols, 1, dx.data());
    cpu::softmax_backward(kCtx, true, ly.data(), dy.data(), rows, cols, 1, ldx.data());
    expect_near(y, p, "softmax", 1e-5);
    expect_near(ly, lp, "log_softmax", 1e-5);
    expect_near(dx, dsm, "softmax backward", 1e-4);
    expect_near(ldx, dlsm, "log_softmax backward", 1e-4);
  }
}

TEST(OpsSoftmax, AlongAnInnerAxisEqualsTheRowsOfTheTranspose) {
  // [outer, len, inner] = (3, 5, 4) along len against the (3·4, 5) matrix of the same lines.
  const std::size_t outer = 3, len = 5, inner = 4;
  const std::vector<float> x = reals(outer * len * inner, 44), dy = reals(outer * len * inner, 45);
  std::vector<float> xt(x.size()), dyt(x.size());
  auto at = [&](std::size_t o, std::size_t j, std::size_t i) { return (o * len + j) * inner + i; };
  auto row = [&](std::size_t o, std::size_t j, std::size_t i) { return (o * inner + i) * len + j; };
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t j = 0; j < len; ++j)
      for (std::size_t i = 0; i < inner; ++i) {
        xt[row(o, j, i)] = x[at(o, j, i)];
        dyt[row(o, j, i)] = dy[at(o, j, i)];
      }
  for (bool log : {false, true}) {
    std::vector<float> y(x.size()), dx(x.size()), yt(x.size()), dxt(x.size());
    cpu::softmax_forward(kCtx, log, x.data(), outer, len, inner, y.data());
    cpu::softmax_backward(kCtx, log, y.data(), dy.data(), outer, len, inner, dx.data());
    cpu::softmax_forward(kCtx, log, xt.data(), outer * inner, len, 1, yt.data());
    cpu::softmax_backward(kCtx, log, yt.data(), dyt.data(), outer * inner, len, 1, dxt.data());
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t j = 0; j < len; ++j)
        for (std::size_t i = 0; i < inner; ++i) {
          ASSERT_EQ(y[at(o, j, i)], yt[row(o, j, i)]);
          ASSERT_EQ(dx[at(o, j, i)], dxt[row(o, j, i)]);
        }
  }
}

TEST(OpsSoftmax, NllLossPicksTheLabelAndRejectsBadLabels) {
  const std::vector<float> logp = reals(12, 9);
  const std::vector<float> labels = {2, 0, 3};
  std::vector<float> loss(3), grad(12, 7.0f);
  const std::vector<float> dloss = {0.5f, -1.0f, 2.0f};
  cpu::nll_loss_forward(kCtx, logp.data(), labels.data(), 3, 4, loss.data());
  cpu::nll_loss_backward(kCtx, dloss.data(), labels.data(), 3, 4, grad.data());
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(loss[r], -logp[r * 4 + std::size_t(labels[r])]);
    for (std::size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(grad[r * 4 + j], j == std::size_t(labels[r]) ? -dloss[r] : 0.0f);
    }
  }
  for (float bad : {4.0f, -1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> l = {0, bad, 1};
    expect_error([&] { cpu::nll_loss_forward(kCtx, logp.data(), l.data(), 3, 4, loss.data()); },
                 {"nll_loss: label", "of row 1 is not a class index in [0, 4)"});
    expect_error([&] { cpu::nll_loss_backward(kCtx, dloss.data(), l.data(), 3, 4, grad.data()); },
                 {"nll_loss_backward: label"});
  }
}

TEST(OpsSoftmax, SameBitsOnOneAndTwoThreads) {
  const std::size_t rows = 4000, cols = 37;
  const std::vector<float> x = reals(rows * cols, 3), dy = reals(rows * cols, 4);
  auto run = [&](int threads) {
    std::vector<float> y(x.size()), dx(x.size());
    in_arena(threads, [&] {
      cpu::softmax_forward(kCtx, true, x.data(), rows, cols, 1, y.data());
      cpu::softmax_backward(kCtx, true, y.data(), dy.data(), rows, cols, 1, dx.data());
    });
    y.insert(y.end(), dx.begin(), dx.end());
    return y;
  };
  expect_same_bits(run(1), run(2), "log_softmax");
}

// ---- batch norm --------------------------------------------------------------------------

struct BnRef {
  std::vector<double> y, mean, var, dx, dgamma, dbeta;
};

BnRef bn_ref(const BatchNorm& g, const std::vector<float>& x, const std::vector<float>& gamma,
             const std::vector<float>& beta, const std::vector<float>& dy, double eps) {
  BnRef r{std::vector<double>(x.size()), std::vector<double>(g.channels),
          std::vector<double>(g.channels), std::vector<double>(x.size()),
          std::vector<double>(g.channels), std::vector<double>(g.channels)};
  const double m = double(g.outer * g.inner);
  auto idx = [&](std::size_t o, std::size_t c, std::size_t i) { return (o * g.channels + c) * g.inner + i; };
  for (std::size_t c = 0; c < g.channels; ++c) {
    double s = 0, q = 0;
    for (std::size_t o = 0; o < g.outer; ++o)
      for (std::size_t i = 0; i < g.inner; ++i) s += x[idx(o, c, i)];
    const double mu = s / m;
    for (std::size_t o = 0; o < g.outer; ++o)
      for (std::size_t i = 0; i < g.inner; ++i) q += (x[idx(o, c, i)] - mu) * (x[idx(o, c, i)] - mu);
    const double var = q / m, inv = 1.0 / std::sqrt(var + eps);
    r.mean[c] = mu;
    r.var[c] = var;
    double sdy = 0, sdyx = 0;
    for (std::size_t o = 0; o < g.outer; ++o)
      for (std::size_t i = 0; i < g.inner; ++i) {
        const std::size_t e = idx(o, c, i);
        const double xh = (x[e] - mu) * inv;
        r.y[e] = gamma[c] * xh + beta[c];
        sdy += dy[e];
        sdyx += dy[e] * xh;
      }
    r.dgamma[c] = sdyx;
    r.dbeta[c] = sdy;
    for (std::size_t o = 0; o < g.outer; ++o)
      for (std::size_t i = 0; i < g.inner; ++i) {
        const std::size_t e = idx(o, c, i);
        const double xh = (x[e] - mu) * inv;
        r.dx[e] = gamma[c] * inv / m * (m * dy[e] - sdy - xh * sdyx);
      }
  }
  return r;
}

TEST(OpsBatchNorm, TrainingForwardAndBackwardMatchDirectLoop) {
  for (const BatchNorm& g : {BatchNorm{4, 3, 5}, BatchNorm{7, 6, 1}, BatchNorm{2, 1, 9}}) {
    const std::size_t n = g.outer * g.channels * g.inner;
    std::vector<float> x = reals(n, 50), dy = reals(n, 51);
    for (float& v : x) v = v * 3.0f + 5.0f;  // an offset mean
    const std::vector<float> gamma = reals(g.channels, 52), beta = reals(g.channels, 53);
    const BnRef r = bn_ref(g, x, gamma, beta, dy, 1e-5);
    std::vector<float> y(n), mean(g.channels), var(g.channels), inv(g.channels), dx(n),
        dgamma(g.channels), dbeta(g.channels);
    cpu::batch_norm_train(kCtx, g, x.data(), gamma.data(), beta.data(), 1e-5f, y.data(),
                          mean.data(), var.data(), inv.data());
    cpu::batch_norm_backward(kCtx, g, x.data(), dy.data(), gamma.data(), mean.data(), inv.data(),
                             dx.data(), dgamma.data(), dbeta.data());
    expect_near(y, r.y, "y", 1e-4);
    expect_near(mean, r.mean, "mean", 1e-5);
    expect_near(var, r.var, "var", 1e-5);
    expect_near(dx, r.dx, "dx", 1e-3);
    expect_near(dgamma, r.dgamma, "dgamma", 1e-4);
    expect_near(dbeta, r.dbeta, "dbeta", 1e-5);

    // Running statistics: momentum·running + (1 − momentum)·batch.
    std::vector<float> rm(g.channels, 1.0f), rv(g.channels, 2.0f);
    cpu::batch_norm_update_running(kCtx, g, 0.9f, mean.data(), var.data(), rm.data(), rv.data());
    for (std::size_t c = 0; c < g.channels; ++c) {
      EXPECT_FLOAT_EQ(rm[c], 0.9f * 1.0f + 0.1f * mean[c]);
      EXPECT_FLOAT_EQ(rv[c], 0.9f * 2.0f + 0.1f * var[c]);
    }
    // Inference with the batch's statistics gives the training output; its gradient is the
    // gradient with the statistics held constant.
    std::vector<float> yi(n), dxi(n), dgi(g.channels), dbi(g.channels);
    cpu::batch_norm_infer(kCtx, g, x.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                          1e-5f, yi.data());
    expect_near(yi, r.y, "inference y", 1e-4);
    cpu::batch_norm_infer_backward(kCtx, g, x.data(), dy.data(), gamma.data(), mean.data(),
                                   var.data(), 1e-5f, dxi.data(), dgi.data(), dbi.data());
    std::vector<double> want(n);
    for (std::size_t e = 0; e < n; ++e) {
      const std::size_t c = e / g.inner % g.channels;
      want[e] = dy[e] * gamma[c] / std::sqrt(r.var[c] + 1e-5);
    }
    expect_near(dxi, want, "inference dx", 1e-4);
    expect_near(dgi, r.dgamma, "inference dgamma", 1e-3);
    // A fixed gamma (nullptr) is a scale of 1.
    std::vector<float> ones(g.channels, 1.0f), y1(n), y2(n);
    cpu::batch_norm_train(kCtx, g, x.data(), nullptr, beta.data(), 1e-5f, y1.data(), mean.data(),
                          var.data(), inv.data());
    cpu::batch_norm_train(kCtx, g, x.data(), ones.data(), beta.data(), 1e-5f, y2.data(),
                          mean.data(), var.data(), inv.data());
    expect_same_bits(y1, y2, "fixed gamma");
  }
}

TEST(OpsBatchNorm, SameBitsOnOneAndTwoThreads) {
  const BatchNorm g{64, 32, 100};
  const std::size_t n = g.outer * g.channels * g.inner;
  const std::vector<float> x = reals(n, 60), dy = reals(n, 61);
  const std::vector<float> gamma = reals(g.channels, 62), beta = reals(g.channels, 63);
  auto run = [&](int threads) {
    std::vector<float> y(n), mean(g.channels), var(g.channels), inv(g.channels), dx(n),
        dgamma(g.channels), dbeta(g.channels);
    in_arena(threads, [&] {
      cpu::batch_norm_train(kCtx, g, x.data(), gamma.data(), beta.data(), 1e-5f, y.data(),
                            mean.data(), var.data(), inv.data());
      cpu::batch_norm_backward(kCtx, g, x.data(), dy.data(), gamma.data(), mean.data(),
                               inv.data(), dx.data(), dgamma.data(), dbeta.data());
    });
    for (const auto* v : {&mean, &var, &dx, &dgamma, &dbeta}) y.insert(y.end(), v->begin(), v->end());
    return y;
  };
  expect_same_bits(run(1), run(2), "batch_norm");
}

}  // namespace
}  // namespace depengine::ops
