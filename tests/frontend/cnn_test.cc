// The CNN ops of depengine/nn.h through NDArray: values against float64 loops computed
// here, gradients (the *_backward ops) against central finite differences of those loops,
// padding and stride cases, errors that name the op and both shapes, the same bits on naive
// and threaded engines with 1, 2 and 4 workers, and GPU scheduling on the simulated device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/ndarray.h"
#include "depengine/nn.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::expect_error;
using depengine::test::ints;
using Vec = std::vector<double>;
using Fn = std::function<Vec(const Vec&)>;

std::vector<float> reals(std::size_t n, unsigned seed) {
  std::vector<float> v = ints(n, -1000, 1000, seed);
  for (float& x : v) x /= 500.0f;
  return v;
}

// Distinct values (no ties within a pooling window, so max pooling is differentiable).
std::vector<float> distinct(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (float& x : v) x = x * 0.05f - 1.0f;
  return v;
}

Vec wide(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void expect_near(const std::vector<float>& got, const Vec& want, const std::string& what,
                 double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " at " << i;
  }
}

// d/dx of Σ r·f(x) by central differences of the float64 f.
Vec numeric_grad(const Fn& f, const Vec& x, const Vec& r) {
  Vec g(x.size()), xp = x;
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    xp[i] = x[i] + h;
    const Vec up = f(xp);
    xp[i] = x[i] - h;
    const Vec down = f(xp);
    xp[i] = x[i];
    double s = 0.0;
    for (std::size_t j = 0; j < r.size(); ++j) s += r[j] * (up[j] - down[j]);
    g[i] = s / (2 * h);
  }
  return g;
}

// ---- float64 references --------------------------------------------------------------------

struct ConvCase {
  Shape x, w;
  nd::Size2 stride, pad;
  bool bias;
};

std::size_t out_size(std::size_t in, std::size_t k, std::size_t s, std::size_t p) {
  return (in + 2 * p - k) / s + 1;
}

Vec conv_ref(const ConvCase& c, const Vec& x, const Vec& w, const Vec& b) {
  const std::size_t n = c.x[0], ch = c.x[1], h = c.x[2], wd = c.x[3], k = c.w[0], kh = c.w[2],
                    kw = c.w[3];
  const std::size_t oh = out_size(h, kh, c.stride[0], c.pad[0]),
                    ow = out_size(wd, kw, c.stride[1], c.pad[1]);
  Vec y(n * k * oh * ow);
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t o = 0; o < k; ++o)
      for (std::size_t i = 0; i < oh; ++i)
        for (std::size_t j = 0; j < ow; ++j) {
          double s = c.bias ? b[o] : 0.0;
          for (std::size_t q = 0; q < ch; ++q)
            for (std::size_t u = 0; u < kh; ++u)
              for (std::size_t v = 0; v < kw; ++v) {
                const long yy = long(i * c.stride[0] + u) - long(c.pad[0]);
                const long xx = long(j * c.stride[1] + v) - long(c.pad[1]);
                if (yy < 0 || xx < 0 || yy >= long(h) || xx >= long(wd)) continue;
                s += x[((a * ch + q) * h + std::size_t(yy)) * wd + std::size_t(xx)] *
                     w[((o * ch + q) * kh + u) * kw + v];
              }
          y[((a * k + o) * oh + i) * ow + j] = s;
        }
  return y;
}

struct PoolCase {
  Shape x;
  nd::Size2 kernel, stride, pad;
  nd::PoolType type;
  bool global, count_include_pad;
};

Vec pool_ref(const PoolCase& c, const Vec& x) {
  const std::size_t planes = c.x[0] * c.x[1], h = c.x[2], w = c.x[3];
  const nd::Size2 k = c.global ? nd::Size2{h, w} : c.kernel;
  const nd::Size2 s = c.global ? nd::Size2{1, 1} : c.stride;
  const nd::Size2 p = c.global ? nd::Size2{0, 0} : c.pad;
  const std::size_t oh = out_size(h, k[0], s[0], p[0]), ow = out_size(w, k[1], s[1], p[1]);
  Vec y(planes * oh * ow);
  for (std::size_t q = 0; q < planes; ++q)
    for (std::size_t i = 0; i < oh; ++i)
      for (std::size_t j = 0; j < ow; ++j) {
        double best = -1e300, sum = 0.0;
        std::size_t inside = 0;
        for (std::size_t u = 0; u < k[0]; ++u)
          for (std::size_t v = 0; v < k[1]; ++v) {
            const long yy = long(i * s[0] + u) - long(p[0]), xx = long(j * s[1] + v) - long(p[1]);
            if (yy < 0 || xx < 0 || yy >= long(h) || xx >= long(w)) continue;
            const double val = x[(q * h + std::size_t(yy)) * w + std::size_t(xx)];
            best = std::max(best, val);
            sum += val;
            ++inside;
          }
        const double area = c.count_include_pad ? double(k[0] * k[1]) : double(inside);
        y[(q * oh + i) * ow + j] = c.type == nd::PoolType::max ? best : sum / area;
      }
  return y;
}

Vec softmax_ref(const Vec& x, std::size_t cols, bool log) {
  Vec y(x.size());
  for (std::size_t r = 0; r * cols < x.size(); ++r) {
    double m = -1e300, s = 0.0;
    for (std::size_t j = 0; j < cols; ++j) m = std::max(m, x[r * cols + j]);
    for (std::size_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j] - m);
    for (std::size_t j = 0; j < cols; ++j) {
      const double z = x[r * cols + j] - m;
      y[r * cols + j] = log ? z - std::log(s) : std::exp(z) / s;
    }
  }
  return y;
}

// Training-mode batch norm of x (outer, c, inner).
Vec bn_ref(const Vec& x, const Vec& gamma, const Vec& beta, std::size_t outer, std::size_t c,
           std::size_t inner, double eps, Vec* mean = nullptr, Vec* var = nullptr) {
  Vec y(x.size());
  const double m = double(outer * inner);
  for (std::size_t ch = 0; ch < c; ++ch) {
    double s = 0.0, q = 0.0;
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < inner; ++i) s += x[(o * c + ch) * inner + i];
    const double mu = s / m;
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < inner; ++i) {
        const double d = x[(o * c + ch) * inner + i] - mu;
        q += d * d;
      }
    const double v = q / m;
    if (mean) (*mean)[ch] = mu;
    if (var) (*var)[ch] = v;
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < inner; ++i) {
        const std::size_t e = (o * c + ch) * inner + i;
        y[e] = gamma[ch] * (x[e] - mu) / std::sqrt(v + eps) + beta[ch];
      }
  }
  return y;
}

// ---- values and gradients ----------------------------------------------------------------

const ConvCase kConvCases[] = {
    {{2, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {0, 0}, true},
    {{2, 2, 6, 5}, {3, 2, 3, 2}, {2, 1}, {1, 1}, true},
    {{1, 2, 7, 7}, {2, 2, 3, 3}, {2, 3}, {2, 1}, false},
    {{1, 3, 4, 4}, {2, 3, 1, 1}, {1, 1}, {0, 0}, true},
};

TEST(CnnOps, ConvolutionValuesAndGradients) {
  unsigned seed = 1;
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const std::size_t nx = c.x[0] * c.x[1] * c.x[2] * c.x[3], nw = c.w[0] * c.w[1] * c.w[2] * c.w[3];
    const std::vector<float> xv = reals(nx, ++seed), wv = reals(nw, ++seed), bv = reals(c.w[0], ++seed);
    const NDArray x = nd::array(xv, c.x), w = nd::array(wv, c.w), b = nd::array(bv, {c.w[0]});
    const NDArray y = nd::convolution(x, w, c.bias ? b : NDArray(), c.stride, c.pad);
    const Vec want = conv_ref(c, wide(xv), wide(wv), wide(bv));
    expect_near(y.to_vector(), want, "forward", 1e-5);

    const std::vector<float> rv = reals(want.size(), ++seed);
    const NDArray dy = nd::array(rv, y.shape());
    const Vec r = wide(rv);
    const NDArray dx = nd::convolution_backward_data(dy, w, c.x, c.stride, c.pad);
    const NDArray dw = nd::convolution_backward_weight(x, dy, c.w, c.stride, c.pad);
    expect_near(dx.to_vector(),
                numeric_grad([&](const Vec& v) { return conv_ref(c, v, wide(wv), wide(bv)); },
                             wide(xv), r),
                "d/dx", 1e-4);
    expect_near(dw.to_vector(),
                numeric_grad([&](const Vec& v) { return conv_ref(c, wide(xv), v, wide(bv)); },
                             wide(wv), r),
                "d/dw", 1e-4);
    if (c.bias) {
      expect_near(nd::convolution_backward_bias(dy).to_vector(),
                  numeric_grad([&](const Vec& v) { return conv_ref(c, wide(xv), wide(wv), v); },
                               wide(bv), r),
                  "d/db", 1e-4);
    }
  }
}

const PoolCase kPoolCases[] = {
    {{2, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max, false, true},
    {{1, 2, 7, 5}, {3, 3}, {2, 1}, {1, 1}, nd::PoolType::max, false, true},
    {{2, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, nd::PoolType::avg, false, true},
    {{1, 2, 5, 6}, {3, 2}, {2, 2}, {1, 1}, nd::PoolType::avg, false, true},
    {{1, 2, 5, 6}, {3, 3}, {1, 2}, {1, 1}, nd::PoolType::avg, false, false},
    {{2, 3, 4, 5}, {0, 0}, {0, 0}, {0, 0}, nd::PoolType::avg, true, true},
    {{2, 3, 4, 5}, {0, 0}, {0, 0}, {0, 0}, nd::PoolType::max, true, true},
};

TEST(CnnOps, PoolingValuesAndGradients) {
  unsigned seed = 100;
  for (const PoolCase& c : kPoolCases) {
    SCOPED_TRACE(shape_str(c.x) + (c.type == nd::PoolType::max ? " max" : " avg"));
    const std::size_t n = c.x[0] * c.x[1] * c.x[2] * c.x[3];
    const std::vector<float> xv = distinct(n, ++seed);
    const NDArray x = nd::array(xv, c.x);
    const NDArray y = nd::pooling(x, c.kernel, c.stride, c.pad, c.type, c.global, c.count_include_pad);
    const Vec want = pool_ref(c, wide(xv));
    expect_near(y.to_vector(), want, "forward", 1e-6);
    if (c.global) {
      EXPECT_EQ(y.shape(), (Shape{c.x[0], c.x[1], 1, 1}));
    }
    const std::vector<float> rv = reals(want.size(), ++seed);
    const NDArray dx = nd::pooling_backward(x, nd::array(rv, y.shape()), c.kernel, c.stride, c.pad,
                                            c.type, c.global, c.count_include_pad);
    expect_near(dx.to_vector(),
                numeric_grad([&](const Vec& v) { return pool_ref(c, v); }, wide(xv), wide(rv)),
                "d/dx", 1e-4);
  }
}

TEST(CnnOps, SoftmaxLogSoftmaxAndNll) {
  const std::size_t rows = 5, cols = 7;
  const std::vector<float> xv = reals(rows * cols, 7);
  const NDArray x = nd::array(xv, {rows, cols});
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    const NDArray y = log ? nd::log_softmax(x) : nd::softmax(x, 1);
    expect_near(y.to_vector(), softmax_ref(wide(xv), cols, log), "forward", 1e-6);
    const std::vector<float> rv = reals(rows * cols, 8);
    const NDArray dx = nd::softmax_backward(y, nd::array(rv, {rows, cols}), log);
    expect_near(dx.to_vector(),
                numeric_grad([&](const Vec& v) { return softmax_ref(v, cols, log); }, wide(xv),
                             wide(rv)),
                "d/dx", 1e-4);
  }
  // A 3-d array along its last axis, and along the others (the lines a transpose makes rows).
  const NDArray x3 = nd::array(xv, {5, 1, 7});
  expect_near(nd::softmax(x3, -1).to_vector(), softmax_ref(wide(xv), cols, false), "3-d", 1e-6);
  const NDArray xt = nd::array(xv, {7, 5});
  const std::vector<float> by_col = nd::log_softmax(xt, 0).to_vector();
  const std::vector<float> rows_t = nd::log_softmax(xt.T()).to_vector();  // (5, 7)
  for (std::size_t i = 0; i < 7; ++i)
    for (std::size_t j = 0; j < 5; ++j) ASSERT_EQ(by_col[i * 5 + j], rows_t[j * 7 + i]);

  const std::vector<float> labels = {0, 6, 3, 3, 1};
  const NDArray lp = nd::log_softmax(x), l = nd::array(labels, {rows});
  const NDArray loss = nd::nll_loss(lp, l);
  const std::vector<float> lpv = lp.to_vector(), lv = loss.to_vector();
  for (std::size_t r = 0; r < rows; ++r) EXPECT_EQ(lv[r], -lpv[r * cols + std::size_t(labels[r])]);
  const std::vector<float> dlv = {1, 2, 3, 4, 5};
  const std::vector<float> g = nd::nll_loss_backward(nd::array(dlv, {rows}), l, cols).to_vector();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j)
      EXPECT_EQ(g[r * cols + j], j == std::size_t(labels[r]) ? -dlv[r] : 0.0f);
  // A label out of range fails the op; the Error reaches the blocker.
  const NDArray bad = nd::nll_loss(lp, nd::array(std::vector<float>{0, 7, 0, 0, 0}, {rows}));
  expect_error([&] { bad.wait_to_read(); }, {"nll_loss: label 7 of row 1", "[0, 7)"});
}

TEST(CnnOps, BatchNormTrainingInferenceAndGradients) {
  for (const Shape& s : {Shape{4, 3, 2, 3}, Shape{6, 4}}) {
    SCOPED_TRACE(shape_str(s));
    const std::size_t outer = s[0], c = s[1], inner = s.size() == 4 ? s[2] * s[3] : 1;
    const std::size_t n = outer * c * inner;
    std::vector<float> xv = reals(n, 21);
    for (float& v : xv) v = v * 2.0f + 3.0f;
    const std::vector<float> gv = reals(c, 22), bv = reals(c, 23);
    const NDArray x = nd::array(xv, s), gamma = nd::array(gv, {c}), beta = nd::array(bv, {c});
    NDArray rmean = nd::zeros({c}), rvar = nd::ones({c});
    const float eps = 1e-5f;
    Vec mean(c), var(c);
    const Vec want = bn_ref(wide(xv), wide(gv), wide(bv), outer, c, inner, eps, &mean, &var);
    const nd::BatchNormTrain t = nd::batch_norm_train(x, gamma, beta, rmean, rvar, eps, 0.9f);
    expect_near(t.y.to_vector(), want, "training forward", 1e-5);
    expect_near(t.mean.to_vector(), mean, "mean", 1e-6);
    // The running statistics, updated in place by the same op (MXNet's rule, biased variance).
    Vec rm(c), rv(c);
    for (std::size_t i = 0; i < c; ++i) {
      rm[i] = 0.1 * mean[i];
      rv[i] = 0.9 + 0.1 * var[i];
    }
    expect_near(rmean.to_vector(), rm, "running mean", 1e-6);
    expect_near(rvar.to_vector(), rv, "running var", 1e-6);

    const std::vector<float> rvv = reals(n, 24);
    const NDArray dy = nd::array(rvv, s);
    const nd::BatchNormGrads g = nd::batch_norm_backward(x, dy, gamma, t.mean, t.inv_std);
    const Vec r = wide(rvv);
    expect_near(g.dx.to_vector(),
                numeric_grad([&](const Vec& v) { return bn_ref(v, wide(gv), wide(bv), outer, c, inner, eps); },
                             wide(xv), r),
                "d/dx", 2e-4);
    expect_near(g.dgamma.to_vector(),
                numeric_grad([&](const Vec& v) { return bn_ref(wide(xv), v, wide(bv), outer, c, inner, eps); },
                             wide(gv), r),
                "d/dgamma", 1e-4);
    expect_near(g.dbeta.to_vector(),
                numeric_grad([&](const Vec& v) { return bn_ref(wide(xv), wide(gv), v, outer, c, inner, eps); },
                             wide(bv), r),
                "d/dbeta", 1e-4);

    // Inference: the running statistics, which stay as they are.
    const NDArray yi = nd::batch_norm(x, gamma, beta, rmean, rvar, eps, 0.9f, false);
    Vec wi(n);
    for (std::size_t e = 0; e < n; ++e) {
      const std::size_t ch = e / inner % c;
      wi[e] = gv[ch] * (xv[e] - rm[ch]) / std::sqrt(rv[ch] + eps) + bv[ch];
    }
    expect_near(yi.to_vector(), wi, "inference forward", 1e-5);
    expect_near(rmean.to_vector(), rm, "running mean after inference", 1e-6);
    // fix_gamma: a scale of 1, and no gradient for gamma.
    NDArray m2 = nd::zeros({c}), v2 = nd::ones({c});
    const NDArray yf = nd::batch_norm(x, gamma, beta, m2, v2, eps, 0.9f, true, true);
    expect_near(yf.to_vector(), bn_ref(wide(xv), Vec(c, 1.0), wide(bv), outer, c, inner, eps),
                "fix_gamma", 1e-5);
  }
}

// ---- autograd ------------------------------------------------------------------------------

// The gradients autograd records for `f` of the variables `inputs` (head gradient r), as
// vectors, one per input.
std::vector<std::vector<float>> taped(const std::function<NDArray(std::vector<NDArray>&)>& f,
                                      std::vector<NDArray> inputs, const std::vector<float>& r) {
  for (NDArray& a : inputs) a.attach_grad();
  NDArray y;
  {
    autograd::RecordScope record;
    y = f(inputs);
  }
  autograd::backward({y}, {nd::array(r, y.shape())});
  std::vector<std::vector<float>> out;
  for (const NDArray& a : inputs) out.push_back(a.grad().to_vector());
  return out;
}

TEST(CnnAutograd, ConvolutionGradientsMatchFiniteDifferences) {
  unsigned seed = 500;
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const std::size_t nx = c.x[0] * c.x[1] * c.x[2] * c.x[3], nw = c.w[0] * c.w[1] * c.w[2] * c.w[3];
    const std::vector<float> xv = reals(nx, ++seed), wv = reals(nw, ++seed), bv = reals(c.w[0], ++seed);
    const Vec y = conv_ref(c, wide(xv), wide(wv), wide(bv));
    const std::vector<float> rv = reals(y.size(), ++seed);
    std::vector<NDArray> in{nd::array(xv, c.x), nd::array(wv, c.w)};
    if (c.bias) in.push_back(nd::array(bv, {c.w[0]}));
    const auto g = taped(
        [&](std::vector<NDArray>& v) {
          return nd::convolution(v[0], v[1], c.bias ? v[2] : NDArray(), c.stride, c.pad);
        },
        in, rv);
    const Vec r = wide(rv);
    expect_near(g[0], numeric_grad([&](const Vec& v) { return conv_ref(c, v, wide(wv), wide(bv)); }, wide(xv), r),
                "d/dx", 1e-4);
    expect_near(g[1], numeric_grad([&](const Vec& v) { return conv_ref(c, wide(xv), v, wide(bv)); }, wide(wv), r),
                "d/dw", 1e-4);
    if (c.bias) {
      expect_near(g[2], numeric_grad([&](const Vec& v) { return conv_ref(c, wide(xv), wide(wv), v); }, wide(bv), r),
                  "d/db", 1e-4);
    }
  }
}

TEST(CnnAutograd, PoolingGradientsMatchFiniteDifferences) {
  unsigned seed = 600;
  for (const PoolCase& c : kPoolCases) {
    SCOPED_TRACE(shape_str(c.x) + (c.type == nd::PoolType::max ? " max" : " avg"));
    const std::vector<float> xv = distinct(c.x[0] * c.x[1] * c.x[2] * c.x[3], ++seed);
    const std::vector<float> rv = reals(pool_ref(c, wide(xv)).size(), ++seed);
    const auto g = taped(
        [&](std::vector<NDArray>& v) {
          return nd::pooling(v[0], c.kernel, c.stride, c.pad, c.type, c.global, c.count_include_pad);
        },
        {nd::array(xv, c.x)}, rv);
    expect_near(g[0], numeric_grad([&](const Vec& v) { return pool_ref(c, v); }, wide(xv), wide(rv)),
                "d/dx", 1e-4);
  }
}

TEST(CnnAutograd, SoftmaxAlongTheMiddleAxisGradient) {
  // (2, 3, 4) along axis 1: lines of 3 elements, 4 apart.
  const std::vector<float> xv = reals(24, 72), rv = reals(24, 73);
  auto ref = [](const Vec& x) {
    Vec y(24);
    for (std::size_t o = 0; o < 2; ++o)
      for (std::size_t i = 0; i < 4; ++i) {
        Vec line(3);
        for (std::size_t j = 0; j < 3; ++j) line[j] = x[(o * 3 + j) * 4 + i];
        const Vec s = softmax_ref(line, 3, true);
        for (std::size_t j = 0; j < 3; ++j) y[(o * 3 + j) * 4 + i] = s[j];
      }
    return y;
  };
  const auto g = taped([](std::vector<NDArray>& v) { return nd::log_softmax(v[0], 1); },
                       {nd::array(xv, {2, 3, 4})}, rv);
  expect_near(g[0], numeric_grad(ref, wide(xv), wide(rv)), "log_softmax axis 1", 1e-4);
}

TEST(CnnAutograd, SoftmaxLogSoftmaxAndNllGradients) {
  const std::size_t rows = 4, cols = 6;
  const std::vector<float> xv = reals(rows * cols, 70), rv = reals(rows * cols, 71);
  for (bool log : {false, true}) {
    const auto g = taped(
        [&](std::vector<NDArray>& v) { return log ? nd::log_softmax(v[0]) : nd::softmax(v[0]); },
        {nd::array(xv, {rows, cols})}, rv);
    expect_near(g[0], numeric_grad([&](const Vec& v) { return softmax_ref(v, cols, log); }, wide(xv), wide(rv)),
                log ? "log_softmax" : "softmax", 1e-4);
  }
  // nll_loss(log_softmax(z)): d/dz = dloss · (softmax(z) − onehot(label)); labels get none.
  const std::vector<float> labels = {1, 0, 5, 2}, dl = {1.0f, 0.5f, -2.0f, 3.0f};
  const NDArray lab = nd::array(labels, {rows});
  const auto g = taped(
      [&](std::vector<NDArray>& v) { return nd::nll_loss(nd::log_softmax(v[0]), lab); },
      {nd::array(xv, {rows, cols})}, dl);
  const Vec p = softmax_ref(wide(xv), cols, false);
  Vec want(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j)
      want[r * cols + j] = dl[r] * (p[r * cols + j] - (j == std::size_t(labels[r]) ? 1.0 : 0.0));
  expect_near(g[0], want, "nll_loss(log_softmax)", 1e-5);
}

TEST(CnnAutograd, BatchNormGradientsInTrainingAndInference) {
  const Shape s{3, 2, 2, 3};
  const std::size_t outer = 3, c = 2, inner = 6, n = 36;
  const std::vector<float> xv = reals(n, 80), gv = reals(c, 81), bv = reals(c, 82), rv = reals(n, 83);
  const float eps = 1e-5f;
  NDArray rm = nd::zeros({c}), rvar = nd::ones({c});
  const auto g = taped(
      [&](std::vector<NDArray>& v) { return nd::batch_norm(v[0], v[1], v[2], rm, rvar, eps, 0.9f, true); },
      {nd::array(xv, s), nd::array(gv, {c}), nd::array(bv, {c})}, rv);
  const Vec r = wide(rv);
  expect_near(g[0], numeric_grad([&](const Vec& v) { return bn_ref(v, wide(gv), wide(bv), outer, c, inner, eps); }, wide(xv), r),
              "d/dx", 2e-4);
  expect_near(g[1], numeric_grad([&](const Vec& v) { return bn_ref(wide(xv), v, wide(bv), outer, c, inner, eps); }, wide(gv), r),
              "d/dgamma", 1e-4);
  expect_near(g[2], numeric_grad([&](const Vec& v) { return bn_ref(wide(xv), wide(gv), v, outer, c, inner, eps); }, wide(bv), r),
              "d/dbeta", 1e-4);
  // Inference: the running statistics are constants.
  const std::vector<float> rmv = rm.to_vector(), rvv = rvar.to_vector();
  auto infer = [&](const Vec& x, const Vec& gamma, const Vec& beta) {
    Vec y(n);
    for (std::size_t e = 0; e < n; ++e) {
      const std::size_t ch = e / inner % c;
      y[e] = gamma[ch] * (x[e] - rmv[ch]) / std::sqrt(double(rvv[ch]) + eps) + beta[ch];
    }
    return y;
  };
  const auto gi = taped(
      [&](std::vector<NDArray>& v) { return nd::batch_norm(v[0], v[1], v[2], rm, rvar, eps, 0.9f, false); },
      {nd::array(xv, s), nd::array(gv, {c}), nd::array(bv, {c})}, rv);
  expect_near(gi[0], numeric_grad([&](const Vec& v) { return infer(v, wide(gv), wide(bv)); }, wide(xv), r), "inference d/dx", 1e-4);
  expect_near(gi[1], numeric_grad([&](const Vec& v) { return infer(wide(xv), v, wide(bv)); }, wide(gv), r), "inference d/dgamma", 1e-4);
  expect_near(gi[2], numeric_grad([&](const Vec& v) { return infer(wide(xv), wide(gv), v); }, wide(bv), r), "inference d/dbeta", 1e-4);
}

TEST(CnnAutograd, ARunningStatisticUpdatedAfterAnInferenceForwardFailsItsBackward) {
  NDArray x = nd::array(reals(12, 90), {3, 4}), gamma = nd::ones({4}), beta = nd::zeros({4});
  NDArray rm = nd::zeros({4}), rv = nd::ones({4});
  x.attach_grad();
  NDArray y;
  {
    autograd::RecordScope record;
    y = nd::batch_norm(x, gamma, beta, rm, rv, 1e-5f, 0.9f, false);
  }
  nd::batch_norm(x.detach(), gamma, beta, rm, rv, 1e-5f, 0.9f, true);  // updates rm, rv
  expect_error([&] { autograd::backward({y}, {nd::ones({3, 4})}); }, {"batch_norm"});
}

// One recorded step of a small CNN on `d` (conv, batch norm, max pool, log_softmax, nll; no
// relu: the core's relu gradient is CPU-only for now): the loss and the gradients of every
// parameter and of the input.
std::vector<std::vector<float>> taped_step(Device d) {
  std::vector<NDArray> p{nd::array(reals(4 * 2 * 8 * 8, 41), {4, 2, 8, 8}, d),
                         nd::array(reals(5 * 2 * 3 * 3, 42), {5, 2, 3, 3}, d),
                         nd::array(reals(5, 43), {5}, d), nd::array(reals(5, 44), {5}, d),
                         nd::array(reals(5, 45), {5}, d)};
  for (NDArray& a : p) a.attach_grad();
  NDArray rm = nd::zeros({5}, d), rv = nd::ones({5}, d);
  const NDArray labels = nd::array(std::vector<float>{3, 0, 79, 12}, {4}, d);
  NDArray loss;
  {
    autograd::RecordScope record;
    const NDArray y = nd::convolution(p[0], p[1], p[2], {1, 1}, {1, 1});
    const NDArray h = nd::batch_norm(y, p[3], p[4], rm, rv);
    const NDArray q = nd::pooling(h, {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max);
    loss = nd::nll_loss(nd::log_softmax(q.reshape({4, 80})), labels);
  }
  autograd::backward({loss});
  std::vector<std::vector<float>> out{loss.to_vector(), rm.to_vector(), rv.to_vector()};
  for (const NDArray& a : p) out.push_back(a.grad().to_vector());
  return out;
}

void expect_same_bits(const std::vector<std::vector<float>>& got,
                      const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << i;
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
        << "output " << i;
  }
}

TEST(CnnAutograd, SameGradientBitsOnEveryEngineWorkerCountAndSimulatedGpu) {
  std::vector<std::vector<float>> want;
  {
    auto naive = Engine::create("naive");
    EngineScope use(*naive);
    want = taped_step(Device::cpu());
  }
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(workers);
    auto e = Engine::create("threaded", {.cpu_threads = workers, .sim_gpus = 1});
    EngineScope use(*e);
    expect_same_bits(taped_step(Device::cpu()), want);
    expect_same_bits(taped_step(Device::gpu(0)), want);
  }
}

// convolution_relu against relu(convolution): the output and the gradients of x, w and b
// for one head gradient, on a direct-convolution geometry (stride 1, padded) and a GEMM one
// (stride 2), on the naive engine and on 2 workers.
std::vector<std::vector<float>> conv_relu_step(bool fused, nd::Size2 stride) {
  std::vector<NDArray> p{nd::array(reals(2 * 3 * 10 * 12, 51), {2, 3, 10, 12}),
                         nd::array(reals(5 * 3 * 3 * 3, 52), {5, 3, 3, 3}),
                         nd::array(reals(5, 53), {5})};
  for (NDArray& a : p) a.attach_grad();
  NDArray y;
  {
    autograd::RecordScope record;
    y = fused ? nd::convolution_relu(p[0], p[1], p[2], stride, {1, 1})
              : nd::relu(nd::convolution(p[0], p[1], p[2], stride, {1, 1}));
  }
  autograd::backward({y}, {nd::array(reals(y.size(), 54), y.shape())});
  std::vector<std::vector<float>> out{y.to_vector()};
  for (const NDArray& a : p) out.push_back(a.grad().to_vector());
  return out;
}

TEST(CnnAutograd, ConvolutionReluIsReluOfConvolutionBitForBit) {
  for (const char* kind : {"naive", "threaded"}) {
    SCOPED_TRACE(kind);
    auto e = Engine::create(kind, {.cpu_threads = 2});
    EngineScope use(*e);
    for (nd::Size2 stride : {nd::Size2{1, 1}, nd::Size2{2, 2}}) {
      SCOPED_TRACE(stride[0]);
      expect_same_bits(conv_relu_step(true, stride), conv_relu_step(false, stride));
    }
  }
}

TEST(CnnOps, FixedGammaGradientLivesOnTheInputsEngine) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  NDArray x, dy, gamma, beta, rm, rv;
  {
    EngineScope use(*e);
    x = nd::array(reals(12, 95), {3, 4});
    dy = nd::ones({3, 4});
    gamma = nd::ones({4});
    beta = nd::zeros({4});
    rm = nd::zeros({4});
    rv = nd::ones({4});
  }
  // Called while another engine is current: every result is on the inputs' engine.
  const nd::BatchNormTrain t = nd::batch_norm_train(x, gamma, beta, rm, rv, 1e-5f, 0.9f, true);
  const nd::BatchNormGrads g = nd::batch_norm_backward(x, dy, gamma, t.mean, t.inv_std, true);
  EXPECT_EQ(&g.dx.engine(), e.get());
  EXPECT_EQ(&g.dgamma.engine(), e.get());
  EXPECT_EQ(g.dgamma.to_vector(), std::vector<float>(4, 0.0f));
  e->wait_all();
}

// ---- errors --------------------------------------------------------------------------------

TEST(CnnOps, ShapeErrorsNameTheOpAndBothShapes) {
  const NDArray x = nd::zeros({2, 3, 4, 4});
  expect_error([&] { nd::convolution(x, nd::zeros({8, 1, 3, 3}), NDArray()); },
               "convolution: input of shape (2, 3, 4, 4) has 3 channels, weight (8, 1, 3, 3) expects 1");
  expect_error([&] { nd::convolution(x, nd::zeros({8, 3, 5, 5}), NDArray()); },
               {"convolution: kernel (5, 5) is larger than the padded input (4, 4)",
                "input (2, 3, 4, 4), weight (8, 3, 5, 5)"});
  expect_error([&] { nd::convolution(x, nd::zeros({8, 3, 3, 3}), nd::zeros({7})); },
               {"convolution: bias of shape (7,) does not match weight (8, 3, 3, 3)"});
  expect_error([&] { nd::convolution(nd::zeros({3, 4, 4}), nd::zeros({8, 3, 3, 3}), NDArray()); },
               {"convolution: input must be 4-d", "(3, 4, 4)"});
  expect_error([&] { nd::convolution(x, nd::zeros({8, 3, 3, 3}), NDArray(), {0, 1}); },
               {"convolution: stride (0, 1)"});
  expect_error([&] { nd::convolution(x, NDArray(), NDArray()); }, {"convolution"});
  expect_error([&] { nd::pooling(x, {5, 2}, {1, 1}, {0, 0}, nd::PoolType::max); },
               {"pooling: kernel (5, 2) is larger than the padded input (4, 4)", "input (2, 3, 4, 4)"});
  expect_error([&] { nd::pooling(x, {2, 2}, {1, 1}, {2, 0}, nd::PoolType::avg); },
               {"pooling: pad (2, 0) must be smaller than the kernel (2, 2)"});
  expect_error([&] { nd::log_softmax(nd::zeros({2, 3}), 2); }, {"log_softmax: axis 2 is out of range"});
  expect_error([&] { nd::nll_loss(nd::zeros({2, 3}), nd::zeros({3})); },
               {"nll_loss: labels of shape (3,) do not match log-probabilities of shape (2, 3)"});
  NDArray m = nd::zeros({3}), v = nd::ones({3});
  expect_error([&] { nd::batch_norm(x, nd::ones({4}), nd::zeros({3}), m, v); },
               {"batch_norm: gamma of shape (4,) does not match the 3 channels of input (2, 3, 4, 4)"});
  expect_error([&] {
    nd::convolution_backward_data(nd::zeros({2, 8, 3, 3}), nd::zeros({8, 3, 3, 3}), {2, 3, 4, 4});
  }, {"convolution_backward_data: dy of shape (2, 8, 3, 3) does not match the expected (2, 8, 2, 2)"});
}

// ---- engines, workers and devices --------------------------------------------------------

// A small CNN step through every op: the outputs' bits.
std::vector<std::vector<float>> run_network(Device d) {
  const NDArray x = nd::array(reals(4 * 2 * 9 * 9, 31), {4, 2, 9, 9}, d);
  const NDArray w = nd::array(reals(6 * 2 * 3 * 3, 32), {6, 2, 3, 3}, d);
  const NDArray b = nd::array(reals(6, 33), {6}, d);
  const NDArray gamma = nd::array(reals(6, 34), {6}, d), beta = nd::array(reals(6, 35), {6}, d);
  NDArray rm = nd::zeros({6}, d), rv = nd::ones({6}, d);
  const NDArray y = nd::convolution(x, w, b, {1, 1}, {1, 1});
  const nd::BatchNormTrain bn = nd::batch_norm_train(y, gamma, beta, rm, rv);
  const NDArray p = nd::pooling(nd::relu(bn.y), {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max);
  const NDArray z = p.reshape({4, 6 * 4 * 4});
  const NDArray lp = nd::log_softmax(z);
  const NDArray labels = nd::array(std::vector<float>{1, 0, 95, 3}, {4}, d);
  const NDArray loss = nd::nll_loss(lp, labels);
  const NDArray dlp = nd::nll_loss_backward(nd::ones({4}, d), labels, 96);
  const NDArray dz = nd::softmax_backward(lp, dlp, true);
  const NDArray dp = nd::pooling_backward(nd::relu(bn.y), dz.reshape(p.shape()), {2, 2}, {2, 2},
                                          {0, 0}, nd::PoolType::max);
  const nd::BatchNormGrads gb = nd::batch_norm_backward(y, dp, gamma, bn.mean, bn.inv_std);
  const NDArray dx = nd::convolution_backward_data(gb.dx, w, x.shape(), {1, 1}, {1, 1});
  const NDArray dw = nd::convolution_backward_weight(x, gb.dx, w.shape(), {1, 1}, {1, 1});
  const NDArray db = nd::convolution_backward_bias(gb.dx);
  const NDArray avg = nd::pooling(x, {3, 3}, {2, 2}, {1, 1}, nd::PoolType::avg);
  std::vector<std::vector<float>> out;
  for (const NDArray* a : std::initializer_list<const NDArray*>{&y, &bn.y, &p, &lp, &loss, &dz, &dp, &gb.dx, &gb.dgamma, &gb.dbeta,
                           &dx, &dw, &db, &rm, &rv, &avg}) {
    out.push_back(a->to_vector());
  }
  return out;
}

TEST(CnnOps, SameBitsOnNaiveAndThreadedEnginesWithOneTwoFourWorkers) {
  std::vector<std::vector<float>> want;
  {
    auto naive = Engine::create("naive");
    EngineScope use(*naive);
    want = run_network(Device::cpu());
  }
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(workers);
    auto e = Engine::create("threaded", {.cpu_threads = workers});
    EngineScope use(*e);
    const auto got = run_network(Device::cpu());
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size()) << i;
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
          << "output " << i;
    }
  }
}

TEST(CnnOps, EveryOpOnASimulatedGpuGivesTheCpuBits) {
  for (const char* kind : {"naive", "threaded"}) {
    SCOPED_TRACE(kind);
    auto e = Engine::create(kind, {.cpu_threads = 2, .sim_gpus = 2});
    EngineScope use(*e);
    const auto cpu = run_network(Device::cpu());
    const auto gpu = run_network(Device::gpu(1));
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      EXPECT_EQ(std::memcmp(gpu[i].data(), cpu[i].data(), gpu[i].size() * sizeof(float)), 0)
          << "output " << i;
    }
    // Arrays on different devices are refused at the call, naming both.
    expect_error([&] {
      nd::convolution(nd::zeros({1, 1, 3, 3}, Device::gpu(0)), nd::zeros({1, 1, 2, 2}), NDArray());
    }, {"convolution: the arrays are on different devices", "gpu(0)", "cpu"});
    // A failing GPU op (a bad label) reaches the blocker.
    const NDArray lp = nd::zeros({2, 3}, Device::gpu(0));
    const NDArray bad = nd::nll_loss(lp, nd::array(std::vector<float>{0, 3}, {2}, Device::gpu(0)));
    expect_error([&] { bad.wait_to_read(); }, {"nll_loss: label 3 of row 1"});
    expect_error([&] { e->wait_all(); }, {"nll_loss: label 3 of row 1"});
  }
}

TEST(CnnOps, CudaDeviceMatchesTheCpuToRounding) {
  if (Device::gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*e);
  const auto cpu = run_network(Device::cpu());
  const auto gpu = run_network(Device::gpu(0));
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    expect_near(gpu[i], wide(cpu[i]), "output " + std::to_string(i), 1e-4);
  }
  const auto gcpu = taped_step(Device::cpu()), ggpu = taped_step(Device::gpu(0));
  for (std::size_t i = 0; i < ggpu.size(); ++i) {
    expect_near(ggpu[i], wide(gcpu[i]), "gradient " + std::to_string(i), 1e-4);
  }
}

}  // namespace
}  // namespace depengine
