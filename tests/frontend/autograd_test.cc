// Autograd (depengine/autograd.h): gradients of the NDArray ops against central differences,
// broadcasting reduced over the broadcast axes, grad_req add, retain_graph, pause, the
// errors, the same bits on every engine, and a long tape dropped without deep recursion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/ndarray.h"
#include "depengine/nn.h"

namespace depengine {
namespace {

using Fn = std::function<NDArray(const std::vector<NDArray>&)>;

std::vector<float> values(std::size_t n, float lo, float hi, unsigned seed) {
  std::vector<float> v(n);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (float& x : v) x = d(g);
  return v;
}

// sum(f(inputs) · w) for a fixed weighting w, so that every output element matters.
double objective(const Fn& f, const std::vector<NDArray>& in) {
  const NDArray y = f(in);
  const std::vector<float> yv = y.to_vector();
  const std::vector<float> w = values(yv.size(), 0.5f, 1.5f, 7);
  double s = 0;
  for (std::size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * w[i];
  return s;
}

// Checks autograd's gradient of the objective against central differences for each input.
void check_gradient(const std::string& what, const Fn& f, const std::vector<Shape>& shapes,
                    float lo = -1.0f, float hi = 1.0f, double tol = 2e-2) {
  SCOPED_TRACE(what);
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*engine);
  std::vector<std::vector<float>> data;
  std::vector<NDArray> in;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::size_t n = 1;
    for (std::size_t d : shapes[i]) n *= d;
    data.push_back(values(n, lo, hi, 11 + static_cast<unsigned>(i)));
    in.push_back(nd::array(data.back(), shapes[i]));
    in.back().attach_grad();
  }
  NDArray head;
  {
    autograd::RecordScope record;
    head = f(in);
  }
  const std::vector<float> w = values(head.size(), 0.5f, 1.5f, 7);
  head.backward(nd::array(w, head.shape()));
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::vector<float> g = in[i].grad().to_vector();
    ASSERT_EQ(g.size(), data[i].size());
    for (std::size_t j = 0; j < data[i].size(); ++j) {
      const float eps = 1e-2f;
      std::vector<NDArray> plus, minus;
      for (std::size_t k = 0; k < in.size(); ++k) {
        std::vector<float> p = data[k], m = data[k];
        if (k == i) {
          p[j] += eps;
          m[j] -= eps;
        }
        plus.push_back(nd::array(p, shapes[k]));
        minus.push_back(nd::array(m, shapes[k]));
      }
      const double numeric = (objective(f, plus) - objective(f, minus)) / (2.0 * eps);
      EXPECT_NEAR(g[j], numeric, tol * (1.0 + std::fabs(numeric)))
          << "input " << i << " element " << j;
    }
  }
}

TEST(Autograd, ElementwiseGradientsMatchFiniteDifferences) {
  check_gradient("add", [](auto& x) { return x[0] + x[1]; }, {{2, 3}, {2, 3}});
  check_gradient("sub", [](auto& x) { return x[0] - x[1]; }, {{2, 3}, {2, 3}});
  check_gradient("mul", [](auto& x) { return x[0] * x[1]; }, {{2, 3}, {2, 3}});
  check_gradient("div", [](auto& x) { return x[0] / x[1]; }, {{2, 3}, {2, 3}}, 0.5f, 2.0f);
  check_gradient("pow", [](auto& x) { return nd::pow(x[0], x[1]); }, {{2, 3}, {2, 3}}, 0.5f, 2.0f);
  check_gradient("maximum", [](auto& x) { return nd::maximum(x[0], x[1]); }, {{2, 3}, {2, 3}});
  check_gradient("minimum", [](auto& x) { return nd::minimum(x[0], x[1]); }, {{2, 3}, {2, 3}});
  check_gradient("neg", [](auto& x) { return -x[0]; }, {{5}});
  check_gradient("exp", [](auto& x) { return nd::exp(x[0]); }, {{5}});
  check_gradient("log", [](auto& x) { return nd::log(x[0]); }, {{5}}, 0.5f, 2.0f);
  check_gradient("relu", [](auto& x) { return nd::relu(x[0]); }, {{7}});
  check_gradient("sigmoid", [](auto& x) { return nd::sigmoid(x[0]); }, {{5}});
  check_gradient("tanh", [](auto& x) { return nd::tanh(x[0]); }, {{5}});
  check_gradient("sqrt", [](auto& x) { return nd::sqrt(x[0]); }, {{5}}, 0.5f, 2.0f);
  check_gradient("abs", [](auto& x) { return nd::abs(x[0]); }, {{7}});
  check_gradient("square", [](auto& x) { return nd::square(x[0]); }, {{5}});
}

TEST(Autograd, ScalarFormsMatchFiniteDifferences) {
  check_gradient("x + 2", [](auto& x) { return x[0] + 2.0f; }, {{4}});
  check_gradient("2 - x", [](auto& x) { return 2.0f - x[0]; }, {{4}});
  check_gradient("x * 3", [](auto& x) { return x[0] * 3.0f; }, {{4}});
  check_gradient("x / 3", [](auto& x) { return x[0] / 3.0f; }, {{4}});
  check_gradient("3 / x", [](auto& x) { return 3.0f / x[0]; }, {{4}}, 0.5f, 2.0f);
  check_gradient("x ** 3", [](auto& x) { return nd::pow(x[0], 3.0f); }, {{4}});
}

TEST(Autograd, BroadcastingIsReducedOverTheBroadcastAxes) {
  check_gradient("(2,3) + (3,)", [](auto& x) { return x[0] + x[1]; }, {{2, 3}, {3}});
  check_gradient("(2,3) * (2,1)", [](auto& x) { return x[0] * x[1]; }, {{2, 3}, {2, 1}});
  check_gradient("(4,1,3) / (2,1)", [](auto& x) { return x[0] / x[1]; }, {{4, 1, 3}, {2, 1}},
                 0.5f, 2.0f);
  check_gradient("() - (2,2)", [](auto& x) { return x[0] - x[1]; }, {{}, {2, 2}});
}

TEST(Autograd, ReductionsDotAndShapesMatchFiniteDifferences) {
  check_gradient("sum", [](auto& x) { return nd::sum(x[0]); }, {{2, 3}});
  check_gradient("sum axis 0", [](auto& x) { return nd::sum(x[0], 0); }, {{2, 3}});
  check_gradient("mean axis -1", [](auto& x) { return nd::mean(x[0], -1); }, {{2, 3}});
  check_gradient("mean", [](auto& x) { return nd::mean(x[0]); }, {{2, 3}});
  check_gradient("max", [](auto& x) { return nd::max(x[0]); }, {{2, 3}});
  check_gradient("max axis 1", [](auto& x) { return nd::max(x[0], 1); }, {{2, 3}});
  check_gradient("dot 2x2", [](auto& x) { return nd::dot(x[0], x[1]); }, {{2, 3}, {3, 4}});
  check_gradient("dot 1x2", [](auto& x) { return nd::dot(x[0], x[1]); }, {{3}, {3, 4}});
  check_gradient("dot 2x1", [](auto& x) { return nd::dot(x[0], x[1]); }, {{2, 3}, {3}});
  check_gradient("dot 1x1", [](auto& x) { return nd::dot(x[0], x[1]); }, {{3}, {3}});
  check_gradient("transpose", [](auto& x) { return nd::transpose(x[0]) * x[1]; },
                 {{2, 3}, {3, 2}});
  check_gradient("reshape", [](auto& x) { return x[0].reshape({3, 2}) * x[1]; },
                 {{2, 3}, {3, 2}});
  check_gradient("broadcast_to", [](auto& x) { return nd::broadcast_to(x[0], {2, 3}); }, {{3}});
  check_gradient("copy", [](auto& x) { return nd::copy(x[0]) * x[0]; }, {{3}});
}

TEST(Autograd, ArrayUsedTwiceSumsItsGradients) {
  NDArray x = nd::array({1.0f, 2.0f, 3.0f}, {3});
  x.attach_grad();
  NDArray y;
  {
    autograd::RecordScope record;
    y = nd::sum(x * x + x);  // dy/dx = 2x + 1
  }
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3.0f, 5.0f, 7.0f}));
}

TEST(Autograd, GradReqAddAccumulatesAndWriteOverwrites) {
  NDArray a = nd::array({1.0f, 2.0f}, {2}), w = nd::array({1.0f, 2.0f}, {2});
  a.attach_grad(autograd::GradReq::add);
  w.attach_grad(autograd::GradReq::write);
  for (int i = 0; i < 3; ++i) {
    NDArray y;
    {
      autograd::RecordScope record;
      y = nd::sum(a * 2.0f + w * 2.0f);
    }
    y.backward();
  }
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{6.0f, 6.0f}));
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{2.0f, 2.0f}));
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  NDArray x = nd::array({1.0f, 2.0f}, {2});
  x.attach_grad(autograd::GradReq::add);
  NDArray y;
  {
    autograd::RecordScope record;
    y = nd::sum(nd::exp(x));
  }
  y.backward(nd::ones({}), /*retain_graph=*/true);
  y.backward();
  const std::vector<float> g = x.grad().to_vector();
  EXPECT_FLOAT_EQ(g[0], 2.0f * std::exp(1.0f));
  try {
    y.backward();
    FAIL() << "a third backward through a freed graph ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Autograd, PauseRecordsNothingAndNoHistoryIsAnError) {
  NDArray x = nd::array({1.0f, 2.0f}, {2});
  x.attach_grad();
  NDArray y, z;
  {
    autograd::RecordScope record;
    EXPECT_TRUE(autograd::is_recording());
    EXPECT_TRUE(autograd::is_training());
    {
      autograd::PauseScope pause;
      EXPECT_FALSE(autograd::is_recording());
      z = x * 2.0f;
    }
    y = x * 3.0f;
  }
  EXPECT_FALSE(autograd::is_recording());
  try {
    z.backward();
    FAIL() << "backward on an array made while paused ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no autograd history"), std::string::npos) << e.what();
  }
  NDArray plain = nd::ones({2});
  EXPECT_THROW(plain.backward(), Error);
  y.backward(nd::ones({2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3.0f, 3.0f}));
}

TEST(Autograd, InPlaceWhileRecordingIsRefusedAndSavedArraysAreChecked) {
  NDArray x = nd::array({1.0f, 2.0f}, {2});
  x.attach_grad();
  {
    autograd::RecordScope record;
    NDArray y = x * 2.0f;
    EXPECT_THROW(y += 1.0f, Error);
    EXPECT_THROW(x += nd::ones({2}), Error);
  }
  NDArray y;
  NDArray b = nd::array({3.0f, 4.0f}, {2});
  {
    autograd::RecordScope record;
    y = nd::sum(x * b);  // saves b
  }
  b += 1.0f;  // not recording: allowed, but b's saved value is gone
  try {
    y.backward();
    FAIL() << "backward used an overwritten saved array";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("written in place"), std::string::npos) << e.what();
  }
}

TEST(Autograd, GradReturnsNewArraysAndLeavesBuffersAlone) {
  NDArray x = nd::array({1.0f, 2.0f}, {2}), u = nd::array({5.0f}, {1});
  x.attach_grad();
  u.attach_grad();
  NDArray h, y;
  {
    autograd::RecordScope record;
    h = x * x;
    y = nd::sum(h * 3.0f);
  }
  const std::vector<NDArray> g = autograd::grad({y}, {x, h, u}, {}, /*retain_graph=*/true);
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{6.0f, 12.0f}));
  EXPECT_EQ(g[1].to_vector(), (std::vector<float>{3.0f, 3.0f}));
  EXPECT_EQ(g[2].to_vector(), (std::vector<float>{0.0f}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0.0f, 0.0f}));
  NDArray plain = nd::ones({2});
  EXPECT_THROW(autograd::grad({y}, {plain}), Error);
}

TEST(Autograd, HeadGradientShapeIsChecked) {
  NDArray x = nd::ones({2, 2});
  x.attach_grad();
  NDArray y;
  {
    autograd::RecordScope record;
    y = x * 2.0f;
  }
  EXPECT_THROW(y.backward(nd::ones({4})), Error);
  y.backward(nd::ones({2, 2}));  // the refused call changed nothing
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>(4, 2.0f)));
}

// A training step's gradients: the same bits on the naive engine and threaded 1, 2 and 4.
std::vector<std::vector<float>> train_grads(Engine& e) {
  EngineScope use(e);
  nd::seed(3);
  NDArray w1 = nd::random_normal({16, 32}, 0.0f, 0.3f), w2 = nd::random_normal({32, 4});
  NDArray x = nd::random_uniform({64, 16}, -1.0f, 1.0f), b = nd::random_normal({32});
  w1.attach_grad();
  w2.attach_grad();
  b.attach_grad();
  for (int step = 0; step < 3; ++step) {
    NDArray loss;
    {
      autograd::RecordScope record;
      NDArray h = nd::tanh(nd::dot(x, w1) + b);
      loss = nd::mean(nd::square(nd::dot(h, w2) - 0.5f));
    }
    loss.backward();
    nd::sgd_update(w1, w1.grad(), 0.1f);
    nd::sgd_update(w2, w2.grad(), 0.1f);
  }
  return {w1.grad().to_vector(), w2.grad().to_vector(), b.grad().to_vector(), w1.to_vector()};
}

TEST(Autograd, GradientsAreTheSameBitsOnEveryEngine) {
  auto naive = Engine::create("naive");
  const auto ref = train_grads(*naive);
  for (int threads : {1, 2, 4}) {
    auto e = Engine::create("threaded", {.cpu_threads = threads});
    const auto got = train_grads(*e);
    ASSERT_EQ(got.size(), ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got[i].size(), ref[i].size());
      EXPECT_EQ(std::memcmp(got[i].data(), ref[i].data(), ref[i].size() * sizeof(float)), 0)
          << "array " << i << " with " << threads << " workers";
    }
  }
}

TEST(Autograd, LongTapeIsDroppedWithoutDeepRecursion) {
  NDArray x = nd::ones({1});
  x.attach_grad();
  NDArray y = x;
  {
    autograd::RecordScope record;
    for (int i = 0; i < 200000; ++i) y = y + 1.0f;
  }
  y = NDArray();  // drops 200,000 nodes: a recursive release would overflow the stack
  waitall();
  SUCCEED();
}

TEST(Autograd, ArraysDroppedWhileTheirBackwardIsPending) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*e);
  NDArray w = nd::random_normal({200, 200});
  w.attach_grad();
  {
    NDArray loss;
    {
      autograd::RecordScope record;
      NDArray h = nd::dot(w, w);
      loss = nd::sum(nd::square(h));
    }
    loss.backward();
  }  // every intermediate handle is gone while the backward ops may still be queued
  const std::vector<float> g = w.grad().to_vector();
  EXPECT_EQ(g.size(), 200u * 200u);
  for (float v : g) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace depengine
