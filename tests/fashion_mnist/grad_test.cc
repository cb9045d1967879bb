// Each backward op of depengine/nn.h against central finite differences of the forward
// computation it differentiates, plus autograd's gradients of the softmax-regression and MLP
// models (tools/fashion_mnist/model.h, Gluon layers) against finite differences of their loss. Shapes are
// small; everything runs on the naive engine, so the host may edit a parameter between ops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "depengine/nn.h"
#include "fashion_mnist/model.h"

namespace depengine {
namespace {

constexpr float kEps = 5e-3f;

std::vector<float> random_values(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// |a - b| within an absolute floor plus a relative share: float losses differenced over
// kEps lose about 1e-4 to rounding.
void expect_close(float analytic, double numeric, const std::string& where) {
  EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << where;
}

class GradTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> engine_ = Engine::create("naive");
  EngineScope scope_{*engine_};
};

TEST_F(GradTest, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  const std::size_t m = 4, n = 5;
  std::vector<float> z = random_values(m * n, 1, -3.0f, 3.0f);
  const std::vector<float> labels = {0, 4, 2, 2};
  const NDArray y = nd::array(labels, {m});
  const nd::SoftmaxCrossEntropy sce = nd::softmax_cross_entropy(nd::array(z, {m, n}), y);
  const std::vector<float> grad = sce.grad.to_vector();
  auto loss_at = [&](const std::vector<float>& zz) {
    return static_cast<double>(nd::softmax_cross_entropy(nd::array(zz, {m, n}), y).loss.item());
  };
  double expected_loss = 0;
  for (std::size_t r = 0; r < m; ++r) {
    double denom = 0;
    for (std::size_t j = 0; j < n; ++j) denom += std::exp(static_cast<double>(z[r * n + j]));
    expected_loss += std::log(denom) - z[r * n + static_cast<std::size_t>(labels[r])];
  }
  EXPECT_NEAR(sce.loss.item(), expected_loss / m, 1e-5);
  for (std::size_t i = 0; i < z.size(); ++i) {
    std::vector<float> up = z, down = z;
    up[i] += kEps;
    down[i] -= kEps;
    expect_close(grad[i], (loss_at(up) - loss_at(down)) / (2 * kEps), "logit " + std::to_string(i));
  }
}

TEST_F(GradTest, SoftmaxCrossEntropyIsStableForLargeLogits) {
  const NDArray z = nd::array(std::vector<float>{1000.0f, 0.0f, -1000.0f}, {1, 3});
  const nd::SoftmaxCrossEntropy sce =
      nd::softmax_cross_entropy(z, nd::array(std::vector<float>{1}, {1}));
  EXPECT_FLOAT_EQ(sce.loss.item(), 1000.0f);
  const std::vector<float> g = sce.grad.to_vector();
  EXPECT_FLOAT_EQ(g[0], 1.0f);
  EXPECT_FLOAT_EQ(g[1], -1.0f);
  EXPECT_FLOAT_EQ(g[2], 0.0f);
}

TEST_F(GradTest, SoftmaxCrossEntropyRejectsBadLabelsAndShapes) {
  const NDArray z = nd::zeros({2, 3});
  const nd::SoftmaxCrossEntropy sce =
      nd::softmax_cross_entropy(z, nd::array(std::vector<float>{1, 3}, {2}));
  EXPECT_THROW(
      {
        try {
          sce.loss.item();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("label 3 of row 1 is not a class index"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(nd::softmax_cross_entropy(z, nd::zeros({3})), Error);
  EXPECT_THROW(nd::softmax_cross_entropy(nd::zeros({6}), nd::zeros({6})), Error);
  EXPECT_THROW(nd::count_correct(z, nd::zeros({2, 1})), Error);
}

TEST_F(GradTest, ReluBackwardMatchesFiniteDifferences) {
  const std::size_t n = 40;
  std::vector<float> x = random_values(n, 2);
  for (float& v : x) v += v >= 0 ? 0.05f : -0.05f;  // keep clear of the kink
  const std::vector<float> g = random_values(n, 3);
  const NDArray dx = nd::relu_backward(nd::relu(nd::array(x, {n})), nd::array(g, {n}));
  const std::vector<float> analytic = dx.to_vector();
  auto loss_at = [&](const std::vector<float>& xx) {
    return static_cast<double>(nd::sum(nd::relu(nd::array(xx, {n})) * nd::array(g, {n})).item());
  };
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<float> up = x, down = x;
    up[i] += kEps;
    down[i] -= kEps;
    expect_close(analytic[i], (loss_at(up) - loss_at(down)) / (2 * kEps), "x " + std::to_string(i));
  }
  EXPECT_THROW(nd::relu_backward(nd::zeros({3}), nd::zeros({4})), Error);
}

TEST_F(GradTest, GemmTransposesMatchTheReference) {
  const std::size_t m = 7, k = 5, n = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> a = random_values(m * k, 4), b = random_values(k * n, 5);
      const NDArray na = nd::array(a, ta ? Shape{k, m} : Shape{m, k});
      const NDArray nb = nd::array(b, tb ? Shape{n, k} : Shape{k, n});
      const NDArray c = nd::gemm(na, nb, ta, tb);
      ASSERT_EQ(c.shape(), (Shape{m, n}));
      const std::vector<float> got = c.to_vector();
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          double ref = 0;
          for (std::size_t p = 0; p < k; ++p) {
            ref += static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) *
                   (tb ? b[j * k + p] : b[p * n + j]);
          }
          EXPECT_NEAR(got[i * n + j], ref, 1e-5) << "ta=" << ta << " tb=" << tb;
        }
      }
    }
  }
  EXPECT_THROW(nd::gemm(nd::zeros({2, 3}), nd::zeros({2, 3}), false, false), Error);
  EXPECT_EQ(nd::gemm(nd::zeros({2, 3}), nd::zeros({2, 3}), true, false).shape(), (Shape{3, 3}));
  EXPECT_THROW(nd::gemm(nd::zeros({3}), nd::zeros({3, 1}), false, false), Error);
}

// The fused layer is the unfused ops, bit for bit, on shapes large enough to be tiled.
TEST_F(GradTest, LinearIsDotPlusBiasThenReluFused) {
  const NDArray x = nd::random_normal({300, 200}), w = nd::random_normal({200, 260});
  const NDArray b = nd::random_normal({260});
  EXPECT_EQ(nd::linear(x, w, b).to_vector(), (nd::dot(x, w) + b).to_vector());
  EXPECT_EQ(nd::linear(x, w, b, true).to_vector(), nd::relu(nd::dot(x, w) + b).to_vector());
  EXPECT_THROW(nd::linear(x, w, nd::zeros({200})), Error);
  EXPECT_THROW(nd::linear(x, nd::zeros({100, 260}), b), Error);
}

// L = sum(G ∘ (X·W)): dL/dW = Xᵀ·G and dL/dX = G·Wᵀ, the two transposed GEMMs of a
// linear layer's backward pass.
TEST_F(GradTest, LinearLayerBackwardMatchesFiniteDifferences) {
  const std::size_t m = 3, k = 4, n = 2;
  std::vector<float> x = random_values(m * k, 6), w = random_values(k * n, 7);
  const NDArray g = nd::array(random_values(m * n, 8), {m, n});
  auto loss_at = [&](const std::vector<float>& xx, const std::vector<float>& ww) {
    return static_cast<double>(
        nd::sum(nd::dot(nd::array(xx, {m, k}), nd::array(ww, {k, n})) * g).item());
  };
  const std::vector<float> dw = nd::gemm(nd::array(x, {m, k}), g, true, false).to_vector();
  const std::vector<float> dx = nd::gemm(g, nd::array(w, {k, n}), false, true).to_vector();
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::vector<float> up = w, down = w;
    up[i] += kEps;
    down[i] -= kEps;
    expect_close(dw[i], (loss_at(x, up) - loss_at(x, down)) / (2 * kEps), "w " + std::to_string(i));
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::vector<float> up = x, down = x;
    up[i] += kEps;
    down[i] -= kEps;
    expect_close(dx[i], (loss_at(up, w) - loss_at(down, w)) / (2 * kEps), "x " + std::to_string(i));
  }
}

TEST_F(GradTest, SgdUpdateIsOneFusedStep) {
  const std::vector<float> w0 = random_values(100, 9), g = random_values(100, 10);
  NDArray w = nd::array(w0, {10, 10});
  nd::sgd_update(w, nd::array(g, {10, 10}), 0.5f, 0.1f);
  const std::vector<float> got = w.to_vector();
  for (std::size_t i = 0; i < w0.size(); ++i) {
    EXPECT_EQ(got[i], w0[i] - 0.5f * (g[i] + 0.1f * w0[i]));
  }
  EXPECT_THROW(nd::sgd_update(w, nd::zeros({100}), 0.1f), Error);
}

TEST_F(GradTest, CountCorrectTakesTheFirstMaximum) {
  const NDArray z = nd::array(std::vector<float>{1, 3, 3, 0, 0, -1, 2, 2, 2}, {3, 3});
  EXPECT_EQ(nd::count_correct(z, nd::array(std::vector<float>{1, 0, 0}, {3})).item(), 3.0f);
  EXPECT_EQ(nd::count_correct(z, nd::array(std::vector<float>{2, 1, 2}, {3})).item(), 0.0f);
}

TEST_F(GradTest, MetricTotalsAccumulateInPlace) {
  const NDArray z = nd::array(std::vector<float>{1, 3, 3, 0, 0, -1, 2, 2, 2}, {3, 3});
  NDArray correct = nd::zeros({1});
  nd::add_count_correct(correct, z, nd::array(std::vector<float>{1, 0, 0}, {3}));
  nd::add_count_correct(correct, z, nd::array(std::vector<float>{1, 1, 2}, {3}));
  EXPECT_EQ(correct.item(), 4.0f);
  NDArray total = nd::full({}, 0.5f);
  nd::add_sum(total, z);
  nd::add_sum(total, nd::array(std::vector<float>{0.25f, 0.25f}, {2}));
  EXPECT_EQ(total.item(), 0.5f + 12.0f + 0.5f);
  // A total read as its own input: one op reads and writes the var (1 + 1).
  NDArray self = nd::ones({1});
  nd::add_sum(self, self);
  EXPECT_EQ(self.item(), 2.0f);
  NDArray nine = z;
  EXPECT_THROW(nd::add_sum(nine, z), Error);  // a total of 9 elements
  EXPECT_THROW(nd::add_count_correct(correct, z, nd::zeros({2})), Error);
  EXPECT_EQ(correct.item(), 4.0f);  // nothing pushed by the refused calls
}

// Which hidden units of the MLP are active for each example: a central difference is only
// valid when both perturbed points have the same pattern (no ReLU kink between them).
std::vector<bool> relu_pattern(const fashion_mnist::Model& model, const NDArray& x) {
  std::vector<bool> on;
  if (model.config().kind != fashion_mnist::ModelKind::mlp) return on;
  for (float v : (nd::gemm(x, model.parameters()[0], false, true) + model.parameters()[1]).to_vector()) {
    on.push_back(v > 0.0f);
  }
  return on;
}

TEST(NnDevices, GpuArraysAreRejectedAtTheCall) {
  auto engine = Engine::create("naive", {.sim_gpus = 1});
  EngineScope use(*engine);
  const NDArray g = nd::zeros({2, 2}, Device::gpu(0)), c = nd::zeros({2, 2});
  try {
    nd::gemm(c, g, false, false);
    ADD_FAILURE() << "gemm accepted an array on gpu(0)";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm: the array is on gpu(0)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nd::relu_backward(g, c), Error);
  NDArray w = g;
  EXPECT_THROW(nd::sgd_update(w, c, 0.1f), Error);
}

// The model's gradients of every parameter against finite differences of its batch loss.
void check_model(fashion_mnist::ModelKind kind) {
  const std::size_t batch = 5, inputs = 6;
  fashion_mnist::Model model({.kind = kind, .inputs = inputs, .hidden = 7, .classes = 4}, 11);
  // Larger than the default init, so every layer's gradient is well above rounding.
  for (const NDArray& p : model.parameters()) {
    NDArray q = p;
    q += nd::random_normal(p.shape(), 0.0f, 0.5f);
  }
  const NDArray x = nd::array(random_values(batch * inputs, 12), {batch, inputs});
  const NDArray y = nd::array(std::vector<float>{0, 3, 1, 1, 2}, {batch});
  NDArray loss;
  const std::vector<NDArray> grads = model.gradients(x, y, &loss);
  ASSERT_EQ(grads.size(), model.parameters().size());
  std::size_t checked = 0, total = 0;
  for (std::size_t p = 0; p < grads.size(); ++p) {
    const NDArray& param = model.parameters()[p];
    ASSERT_EQ(grads[p].shape(), param.shape());
    const std::vector<float> analytic = grads[p].to_vector();
    for (std::size_t i = 0; i < param.size(); ++i) {
      waitall();  // the naive engine has run everything; the host may edit the parameter
      const float saved = param.data()[i];
      param.data()[i] = saved + kEps;
      NDArray up, down;
      model.gradients(x, y, &up);
      const double lu = up.item();
      const std::vector<bool> pattern_up = relu_pattern(model, x);
      param.data()[i] = saved - kEps;
      model.gradients(x, y, &down);
      const double ld = down.item();
      const std::vector<bool> pattern_down = relu_pattern(model, x);
      param.data()[i] = saved;
      ++total;
      if (pattern_up != pattern_down) continue;
      ++checked;
      expect_close(analytic[i], (lu - ld) / (2 * kEps),
                   "parameter " + std::to_string(p) + " element " + std::to_string(i));
    }
  }
  // Kinks may hide a few elements, never most of them.
  EXPECT_GE(checked * 10, total * 8) << checked << " of " << total << " elements checked";
}

TEST_F(GradTest, SoftmaxRegressionBackwardMatchesFiniteDifferences) {
  check_model(fashion_mnist::ModelKind::softmax);
}

TEST_F(GradTest, MlpBackwardMatchesFiniteDifferences) {
  check_model(fashion_mnist::ModelKind::mlp);
}

}  // namespace
}  // namespace depengine
