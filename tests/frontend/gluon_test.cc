// The C++ Gluon layers (depengine/gluon.h): shapes and deferred in_units, Dense's forward
// against a float64 loop, gradients of every parameter against central differences, the
// losses against their formulas, Trainer "sgd" against MXNet's update over several steps,
// dropout's masks, parameter files, the errors, and the same bits on every engine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/gluon.h"
#include "depengine/record.h"

namespace depengine {
namespace {

using gluon::Dense;
using gluon::Sequential;

std::vector<float> values(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Runs `fn`, expecting an Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
    }
  }
}

class Gluon : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> engine_ = Engine::create("naive");
  EngineScope scope_{*engine_};
};

TEST_F(Gluon, DenseInfersInUnitsAtTheFirstForward) {
  Dense d(5);
  d.initialize();
  EXPECT_EQ(d.weight().shape(), (Shape{5, 0}));
  EXPECT_FALSE(d.weight().initialized());
  expect_error([&] { d.weight().data(); }, {"weight", "inferred at the layer's first forward"});
  const NDArray y = d(nd::ones({3, 4}));
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  EXPECT_EQ(d.weight().shape(), (Shape{5, 4}));
  EXPECT_EQ(d.weight().data().shape(), (Shape{5, 4}));
  EXPECT_EQ(d.bias().data().to_vector(), std::vector<float>(5, 0.0f));
  // More than 2 dimensions: flattened to (batch, rest).
  Dense flat(2);
  flat.initialize();
  EXPECT_EQ(flat(nd::ones({3, 4, 2})).shape(), (Shape{3, 2}));
  EXPECT_EQ(flat.weight().shape(), (Shape{2, 8}));
  Sequential net;
  net.add(Dense(7, "relu")).add(gluon::Dropout(0.5f)).add(Dense(3));
  net.initialize(gluon::init::Xavier());
  EXPECT_EQ(net(nd::ones({2, 6})).shape(), (Shape{2, 3}));
  const gluon::ParameterDict params = net.collect_params();
  ASSERT_EQ(params.size(), 4u);
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(params["2.weight"].shape(), (Shape{3, 7}));
}

TEST_F(Gluon, DenseForwardIsXTimesWeightTransposedPlusBias) {
  const std::size_t m = 6, k = 5, n = 4;
  for (const std::string act : {"", "relu", "tanh"}) {
    Dense d(n, act, true, k);
    d.initialize(gluon::init::Uniform(1.0f));
    d.bias().set_data(nd::array(values(n, 3), {n}));
    const std::vector<float> x = values(m * k, 1);
    const std::vector<float> w = d.weight().data().to_vector(), b = d.bias().data().to_vector();
    const std::vector<float> y = d(nd::array(x, {m, k})).to_vector();
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        double ref = b[j];
        for (std::size_t p = 0; p < k; ++p) ref += static_cast<double>(x[i * k + p]) * w[j * k + p];
        if (act == "relu") ref = std::max(ref, 0.0);
        if (act == "tanh") ref = std::tanh(ref);
        EXPECT_NEAR(y[i * n + j], ref, 1e-5) << act << " " << i << "," << j;
      }
    }
  }
  Dense nobias(3, "", false, 2);
  nobias.initialize(gluon::init::One());
  EXPECT_EQ(nobias(nd::ones({1, 2})).to_vector(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(nobias.collect_params().size(), 1u);
}

// The loss of `net` on (x, y) as a double, computed by the forward alone.
double loss_of(gluon::Block& net, const gluon::Loss& loss, const NDArray& x, const NDArray& y) {
  return static_cast<double>(nd::sum(loss(net(x), y)).item());
}

// Every parameter's gradient of sum(loss(net(x), y)) against central differences of the
// forward, the host editing the parameter between runs (the naive engine has run it all).
void check_gradients(gluon::Block& net, const gluon::Loss& loss, const NDArray& x,
                     const NDArray& y) {
  NDArray l;
  {
    autograd::RecordScope record;
    l = loss(net(x), y);
  }
  l.backward();
  const float eps = 2e-3f;
  std::size_t checked = 0;
  for (const auto& [name, p] : net.collect_params()) {
    const std::vector<float> analytic = p->grad().to_vector();
    ASSERT_EQ(analytic.size(), p->data().size()) << name;
    float* data = p->data().data();
    for (std::size_t i = 0; i < analytic.size(); ++i) {
      waitall();
      const float saved = data[i];
      data[i] = saved + eps;
      const double up = loss_of(net, loss, x, y);
      data[i] = saved - eps;
      const double down = loss_of(net, loss, x, y);
      data[i] = saved;
      const double numeric = (up - down) / (2.0 * eps);
      EXPECT_NEAR(analytic[i], numeric, 2e-3 + 1e-2 * std::fabs(numeric))
          << name << " element " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

TEST_F(Gluon, GradientsReachEveryParameter) {
  const std::size_t m = 5, k = 4;
  const NDArray x = nd::array(values(m * k, 11), {m, k});
  {
    Sequential net;
    net.add(Dense(6, "tanh")).add(gluon::Activation("softrelu")).add(Dense(3, "sigmoid")).add(Dense(4));
    net.initialize(gluon::init::Normal(0.8f));
    const NDArray y = nd::array(std::vector<float>{0, 3, 1, 2, 3}, {m});
    check_gradients(net, gluon::SoftmaxCrossEntropyLoss(), x, y);
  }
  {
    Sequential net;
    net.add(Dense(3, "sigmoid", true, k)).add(gluon::Flatten()).add(Dense(2, "", false));
    net.initialize(gluon::init::Xavier("gaussian", "in", 4.0f));
    const NDArray y = nd::array(values(m * 2, 12), {m, 2});
    check_gradients(net, gluon::L2Loss(0.7f), x, y);
  }
}

// ReLU: the gradient through the fused relu is dy where the output is positive (the
// hand-written formula the MLP used before autograd).
TEST_F(Gluon, FusedReluDenseGradientIsTheLinearLayerFormula) {
  const std::size_t m = 4, k = 3, n = 5;
  Dense d(n, "relu", true, k);
  d.initialize(gluon::init::Uniform(1.0f));
  const std::vector<float> x = values(m * k, 21), g = values(m * n, 22);
  NDArray y;
  {
    autograd::RecordScope record;
    y = d(nd::array(x, {m, k}));
  }
  y.backward(nd::array(g, {m, n}));
  const std::vector<float> yv = y.to_vector();
  const std::vector<float> dw = d.weight().grad().to_vector(), db = d.bias().grad().to_vector();
  for (std::size_t j = 0; j < n; ++j) {
    double ref_b = 0;
    for (std::size_t i = 0; i < m; ++i) ref_b += yv[i * n + j] > 0 ? g[i * n + j] : 0.0;
    EXPECT_NEAR(db[j], ref_b, 1e-5);
    for (std::size_t p = 0; p < k; ++p) {
      double ref = 0;
      for (std::size_t i = 0; i < m; ++i) {
        ref += (yv[i * n + j] > 0 ? g[i * n + j] : 0.0) * x[i * k + p];
      }
      EXPECT_NEAR(dw[j * k + p], ref, 1e-5);
    }
  }
}

TEST_F(Gluon, SoftmaxCrossEntropyLossPerRow) {
  const std::size_t m = 3, n = 4;
  const std::vector<float> z = {1, 2, 3, 4, 1000, 0, -1000, 5, -1, -1, -1, -1};
  const std::vector<float> labels = {2, 0, 3};
  const std::vector<float> l =
      gluon::SoftmaxCrossEntropyLoss()(nd::array(z, {m, n}), nd::array(labels, {m})).to_vector();
  ASSERT_EQ(l.size(), m);
  for (std::size_t r = 0; r < m; ++r) {
    double mx = -1e30, s = 0;
    for (std::size_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(z[r * n + j]));
    for (std::size_t j = 0; j < n; ++j) s += std::exp(z[r * n + j] - mx);
    const double ref = std::log(s) + mx - z[r * n + static_cast<std::size_t>(labels[r])];
    EXPECT_NEAR(l[r], ref, 1e-4 * (1 + std::fabs(ref))) << r;
  }
  const std::vector<float> from_logits =
      gluon::SoftmaxCrossEntropyLoss(true)(nd::array(z, {m, n}), nd::array(labels, {m})).to_vector();
  EXPECT_EQ(from_logits, (std::vector<float>{-3, -1000, 1}));
  const std::vector<float> l2 =
      gluon::L2Loss(2.0f)(nd::array(std::vector<float>{1, 2, 3, 4}, {2, 2}),
                          nd::array(std::vector<float>{0, 0, 1, 1}, {2, 2})).to_vector();
  EXPECT_EQ(l2, (std::vector<float>{2.5f, 6.5f}));
}

TEST_F(Gluon, LabelOutOfRangeFailsAtTheBlocker) {
  const NDArray l = gluon::SoftmaxCrossEntropyLoss()(nd::zeros({2, 3}),
                                                     nd::array(std::vector<float>{1, 3}, {2}));
  expect_error([&] { l.to_vector(); }, {"label 3 of sample 1 is not a class index in [0, 3)"});
  const NDArray half = gluon::SoftmaxCrossEntropyLoss()(nd::zeros({1, 3}),
                                                        nd::array(std::vector<float>{0.5f}, {1}));
  expect_error([&] { half.item(); }, {"label 0.5 of sample 0"});
}

// MXNet's SGD: w ← w − lr·(g / batch + wd·w), checked in float64 over several steps.
TEST_F(Gluon, TrainerSgdFollowsTheFormula) {
  const std::size_t n = 12, batch = 4;
  const float lr = 0.3f, wd = 0.05f;
  Dense d(3, "", true, 4);
  d.initialize(gluon::init::Uniform(1.0f));
  d.bias().set_data(nd::array(values(3, 30), {3}));
  gluon::Trainer trainer(d.collect_params(), "sgd", {{"learning_rate", lr}, {"wd", wd}});
  EXPECT_EQ(trainer.learning_rate(), lr);
  const std::vector<float> w0 = d.weight().data().to_vector(), b0 = d.bias().data().to_vector();
  std::vector<double> w(w0.begin(), w0.end()), b(b0.begin(), b0.end());
  for (int step = 0; step < 4; ++step) {
    const NDArray x = nd::array(values(batch * 4, 40 + step), {batch, 4});
    NDArray y;
    {
      autograd::RecordScope record;
      y = nd::sum(nd::square(d(x)));
    }
    y.backward();
    const std::vector<float> gw = d.weight().grad().to_vector(), gb = d.bias().grad().to_vector();
    trainer.step(batch);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * (gw[i] / batch + wd * w[i]);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] -= lr * (gb[i] / batch + wd * b[i]);
    const std::vector<float> got_w = d.weight().data().to_vector(), got_b = d.bias().data().to_vector();
    for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got_w[i], w[i], 1e-5) << step;
    for (std::size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(got_b[i], b[i], 1e-5) << step;
  }
  trainer.set_learning_rate(0.0f);
  const std::vector<float> before = d.weight().data().to_vector();
  gluon::Parameter& bias = d.bias();
  bias.set_grad_req(gluon::GradReq::null);
  trainer.step(1);
  EXPECT_EQ(d.weight().data().to_vector().size(), n);
  // lr 0 and wd: w·(1 − 0) — unchanged.
  EXPECT_EQ(d.weight().data().to_vector(), before);
  d.weight().zero_grad();
  EXPECT_EQ(d.weight().grad().to_vector(), std::vector<float>(n, 0.0f));
}

TEST_F(Gluon, DropoutMasksInTrainingModeOnly) {
  gluon::Dropout drop(0.25f);
  const NDArray x = nd::ones({100, 40});
  EXPECT_EQ(drop(x).to_vector(), x.to_vector());  // predict mode: the identity
  NDArray y;
  NDArray v = nd::ones({100, 40});
  v.attach_grad();
  {
    autograd::RecordScope record;
    y = drop(v);
  }
  const std::vector<float> yv = y.to_vector();
  std::size_t dropped = 0;
  for (float e : yv) {
    if (e == 0.0f) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(e, 1.0f / 0.75f);
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / yv.size(), 0.25, 0.03);
  y.backward();
  EXPECT_EQ(v.grad().to_vector(), yv);  // dy · mask / (1 − rate), as y for x = 1
  {
    autograd::RecordScope record;
    EXPECT_NE(drop(x).to_vector(), yv);  // a new mask per call
  }
  {
    autograd::RecordScope record(false);  // recording in predict mode: the identity
    EXPECT_EQ(drop(x).to_vector(), x.to_vector());
  }
}

TEST_F(Gluon, InitializersDrawTheirDistributions) {
  const std::vector<float> u = gluon::init::Uniform(0.07f).make({50, 40}, Device::cpu()).to_vector();
  float lo = 1, hi = -1;
  for (float e : u) lo = std::min(lo, e), hi = std::max(hi, e);
  EXPECT_GE(lo, -0.07f);
  EXPECT_LE(hi, 0.07f);
  EXPECT_LT(lo, -0.06f);
  EXPECT_GT(hi, 0.06f);
  // Xavier avg on (50, 40): scale sqrt(3 / 45).
  const float scale = std::sqrt(3.0f / 45.0f);
  for (float e : gluon::init::Xavier().make({50, 40}, Device::cpu()).to_vector()) {
    EXPECT_LE(std::fabs(e), scale);
  }
  double s2 = 0;
  const std::vector<float> g = gluon::init::Normal(0.5f).make({4000}, Device::cpu()).to_vector();
  for (float e : g) s2 += static_cast<double>(e) * e;
  EXPECT_NEAR(std::sqrt(s2 / g.size()), 0.5, 0.03);
  EXPECT_EQ(gluon::init::create("ones").make({3}, Device::cpu()).to_vector(), std::vector<float>(3, 1));
  EXPECT_EQ(gluon::init::create("zeros").make({3}, Device::cpu()).to_vector(), std::vector<float>(3, 0));
}

TEST_F(Gluon, ParametersSaveAndLoad) {
  const std::string path = ::testing::TempDir() + "gluon_test_params.bin";
  Sequential a;
  a.add(Dense(4, "relu", true, 3)).add(Dense(2));
  a.initialize(gluon::init::Uniform(1.0f));
  const NDArray x = nd::array(values(6, 50), {2, 3});
  const std::vector<float> ya = a(x).to_vector();
  a.save_parameters(path);
  Sequential b;
  b.add(Dense(4, "relu")).add(Dense(2));  // shapes unknown: taken from the file
  b.load_parameters(path);
  EXPECT_EQ(b(x).to_vector(), ya);
  Sequential c;
  c.add(Dense(5, "relu", true, 3)).add(Dense(2));
  expect_error([&] { c.load_parameters(path); }, {path, "0.weight", "(4, 3)", "(5, 3)"});
  Sequential d;
  d.add(Dense(4, "relu"));
  expect_error([&] { d.load_parameters(path); }, {"'1.weight', which the block does not have"});
  Sequential e;
  e.add(Dense(4, "relu")).add(Dense(2)).add(Dense(2));
  expect_error([&] { e.load_parameters(path); }, {"lacks parameter '2.weight'"});
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("not parameters", f);
    std::fclose(f);
  }
  expect_error([&] { b.load_parameters(path); }, {"is not a parameter file"});
  expect_error([&] { b.load_parameters(path + ".missing"); }, {"cannot open"});
  std::remove(path.c_str());
}

TEST_F(Gluon, ErrorsNameTheirCause) {
  Dense d(3, "", true, 4);
  d.initialize();
  expect_error([&] { d(nd::ones({2, 5})); },
               {"Dense(units=3, in_units=4)", "(2, 5)", "(3, 4)"});
  expect_error([&] { d(nd::ones({5})); }, {"Dense(units=3, in_units=4)", "(5,)"});
  expect_error([] { Dense(3, "swish"); }, {"unknown activation 'swish'"});
  expect_error([] { gluon::Activation("gelu"); }, {"unknown activation 'gelu'"});
  expect_error([] { gluon::init::create("orthogonal"); }, {"unknown initializer 'orthogonal'"});
  expect_error([] { gluon::init::Xavier("cauchy"); }, {"rnd_type 'cauchy'"});
  expect_error([&] { gluon::Trainer(d.collect_params(), "lamb"); }, {"unknown optimizer 'lamb'"});
  expect_error([&] { gluon::Trainer(d.collect_params(), "sgd", {{"beta1", 0.9}}); },
               {"unknown option 'beta1'"});
  expect_error([&] { gluon::Trainer(d.collect_params(), "sgd", {{"learning_rate", -1}}); },
               {"learning rate -1"});
  expect_error([] { gluon::Dropout(1.0f); }, {"Dropout: rate 1 is not in [0, 1)"});
  Dense fresh(2);
  expect_error([&] { fresh(nd::ones({1, 2})); }, {"'weight' is not initialized"});
  expect_error([] { gluon::init::Xavier().make({4}, Device::cpu()); }, {"(4,)"});
  expect_error([] { gluon::SoftmaxCrossEntropyLoss()(nd::zeros({2, 3}), nd::zeros({3})); },
               {"(2, 3)", "(3,)"});
  expect_error([] { gluon::L2Loss()(nd::zeros({2, 3}), nd::zeros({5})); }, {"(2, 3)", "(5,)"});
  gluon::Trainer t(d.collect_params(), "sgd");
  expect_error([&] { t.step(0); }, {"batch_size must be positive"});
  Sequential s;
  expect_error([&] { s[0]; }, {"no block 0"});
}

// 20 steps of an MLP with dropout, trained from one seed: the same bits on the naive engine
// and the threaded engine with 1, 2 and 4 workers.
std::vector<std::vector<float>> train_20_steps(Engine& e) {
  EngineScope use(e);
  nd::seed(3);
  Sequential net;
  net.add(Dense(64, "relu")).add(gluon::Dropout(0.3f)).add(Dense(32, "tanh")).add(Dense(10));
  net.initialize(gluon::init::Xavier());
  gluon::SoftmaxCrossEntropyLoss loss_fn;
  gluon::Trainer trainer(net.collect_params(), "sgd", {{"learning_rate", 0.5}});
  for (int step = 0; step < 20; ++step) {
    const NDArray x = nd::random_normal({32, 50});
    const NDArray y = nd::array(std::vector<float>(32, static_cast<float>(step % 10)), {32});
    NDArray l;
    {
      autograd::RecordScope record;
      l = loss_fn(net(x), y);
    }
    l.backward();
    trainer.step(32);
  }
  std::vector<std::vector<float>> out;
  for (const auto& [name, p] : net.collect_params()) out.push_back(p->data().to_vector());
  return out;
}

TEST(GluonDeterminism, SameParametersOnEveryEngineAndWorkerCount) {
  auto naive = Engine::create("naive");
  const auto ref = train_20_steps(*naive);
  for (int threads : {1, 2, 4}) {
    auto threaded = Engine::create("threaded", {.cpu_threads = threads});
    const auto got = train_20_steps(*threaded);
    ASSERT_EQ(got.size(), ref.size());
    for (std::size_t p = 0; p < ref.size(); ++p) {
      ASSERT_EQ(got[p].size(), ref[p].size());
      EXPECT_EQ(std::memcmp(got[p].data(), ref[p].data(), ref[p].size() * sizeof(float)), 0)
          << "parameter " << p << " differs with " << threads << " workers";
    }
  }
}

// A replayed training step (nd::record) draws dropout masks as the pushed steps would.
TEST(GluonReplay, DropoutMasksReplayAsPushed) {
  auto run = [](bool replay) {
    auto e = Engine::create("naive");
    EngineScope use(*e);
    nd::seed(9);
    gluon::Dropout drop(0.5f);
    NDArray x = nd::ones({4, 8});
    std::vector<std::vector<float>> out;
    NDArray y;
    auto step = [&] {
      autograd::RecordScope record;
      y = drop(x);
    };
    nd::Segment seg;
    for (int i = 0; i < 3; ++i) {
      if (replay && i > 0) {
        nd::replay(seg);
      } else if (replay) {
        seg = nd::record({x}, step);
      } else {
        step();
      }
      out.push_back(y.to_vector());
    }
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

// MXNet's Adam with the bias correction in the learning rate, in float64 over several steps.
TEST_F(Gluon, TrainerAdamFollowsTheFormula) {
  const std::size_t batch = 4;
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.02;
  Dense d(3, "", false, 4);
  d.initialize(gluon::init::Uniform(1.0f));
  gluon::Trainer trainer(d.collect_params(), "adam",
                         {{"learning_rate", lr}, {"beta1", b1}, {"beta2", b2}, {"epsilon", eps},
                          {"wd", wd}});
  const std::vector<float> w0 = d.weight().data().to_vector();
  std::vector<double> w(w0.begin(), w0.end()), m(w.size()), v(w.size());
  for (int t = 1; t <= 4; ++t) {
    NDArray y;
    {
      autograd::RecordScope record;
      y = nd::sum(nd::square(d(nd::array(values(batch * 4, 60 + t), {batch, 4}))));
    }
    y.backward();
    const std::vector<float> g = d.weight().grad().to_vector();
    trainer.step(batch);
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i] / static_cast<double>(batch) + wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
    const std::vector<float> got = d.weight().data().to_vector();
    for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-5) << "step " << t;
  }
  for (const char* name : {"sgd", "adam", "adadelta", "rmsprop"}) {
    gluon::Trainer other(d.collect_params(), name);
    other.step(2);
    EXPECT_EQ(d.weight().data().to_vector().size(), 12u) << name;
  }
  expect_error([&] { gluon::Trainer(d.collect_params(), "adadelta", {{"beta1", 0.9}}); },
               {"unknown option 'beta1' of optimizer adadelta", "rho"});
}

TEST_F(Gluon, ConvolutionLayersInferChannelsAndCheckShapes) {
  Sequential net;
  net.add(gluon::Conv2D(4, {3, 3}, {1, 1}, {1, 1}, "relu"))
      .add(gluon::BatchNorm())
      .add(gluon::MaxPool2D({2, 2}))
      .add(gluon::Conv2D(6, {3, 3}, {2, 2}))
      .add(gluon::AvgPool2D({1, 1}))
      .add(gluon::GlobalAvgPool2D())
      .add(gluon::Flatten())
      .add(Dense(3));
  net.initialize(gluon::init::Xavier());
  const NDArray y = net(nd::random_normal({2, 2, 10, 10}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  const gluon::ParameterDict p = net.collect_params();
  EXPECT_EQ(p["0.weight"].shape(), (Shape{4, 2, 3, 3}));
  EXPECT_EQ(p["1.gamma"].shape(), (Shape{4}));
  EXPECT_EQ(p["3.weight"].shape(), (Shape{6, 4, 3, 3}));
  EXPECT_EQ(p["7.weight"].shape(), (Shape{3, 6}));
  EXPECT_EQ(p["1.running_mean"].grad_req(), gluon::GradReq::null);
  expect_error([&] { net(nd::ones({2, 3, 10, 10})); },
               {"Conv2D(channels=4, in_channels=2", "(2, 3, 10, 10)", "(4, 2, 3, 3)"});
  expect_error([&] { net(nd::ones({2, 10, 10})); }, {"Conv2D", "(2, 10, 10)"});
  gluon::Conv2D big(2, {5, 5});
  big.initialize();
  expect_error([&] { big(nd::ones({1, 1, 4, 4})); },
               {"Conv2D(channels=2, in_channels=0, kernel_size=(5, 5))", "(1, 1, 4, 4)",
                "smaller than the (5, 5) window"});
  gluon::MaxPool2D pool({3, 3});
  expect_error([&] { pool(nd::ones({1, 1, 2, 2})); }, {"MaxPool2D", "(1, 1, 2, 2)"});
  expect_error([] { gluon::Conv2D(2, {3, 3}, {1, 1}, {0, 0}, "swish"); },
               {"unknown activation 'swish'"});
}

// BatchNorm: training mode normalizes with the batch and moves the running statistics;
// predict mode uses them.
TEST_F(Gluon, BatchNormTrainsAndPredicts) {
  gluon::BatchNorm bn(0.5f);
  bn.initialize();
  const NDArray x = nd::array(std::vector<float>{1, 3, 10, 30}, {2, 2, 1, 1});  // channel 0: 1, 10
  NDArray y;
  {
    autograd::RecordScope record;
    y = bn(x);
  }
  const std::vector<float> yv = y.to_vector();
  EXPECT_NEAR(yv[0], -1.0f, 1e-3);
  EXPECT_NEAR(yv[2], 1.0f, 1e-3);
  EXPECT_NEAR(bn.running_mean().data().to_vector()[0], 0.5 * 5.5, 1e-4);
  const std::vector<float> predicted = bn(x).to_vector();
  const double mean = 2.75, var = 0.5 + 0.5 * 20.25;
  EXPECT_NEAR(predicted[0], (1 - mean) / std::sqrt(var + 1e-5), 1e-4);
}

TEST_F(Gluon, ConvolutionGradientsReachEveryParameter) {
  Sequential net;
  net.add(gluon::Conv2D(2, {2, 2}, {1, 1}, {1, 1}, "tanh"))
      .add(gluon::AvgPool2D({2, 2}))
      .add(gluon::Flatten())
      .add(Dense(3));
  net.initialize(gluon::init::Normal(0.5f));
  const NDArray x = nd::array(values(2 * 1 * 4 * 4, 70), {2, 1, 4, 4});
  check_gradients(net, gluon::SoftmaxCrossEntropyLoss(), x, nd::array(std::vector<float>{2, 0}, {2}));
}

// The Activation block's relu (one tape entry, gradient through relu_backward) against its
// formula: dy where x > 0, else 0 (x kept away from the kink).
TEST_F(Gluon, ReluActivationGradient) {
  std::vector<float> xv = values(30, 80);
  for (float& v : xv) v += v >= 0 ? 0.1f : -0.1f;
  NDArray x = nd::array(xv, {5, 6});
  x.attach_grad();
  gluon::Activation relu("relu");
  const NDArray w = nd::array(values(30, 81), {5, 6});
  NDArray l;
  {
    autograd::RecordScope record;
    l = nd::sum(relu(x) * w);
  }
  l.backward();
  const std::vector<float> g = x.grad().to_vector(), wv = w.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(g[i], xv[i] > 0 ? wv[i] : 0.0f) << i;
}

}  // namespace
}  // namespace depengine
