// The ops of depengine/ndarray_ops.h and the gradients of slicing, the nn.h ops and the
// comparisons: forward results against hand-computed values (integer-valued, compared
// exactly), gradients against central differences, errors, dropout's masks on every engine,
// and the comparison-routed gradients (relu, abs, max, maximum) on a simulated GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/ndarray.h"
#include "depengine/ndarray_ops.h"
#include "depengine/nn.h"

namespace depengine {
namespace {

using Fn = std::function<NDArray(const std::vector<NDArray>&)>;
using V = std::vector<float>;

V values(std::size_t n, float lo, float hi, unsigned seed) {
  V v(n);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (float& x : v) x = d(g);
  return v;
}

std::size_t count(const Shape& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

double objective(const Fn& f, const std::vector<NDArray>& in) {
  const V yv = f(in).to_vector();
  const V w = values(yv.size(), 0.5f, 1.5f, 7);
  double s = 0;
  for (std::size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * w[i];
  return s;
}

// Autograd's gradient of sum(f(inputs) · w) against central differences, for each input.
void check_gradient(const std::string& what, const Fn& f, const std::vector<Shape>& shapes,
                    float lo = -1.0f, float hi = 1.0f) {
  SCOPED_TRACE(what);
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*engine);
  std::vector<V> data;
  std::vector<NDArray> in;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    data.push_back(values(count(shapes[i]), lo, hi, 11 + static_cast<unsigned>(i)));
    in.push_back(nd::array(data.back(), shapes[i]));
    in.back().attach_grad();
  }
  NDArray head;
  {
    autograd::RecordScope record;
    head = f(in);
  }
  head.backward(nd::array(values(head.size(), 0.5f, 1.5f, 7), head.shape()));
  for (std::size_t i = 0; i < in.size(); ++i) {
    const V g = in[i].grad().to_vector();
    for (std::size_t j = 0; j < data[i].size(); ++j) {
      const float eps = 1e-2f;
      std::vector<NDArray> plus, minus;
      for (std::size_t k = 0; k < in.size(); ++k) {
        V p = data[k], m = data[k];
        if (k == i) {
          p[j] += eps;
          m[j] -= eps;
        }
        plus.push_back(nd::array(p, shapes[k]));
        minus.push_back(nd::array(m, shapes[k]));
      }
      const double numeric = (objective(f, plus) - objective(f, minus)) / (2.0 * eps);
      EXPECT_NEAR(g[j], numeric, 2e-2 * (1.0 + std::fabs(numeric))) << "input " << i << " element " << j;
    }
  }
}

class MoreOps : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> engine = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use{*engine};
  NDArray iota(const Shape& s) { return nd::arange(0, static_cast<double>(count(s))).reshape(s); }
};

TEST_F(MoreOps, SliceAssignWritesScalarsAndBroadcastArrays) {
  NDArray x = iota({3, 4});
  nd::slice_assign(x, {{1, 1, 1, false}, {2, 1, 1, false}}, 9.0f);  // x[1, 2] = 9
  EXPECT_EQ(x.to_vector(), (V{0, 1, 2, 3, 4, 5, 9, 7, 8, 9, 10, 11}));
  nd::slice_assign(x, {{0, 1, 2, true}, {0, 1, 4, true}}, 12.0f);  // x[0:2, :] = 12
  EXPECT_EQ(x.to_vector(), (V{12, 12, 12, 12, 12, 12, 12, 12, 8, 9, 10, 11}));
  nd::slice_assign(x, {{0, 1, 3, true}, {3, -2, 2, true}}, nd::array({1, 2, 3}, {3, 1}));
  EXPECT_EQ(x.to_vector(), (V{12, 1, 12, 1, 12, 2, 12, 2, 8, 3, 10, 3}));
  NDArray z = nd::zeros({2, 2});
  nd::slice_assign(z, {{0, 1, 2, true}, {0, 1, 2, true}}, nd::ones({2, 2}) + nd::ones({2, 2}));
  EXPECT_EQ(z.to_vector(), (V{2, 2, 2, 2}));
  // Overlapping source and destination: numpy's x[1:] = x[:-1].
  NDArray r = nd::arange(0, 5);
  nd::slice_assign(r, {{1, 1, 4, true}}, nd::slice(r, {{0, 1, 4, true}}).reshape({4}));
  EXPECT_EQ(r.to_vector(), (V{0, 0, 1, 2, 3}));
  NDArray same = nd::arange(0, 4);
  nd::slice_assign(same, {{0, 1, 4, true}}, same.reshape({4}));
  EXPECT_EQ(same.to_vector(), (V{0, 1, 2, 3}));
  EXPECT_THROW(nd::slice_assign(x, {{0, 1, 2, true}, {0, 1, 4, true}}, nd::ones({3})), Error);
}

TEST_F(MoreOps, SetitemIsRefusedWhileRecordingAnArrayWithHistory) {
  NDArray w = nd::ones({3});
  w.attach_grad();
  autograd::RecordScope record;
  NDArray y = w * 2.0f;
  try {
    nd::slice_assign(y, {{0, 1, 1, true}}, 5.0f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("setitem"), std::string::npos) << e.what();
  }
}

TEST_F(MoreOps, TakeGathersRowsAndPairs) {
  const NDArray x = iota({3, 4});
  EXPECT_EQ(nd::take(x, nd::array({2, 0, -1}, {3})).to_vector(),
            (V{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(nd::take(x, nd::array({3, 0}, {2}), 1).to_vector(), (V{3, 0, 7, 4, 11, 8}));
  // y_hat[range(3), y]: pairs of indices.
  const NDArray p = nd::take(x, {nd::arange(0, 3), nd::array({0, 2, 3}, {3})});
  EXPECT_EQ(p.shape(), (Shape{3}));
  EXPECT_EQ(p.to_vector(), (V{0, 6, 11}));
  EXPECT_EQ(nd::take(x, nd::array({1, 2, 0, 1}, {2, 2})).shape(), (Shape{2, 2, 4}));
  const NDArray bad = nd::take(x, nd::array({3}, {1}));
  EXPECT_THROW(bad.wait_to_read(), Error);
  EXPECT_THROW(nd::take(x, nd::array({0.5f}, {1})).wait_to_read(), Error);
  EXPECT_THROW(engine->wait_all(), Error);
}

TEST_F(MoreOps, ConcatenateStackAndTranspose) {
  const NDArray a = iota({2, 3}), b = iota({2, 3}) + 10.0f;
  EXPECT_EQ(nd::concatenate({a, b}, 0).to_vector(), (V{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(nd::concatenate({a, b}, -1).to_vector(), (V{0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15}));
  const NDArray s = nd::stack({a, b}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.to_vector(), (V{0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15}));
  EXPECT_THROW(nd::concatenate({a, iota({3, 2})}, 0), Error);
  EXPECT_THROW(nd::stack({a, iota({3, 2})}), Error);
  const NDArray t = nd::transpose(iota({2, 3, 4}), {2, 0, 1});
  EXPECT_EQ(t.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(nd::slice(t, {{1, 1, 1, false}, {0, 1, 2, true}, {0, 1, 3, true}}).to_vector(),
            (V{1, 5, 9, 13, 17, 21}));
  EXPECT_EQ(iota({2, 3, 4}).T().shape(), (Shape{4, 3, 2}));
  EXPECT_THROW(nd::transpose(a, {0, 0}), Error);
}

TEST_F(MoreOps, BatchedMatmulMatchesDotPerMatrix) {
  const NDArray a = iota({2, 3, 4}), b = iota({4, 5}) - 3.0f;
  const NDArray c = nd::matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 5}));
  for (std::size_t i = 0; i < 2; ++i) {
    const NDArray ai = nd::slice(a, {{static_cast<long>(i), 1, 1, false}, {0, 1, 3, true}, {0, 1, 4, true}});
    const NDArray ci = nd::slice(c, {{static_cast<long>(i), 1, 1, false}, {0, 1, 3, true}, {0, 1, 5, true}});
    EXPECT_EQ(ci.to_vector(), nd::dot(ai, b).to_vector());
  }
  EXPECT_EQ(nd::matmul(iota({4}), iota({2, 4, 3})).shape(), (Shape{2, 3}));
  EXPECT_EQ(nd::matmul(iota({1, 3, 4}), iota({2, 4, 2})).shape(), (Shape{2, 3, 2}));
  EXPECT_THROW(nd::matmul(iota({2, 3, 4}), iota({3, 4, 2})), Error);
}

TEST_F(MoreOps, ReductionsOverSeveralAxes) {
  const NDArray x = iota({2, 3, 4});
  EXPECT_EQ(nd::sum(x, std::vector<int>{0, 2}).to_vector(), (V{60, 92, 124}));
  EXPECT_EQ(nd::mean(x, std::vector<int>{-1, 0}).to_vector(), (V{7.5f, 11.5f, 15.5f}));
  EXPECT_EQ(nd::max(x, std::vector<int>{1, 2}).to_vector(), (V{11, 23}));
  EXPECT_EQ(nd::sum(x, std::vector<int>{0, 1, 2}).item(), 276.0f);
  EXPECT_THROW(nd::sum(x, std::vector<int>{0, 0}), Error);
  EXPECT_THROW(nd::sum(x, std::vector<int>{3}), Error);
}

TEST_F(MoreOps, ModAndFloorDivideFollowNumpysSigns) {
  const NDArray a = nd::array({7, -7, 7, -7, 6, 0}, {6}), b = nd::array({3, 3, -3, -3, 3, -2}, {6});
  EXPECT_EQ(nd::mod(a, b).to_vector(), (V{1, 2, -2, -1, 0, 0}));
  EXPECT_EQ(nd::floor_divide(a, b).to_vector(), (V{2, -3, -3, 2, 2, -0.0f}));
  EXPECT_EQ(nd::mod(a, 4.0f).to_vector(), (V{3, 1, 3, 1, 2, 0}));
  EXPECT_EQ(nd::floor_divide(a, 4.0f).to_vector(), (V{1, -2, 1, -2, 1, 0}));
  EXPECT_EQ(nd::mod(10.0f, b).to_vector(), (V{1, 1, -2, -2, 1, 0}));
  EXPECT_TRUE(std::signbit(nd::mod(a, b).to_vector()[5]));  // 0 % -2 is -0.0
}

TEST_F(MoreOps, LinspaceAndEmpty) {
  EXPECT_EQ(nd::linspace(0, 1, 5).to_vector(), (V{0, 0.25f, 0.5f, 0.75f, 1}));
  EXPECT_EQ(nd::linspace(0, 1, 4, false).to_vector(), (V{0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(nd::linspace(2, 3, 1).to_vector(), (V{2}));
  EXPECT_EQ(nd::linspace(2, 3, 0).size(), 0u);
  EXPECT_EQ(nd::empty({2, 3}).shape(), (Shape{2, 3}));
}

TEST_F(MoreOps, DropoutScalesKeptElementsAndIsIdentityOutsideTraining) {
  const NDArray x = nd::ones({1000});
  EXPECT_EQ(nd::dropout(x, 0.5f).to_vector(), x.to_vector());  // not training
  autograd::RecordScope record;  // train_mode
  const V y = nd::dropout(x, 0.25f).to_vector();
  std::size_t kept = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f / 0.75f) << v;
    kept += v != 0.0f;
  }
  EXPECT_GT(kept, 680u);
  EXPECT_LT(kept, 820u);
  EXPECT_THROW(nd::dropout(x, 1.0f), Error);
  EXPECT_THROW(nd::dropout(x, -0.1f), Error);
}

// The same seed gives the same masks and gradients on every engine and worker count.
TEST(MoreOpsDeterminism, DropoutMasksAndGradientsAreTheSameBitsOnEveryEngine) {
  auto run = [](const char* kind, int threads) {
    auto e = Engine::create(kind, {.cpu_threads = threads});
    EngineScope use(*e);
    nd::seed(42);
    NDArray w = nd::random_normal({64, 32});
    w.attach_grad();
    NDArray l;
    {
      autograd::RecordScope record;
      const NDArray h = nd::dropout(nd::relu(nd::matmul(nd::ones({3, 8, 64}), w)), 0.3f);
      l = nd::sum(nd::take(h, nd::array({0, 2, 2}, {3}), 1), std::vector<int>{0, 2});
    }
    l.backward();
    V out = w.grad().to_vector();
    const V y = l.to_vector();
    out.insert(out.end(), y.begin(), y.end());
    return out;
  };
  const V ref = run("naive", 1);
  for (int n : {1, 2, 4}) EXPECT_EQ(run("threaded", n), ref) << n << " workers";
}

TEST(MoreOpsGradients, IndexingAndShapeOps) {
  check_gradient("slice", [](const auto& x) {
    return nd::slice(x[0], {{2, -1, 2, true}, {1, 1, 1, false}, {0, 2, 2, true}});
  }, {{3, 2, 4}});
  check_gradient("take with repeats", [](const auto& x) {
    return nd::take(x[0], nd::array({1, 1, -1, 0}, {2, 2}), 0);
  }, {{3, 2}});
  check_gradient("take pairs", [](const auto& x) {
    return nd::take(x[0], {nd::arange(0, 3), nd::array({0, 2, 1}, {3})});
  }, {{3, 3}});
  check_gradient("concatenate", [](const auto& x) { return nd::concatenate({x[0], x[1], x[0]}, 1); },
                 {{2, 1}, {2, 3}});
  check_gradient("stack", [](const auto& x) { return nd::stack({x[0], x[1]}, -1); }, {{2, 3}, {2, 3}});
  check_gradient("transpose axes", [](const auto& x) { return nd::transpose(x[0], {1, 2, 0}); },
                 {{2, 3, 4}});
  check_gradient("T of 3-d", [](const auto& x) { return x[0].T(); }, {{2, 3, 2}});
}

TEST(MoreOpsGradients, MatmulReductionsAndArithmetic) {
  check_gradient("batched matmul", [](const auto& x) { return nd::matmul(x[0], x[1]); },
                 {{2, 1, 3, 4}, {3, 4, 2}});
  check_gradient("matmul 1-d", [](const auto& x) { return nd::matmul(x[0], x[1]); }, {{4}, {2, 4, 3}});
  check_gradient("sum axes", [](const auto& x) { return nd::sum(x[0], std::vector<int>{0, 2}); },
                 {{2, 3, 4}});
  check_gradient("mean axes", [](const auto& x) { return nd::mean(x[0], std::vector<int>{2, 1}); },
                 {{2, 3, 4}});
  check_gradient("max axes", [](const auto& x) { return nd::max(x[0], std::vector<int>{0, 1}); },
                 {{2, 3, 4}});
  check_gradient("broadcast sum_to", [](const auto& x) { return x[0] * x[1]; }, {{2, 1, 4}, {3, 1}});
  check_gradient("mod", [](const auto& x) { return nd::mod(x[0], x[1]); }, {{2, 3}, {3}}, 1.1f, 2.9f);
  check_gradient("rmod", [](const auto& x) { return nd::mod(7.0f, x[0]); }, {{4}}, 1.1f, 2.9f);
  check_gradient("maximum scalar", [](const auto& x) { return nd::maximum(x[0], 0.1f); }, {{6}});
  check_gradient("comparison in a graph", [](const auto& x) {
    return x[0] * nd::compare(x[0], x[1], nd::Compare::greater);
  }, {{5}, {5}});
}

// Comparisons and floor division are constants in a recorded graph: no gradient through them.
TEST_F(MoreOps, ComparisonsAndFloorDivisionPassNoGradient) {
  NDArray x = nd::array({-0.7f, 0.2f, 1.6f}, {3});
  x.attach_grad();
  NDArray l;
  {
    autograd::RecordScope record;
    l = nd::sum(x + nd::floor_divide(x, 0.5f) + nd::compare(x, 0.0f, nd::Compare::less) +
                nd::floor_divide(2.0f, x + 3.0f));
  }
  l.backward();
  EXPECT_EQ(x.grad().to_vector(), (V{1, 1, 1}));
}

TEST(MoreOpsGradients, NnOps) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      check_gradient(std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N"),
                     [ta, tb](const auto& x) { return nd::gemm(x[0], x[1], ta, tb); },
                     {ta ? Shape{4, 3} : Shape{3, 4}, tb ? Shape{2, 4} : Shape{4, 2}});
    }
  }
  check_gradient("linear", [](const auto& x) { return nd::linear(x[0], x[1], x[2]); },
                 {{3, 4}, {4, 2}, {2}});
  check_gradient("linear relu", [](const auto& x) { return nd::linear(x[0], x[1], x[2], true); },
                 {{3, 4}, {4, 5}, {5}});
  check_gradient("softmax_cross_entropy", [](const auto& x) {
    return nd::softmax_cross_entropy(x[0], nd::array({2, 0, 1}, {3})).loss * 3.0f;
  }, {{3, 4}});
}

// relu, abs, max and maximum route their gradients through comparisons, which run on the
// simulated GPU now: the same bits as on the CPU.
TEST(MoreOpsGpu, ComparisonRoutedGradientsRunOnASimulatedGpu) {
  auto e = Engine::create("threaded", {.cpu_threads = 2, .sim_gpus = 1});
  EngineScope use(*e);
  auto grads = [](Device d) {
    NDArray x = nd::array({-2, 3, 0.5f, 3, -1, 2}, {2, 3}).copy_to(d);
    NDArray w = nd::array({1, -1, 2}, {3}).copy_to(d);
    x.attach_grad();
    w.attach_grad();
    NDArray l;
    {
      autograd::RecordScope record;
      l = nd::sum(nd::relu(x) + nd::abs(x) * 2.0f + nd::maximum(x, w)) + nd::max(x) +
          nd::sum(nd::max(x, 1)) + nd::sum(nd::slice(x, {{1, 1, 1, false}, {0, 2, 2, true}}));
    }
    l.backward();
    EXPECT_EQ(x.grad().device(), d);
    V out = x.grad().to_vector();
    const V gw = w.grad().to_vector();
    out.insert(out.end(), gw.begin(), gw.end());
    return out;
  };
  EXPECT_EQ(grads(Device::gpu(0)), grads(Device::cpu()));
  e->wait_all();
}

TEST(Mask, AComparisonsResultIsAMaskUntilWrittenInPlace) {
  NDArray a = nd::array({1.0f, -1.0f, 2.0f}, {3});
  NDArray m = nd::compare(a, 0.0f, nd::Compare::greater);
  EXPECT_TRUE(m.is_mask());
  EXPECT_TRUE(m.reshape({3, 1}).is_mask());  // a view of the same storage
  EXPECT_FALSE(a.is_mask());
  EXPECT_FALSE((m * 1.0f).is_mask());
  m += 1.0f;
  EXPECT_FALSE(m.is_mask());
  EXPECT_EQ(m.to_vector(), (std::vector<float>{2.0f, 1.0f, 2.0f}));
}

}  // namespace
}  // namespace depengine
