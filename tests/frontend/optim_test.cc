// The fused optimizer updates of depengine/optim.h against MXNet 1.9's formulas, written out
// here in double over several steps, on the naive engine, threaded engines and a simulated
// GPU (and a CUDA GPU where there is one); and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "depengine/optim.h"

namespace depengine {
namespace {

using Vec = std::vector<double>;

constexpr int kSteps = 6;
constexpr std::size_t kN = 70000;  // more than one chunk of the CPU kernels

double clip(double x, double b) { return b < 0 ? x : std::min(b, std::max(-b, x)); }

// A deterministic weight and a gradient per step, spanning signs and magnitudes.
std::vector<float> start_weight() {
  std::vector<float> w(kN);
  for (std::size_t i = 0; i < kN; ++i) w[i] = static_cast<float>(std::sin(0.37 * i)) * 0.5f;
  return w;
}
std::vector<float> grad_at(int step) {
  std::vector<float> g(kN);
  for (std::size_t i = 0; i < kN; ++i) g[i] = static_cast<float>(std::cos(0.11 * i + step) * 3.0);
  return g;
}

struct Where {
  std::string kind;
  int threads;
  bool gpu;
  int sim_gpus;
};

void PrintTo(const Where& w, std::ostream* os) {
  *os << w.kind << w.threads << (w.gpu ? (w.sim_gpus ? "_simgpu" : "_cuda") : "_cpu");
}

class Optim : public testing::TestWithParam<Where> {
 protected:
  void SetUp() override {
    if (GetParam().gpu && GetParam().sim_gpus == 0 && Device::gpu_count() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
  }
  Device device() const { return GetParam().gpu ? Device::gpu(0) : Device::cpu(); }
  NDArray array(const std::vector<float>& v) { return nd::array(v, {kN}, device()); }
  NDArray zeros() { return nd::zeros({kN}, device()); }

  // The weight after kSteps updates by `update(w, g)` matches `expect` (double reference).
  template <class Update>
  void check(const Vec& expect, Update update) {
    NDArray w = array(start_weight());
    for (int s = 0; s < kSteps; ++s) update(w, array(grad_at(s)), s + 1);
    const std::vector<float> got = w.to_vector();
    for (std::size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(got[i], expect[i], 2e-5 * (1.0 + std::abs(expect[i]))) << "element " << i;
    }
  }

  std::unique_ptr<Engine> e_ = Engine::create(
      GetParam().kind, {.cpu_threads = GetParam().threads, .sim_gpus = GetParam().sim_gpus});
  EngineScope scope_{*e_};
};

Vec as_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

TEST_P(Optim, SgdWithWeightDecayRescaleAndClip) {
  const nd::SgdOptions p{.lr = 0.05f, .wd = 0.01f, .rescale_grad = 0.5f, .clip_gradient = 1.0f};
  Vec w = as_double(start_weight());
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g = grad_at(s);
    for (std::size_t i = 0; i < kN; ++i) {
      w[i] = (1 - 0.05 * 0.01) * w[i] - 0.05 * clip(0.5 * g[i], 1.0);
    }
  }
  check(w, [&](NDArray& a, const NDArray& g, int) { nd::sgd_update(a, g, p); });
}

TEST_P(Optim, SgdMomentum) {
  const nd::SgdOptions p{.lr = 0.1f, .momentum = 0.9f, .wd = 0.001f, .rescale_grad = 0.25f};
  Vec w = as_double(start_weight()), mom(kN, 0.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g = grad_at(s);
    for (std::size_t i = 0; i < kN; ++i) {
      mom[i] = 0.9 * mom[i] - 0.1 * 0.001 * w[i] - 0.1 * (0.25 * g[i]);
      w[i] += mom[i];
    }
  }
  NDArray m = zeros();
  check(w, [&](NDArray& a, const NDArray& g, int) { nd::sgd_mom_update(a, g, m, p); });
}

// Gluon's Adam: lr_t = lr · sqrt(1 - beta2^t) / (1 - beta1^t), given to adam_update.
TEST_P(Optim, AdamWithBiasCorrectionThroughTheLearningRate) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.002;
  Vec w = as_double(start_weight()), mean(kN, 0.0), var(kN, 0.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g = grad_at(s);
    const int t = s + 1;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < kN; ++i) {
      const double gr = clip(0.5 * g[i] + wd * w[i], 2.0);
      mean[i] = b1 * mean[i] + (1 - b1) * gr;
      var[i] = b2 * var[i] + (1 - b2) * gr * gr;
      w[i] -= lr_t * mean[i] / (std::sqrt(var[i]) + eps);
    }
  }
  NDArray m = zeros(), v = zeros();
  check(w, [&](NDArray& a, const NDArray& g, int t) {
    const float lr_t = static_cast<float>(lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)));
    nd::adam_update(a, g, m, v,
                    {.lr = lr_t, .wd = 0.002f, .rescale_grad = 0.5f, .clip_gradient = 2.0f});
  });
}

TEST_P(Optim, AdaDelta) {
  const double rho = 0.9, eps = 1e-5, wd = 0.01;
  Vec w = as_double(start_weight()), acc_g(kN, 0.0), acc_d(kN, 0.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g = grad_at(s);
    for (std::size_t i = 0; i < kN; ++i) {
      const double gr = 0.5 * g[i];
      acc_g[i] = rho * acc_g[i] + (1 - rho) * gr * gr;
      const double d = std::sqrt(acc_d[i] + eps) / std::sqrt(acc_g[i] + eps) * gr;
      acc_d[i] = rho * acc_d[i] + (1 - rho) * d * d;
      w[i] -= d + wd * w[i];
    }
  }
  NDArray a_g = zeros(), a_d = zeros();
  check(w, [&](NDArray& a, const NDArray& g, int) {
    nd::adadelta_update(a, g, a_g, a_d, {.rho = 0.9f, .epsilon = 1e-5f, .wd = 0.01f, .rescale_grad = 0.5f});
  });
}

TEST_P(Optim, RmsProp) {
  const double lr = 0.01, g1 = 0.9, eps = 1e-8;
  Vec w = as_double(start_weight()), n(kN, 0.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g = grad_at(s);
    for (std::size_t i = 0; i < kN; ++i) {
      const double gr = 0.5 * g[i];
      n[i] = (1 - g1) * gr * gr + g1 * n[i];
      w[i] = clip(w[i] - lr * gr / std::sqrt(n[i] + eps), 0.45);
    }
  }
  NDArray state = zeros();
  check(w, [&](NDArray& a, const NDArray& g, int) {
    nd::rmsprop_update(a, g, state, {.lr = 0.01f, .rescale_grad = 0.5f, .clip_weights = 0.45f});
  });
}

TEST_P(Optim, CenteredRmsProp) {
  const double lr = 0.01, g1 = 0.95, g2 = 0.9, eps = 1e-8, wd = 0.001;
  Vec w = as_double(start_weight()), n(kN, 0.0), m(kN, 0.0), delta(kN, 0.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g = grad_at(s);
    for (std::size_t i = 0; i < kN; ++i) {
      const double gr = g[i] + wd * w[i];
      n[i] = (1 - g1) * gr * gr + g1 * n[i];
      m[i] = (1 - g1) * gr + g1 * m[i];
      delta[i] = g2 * delta[i] - lr * gr / std::sqrt(n[i] - m[i] * m[i] + eps);
      w[i] += delta[i];
    }
  }
  NDArray sn = zeros(), sg = zeros(), sd = zeros();
  check(w, [&](NDArray& a, const NDArray& g, int) {
    nd::rmspropalex_update(a, g, sn, sg, sd,
                           {.lr = 0.01f, .gamma1 = 0.95f, .wd = 0.001f, .centered = true});
  });
}

// Every engine and device gives the same bits as the naive engine on the CPU.
TEST_P(Optim, SameBitsAsTheNaiveCpuEngine) {
  if (GetParam().gpu && GetParam().sim_gpus == 0) GTEST_SKIP() << "CUDA agrees to rounding only";
  auto run = [&](Device d) {
    NDArray w = nd::array(start_weight(), {kN}, d), m = nd::zeros({kN}, d), v = nd::zeros({kN}, d);
    for (int s = 0; s < kSteps; ++s) {
      nd::adam_update(w, nd::array(grad_at(s), {kN}, d), m, v, {.lr = 0.01f, .wd = 0.01f});
    }
    return w.to_vector();
  };
  const std::vector<float> here = run(device());
  auto naive = Engine::create("naive");
  EngineScope use(*naive);
  EXPECT_EQ(here, run(Device::cpu()));
}

// NaNs and infinities too: zero_grad must not be grad *= 0.
TEST_P(Optim, ResetArraysZeroesEveryArray) {
  NDArray a = array(std::vector<float>(kN, NAN)), b = nd::full({3, 2}, INFINITY, device());
  NDArray c = nd::ones({4}), untouched = nd::ones({4}, device());
  nd::reset_arrays({a, b, c});
  EXPECT_EQ(a.to_vector(), std::vector<float>(kN, 0.0f));
  EXPECT_EQ(b.to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(c.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(untouched.to_vector(), std::vector<float>(4, 1.0f));
  nd::reset_arrays({});
}

INSTANTIATE_TEST_SUITE_P(Engines, Optim,
                         testing::Values(Where{"naive", 1, false, 0}, Where{"threaded", 1, false, 0},
                                         Where{"threaded", 4, false, 0},
                                         Where{"threaded", 2, true, 1},
                                         Where{"threaded", 2, true, 0}));

class OptimErrors : public testing::Test {
 protected:
  std::unique_ptr<Engine> e_ = Engine::create("naive");
  EngineScope scope_{*e_};
};

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no Error; expected one containing: " << part;
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(part), std::string::npos) << err.what();
  }
}

TEST_F(OptimErrors, ShapesStorageAndHyperparameters) {
  NDArray w = nd::zeros({3, 4}), g = nd::zeros({3, 4}), m = nd::zeros({3, 4}), bad = nd::zeros({4, 3});
  expect_error([&] { nd::sgd_update(w, bad, {}); },
               "sgd_update: the gradient's shape (4, 3) differs from the weight's (3, 4)");
  expect_error([&] { nd::sgd_mom_update(w, g, bad, {.momentum = 0.9f}); },
               "momentum state's shape (4, 3)");
  expect_error([&] { nd::sgd_mom_update(w, g, w, {.momentum = 0.9f}); },
               "the momentum state shares its storage with the weight");
  expect_error([&] { nd::adam_update(w, g, m, m, {}); }, "the var shares its storage with the mean");
  NDArray view = w.reshape({3, 4});
  expect_error([&] { nd::sgd_update(w, view, {}); }, "the gradient shares its storage with the weight");
  expect_error([&] { nd::adam_update(w, g, view, m, {}); }, "the mean shares its storage with the weight");
  expect_error([&] { nd::sgd_update(w, g, {.momentum = 0.5f}); }, "needs its state (sgd_mom_update)");
  expect_error([&] { nd::sgd_update(w, g, {.lr = NAN}); }, "sgd_update: lr must be finite");
  expect_error([&] { nd::sgd_update(w, g, {.lr = -1.0f}); }, "sgd_update: lr must be >= 0");
  NDArray v = nd::zeros({3, 4});
  expect_error([&] { nd::adam_update(w, g, m, v, {.beta1 = 1.5f}); }, "beta1 must be in [0, 1]");
  expect_error([&] { nd::rmsprop_update(w, g, m, {.centered = true}); }, "rmspropalex_update");
  NDArray null_state;
  expect_error([&] { nd::adadelta_update(w, g, m, null_state, {}); }, "adadelta_update: the array is null");
  auto other = Engine::create("naive");
  NDArray elsewhere;
  {
    EngineScope use(*other);
    elsewhere = nd::zeros({3, 4});
  }
  expect_error([&] { nd::sgd_update(w, elsewhere, {}); }, "another engine");
}

// Nothing was pushed by a refused call: the weight keeps its value.
TEST_F(OptimErrors, ARefusedUpdateWritesNothing) {
  NDArray w = nd::ones({5}), g = nd::ones({5});
  EXPECT_THROW(nd::sgd_update(w, g, {.lr = INFINITY}), Error);
  EXPECT_EQ(w.to_vector(), std::vector<float>(5, 1.0f));
}

}  // namespace
}  // namespace depengine
