// The fused layer ops of depengine/layer_ops.h: values against the composed ops, gradients
// against central differences (in double), the label check at the blocker, shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/layer_ops.h"
#include "depengine/ndarray.h"
#include "depengine/observer.h"

namespace depengine {
namespace {

std::vector<float> values(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& x : v) x = d(g);
  return v;
}

class LayerOps : public testing::Test {
 protected:
  std::unique_ptr<Engine> e_ = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope scope_{*e_};
};

using Fn = std::function<NDArray(const std::vector<NDArray>&)>;

// sum(f(x)·w) for fixed weights w.
double objective(const Fn& f, const std::vector<NDArray>& in, const std::vector<float>& w) {
  const std::vector<float> y = f(in).to_vector();
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

// Autograd's gradient of every input in `diff` against central differences.
void check_gradient(const Fn& f, const std::vector<std::vector<float>>& data,
                    const std::vector<Shape>& shapes, const std::vector<bool>& diff) {
  std::vector<NDArray> in;
  for (std::size_t i = 0; i < data.size(); ++i) {
    in.push_back(nd::array(data[i], shapes[i]));
    if (diff[i]) in.back().attach_grad();
  }
  NDArray head;
  {
    autograd::RecordScope record;
    head = f(in);
  }
  const std::vector<float> w = values(head.size(), 3);
  head.backward(nd::array(w, head.shape()));
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (!diff[i]) continue;
    const std::vector<float> g = in[i].grad().to_vector();
    for (std::size_t j = 0; j < data[i].size(); ++j) {
      auto at = [&](float delta) {
        std::vector<NDArray> moved;
        for (std::size_t k = 0; k < data.size(); ++k) {
          std::vector<float> v = data[k];
          if (k == i) v[j] += delta;
          moved.push_back(nd::array(v, shapes[k]));
        }
        return objective(f, moved, w);
      };
      const double numeric = (at(1e-2f) - at(-1e-2f)) / 2e-2;
      EXPECT_NEAR(g[j], numeric, 2e-2 * (1.0 + std::fabs(numeric))) << "input " << i << " element " << j;
    }
  }
}

TEST_F(LayerOps, FullyConnectedEqualsTheComposedOps) {
  NDArray x = nd::array(values(12, 1), {4, 3}), w = nd::array(values(15, 2), {5, 3});
  NDArray b = nd::array(values(5, 4), {5});
  const std::vector<float> want = nd::relu(nd::dot(x, w.T()) + b).to_vector();
  const std::vector<float> got = nd::fully_connected(x, w, b, true).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f);
  const std::vector<float> plain = nd::fully_connected(x, w, NDArray(), false).to_vector();
  const std::vector<float> dot = nd::dot(x, w.T()).to_vector();
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(plain[i], dot[i], 1e-6f);
}

TEST_F(LayerOps, FullyConnectedGradients) {
  const std::vector<std::vector<float>> data{values(12, 1), values(15, 2), values(5, 4)};
  const std::vector<Shape> shapes{{4, 3}, {5, 3}, {5}};
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "relu" : "linear");
    check_gradient([relu](auto& in) { return nd::fully_connected(in[0], in[1], in[2], relu); },
                   data, shapes, {true, true, true});
  }
  check_gradient([](auto& in) { return nd::fully_connected(in[0], in[1], NDArray()); },
                 {data[0], data[1]}, {shapes[0], shapes[1]}, {true, true});
}

// Counts the pushed ops named `name_`.
class CountOps final : public Observer {
 public:
  explicit CountOps(std::string name) : name_(std::move(name)) {}
  void on_push(const OpInfo& op) override {
    std::lock_guard lock(mutex_);
    if (op.name == name_) ++count_;
  }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {}
  void on_end(std::uint64_t, bool, bool) override {}
  int count() {
    std::lock_guard lock(mutex_);
    return count_;
  }

 private:
  std::string name_;
  std::mutex mutex_;
  int count_ = 0;
};

std::vector<float> bits_of(const NDArray& a) { return a.to_vector(); }

TEST_F(LayerOps, BackwardWritesWeightAndBiasGradientsIntoTheirBuffers) {
  // Two layers, every parameter grad_req 'write': backward pushes no copy_into (each
  // gradient is computed into its buffer), and the gradients are the bits autograd::grad
  // computes into new arrays.
  NDArray x = nd::array(values(12, 1), {4, 3});
  NDArray w1 = nd::array(values(15, 2), {5, 3}), b1 = nd::array(values(5, 4), {5});
  NDArray w2 = nd::array(values(10, 5), {2, 5}), b2 = nd::array(values(2, 6), {2});
  std::vector<NDArray*> params{&w1, &b1, &w2, &b2};
  for (NDArray* p : params) p->attach_grad();
  auto count = std::make_shared<CountOps>("copy_into");
  e_->set_observer(count);
  NDArray head;
  {
    autograd::RecordScope record;
    head = nd::sum(nd::fully_connected(nd::fully_connected(x, w1, b1, true), w2, b2, false));
  }
  const std::vector<NDArray> want = autograd::grad({head}, {w1, b1, w2, b2}, {}, true);
  head.backward();
  e_->wait_all();
  e_->set_observer(nullptr);
  EXPECT_EQ(count->count(), 0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(bits_of(params[i]->grad()), bits_of(want[i]));
  }
}

// The var accesses of every pushed op named `name_`.
class OpAccesses final : public Observer {
 public:
  explicit OpAccesses(std::string name) : name_(std::move(name)) {}
  void on_push(const OpInfo& op) override {
    std::lock_guard lock(mutex_);
    if (op.name == name_) ops_.emplace_back(op.accesses.begin(), op.accesses.end());
  }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {}
  void on_end(std::uint64_t, bool, bool) override {}
  std::vector<std::vector<VarAccess>> ops() {
    std::lock_guard lock(mutex_);
    return ops_;
  }

 private:
  std::string name_;
  std::mutex mutex_;
  std::vector<std::vector<VarAccess>> ops_;
};

TEST_F(LayerOps, ReluBackwardReusesAGradientNoOneElseHolds) {
  // The hidden layer's output gradient comes from the next layer's backward and nothing else
  // holds it: relu_backward overwrites it (one var read-written) instead of allocating a
  // third array, with the same gradients as autograd::grad (which copies every gradient).
  NDArray x = nd::array(values(12, 1), {4, 3});
  NDArray w1 = nd::array(values(15, 2), {5, 3}), b1 = nd::array(values(5, 4), {5});
  NDArray w2 = nd::array(values(10, 5), {2, 5});
  std::vector<NDArray*> params{&w1, &b1, &w2};
  for (NDArray* p : params) p->attach_grad();
  NDArray head;
  {
    autograd::RecordScope record;
    head = nd::sum(nd::fully_connected(nd::fully_connected(x, w1, b1, true), w2, NDArray()));
  }
  const std::vector<NDArray> want = autograd::grad({head}, {w1, b1, w2}, {}, true);
  auto seen = std::make_shared<OpAccesses>("relu_backward");
  e_->set_observer(seen);
  head.backward();
  e_->wait_all();
  e_->set_observer(nullptr);
  const auto ops = seen->ops();
  ASSERT_EQ(ops.size(), 1u);
  ASSERT_EQ(ops[0].size(), 2u);
  EXPECT_EQ(std::count_if(ops[0].begin(), ops[0].end(),
                          [](const VarAccess& a) { return a.mode == AccessMode::read_write; }),
            1);
  for (std::size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(bits_of(params[i]->grad()), bits_of(want[i]));
  }
}

TEST_F(LayerOps, AGradientBufferReadByALaterGradientOpIsCopiedInAtTheEnd) {
  // w's gradient buffer is the input of a layer recorded before w is used: its gradient op
  // (pushed after w's) reads the buffer's value from before backward, so w's gradient must not
  // be written into it directly.
  NDArray x = nd::array(values(12, 1), {4, 3});
  NDArray w = nd::array(values(15, 2), {5, 3}), v = nd::array(values(6, 3), {2, 3});
  const std::vector<float> old_grad = values(15, 7);
  autograd::mark_variable(w, autograd::GradReq::write, nd::array(old_grad, {5, 3}));
  v.attach_grad();
  NDArray z, y;
  {
    autograd::RecordScope record;
    z = nd::fully_connected(w.grad(), v, NDArray());  // reads w's buffer; dv = dzᵀ · it
    y = nd::fully_connected(x, w, NDArray());
  }
  const std::vector<NDArray> want = autograd::grad({y, z}, {w, v}, {}, true);
  autograd::backward({y, z});
  EXPECT_EQ(bits_of(v.grad()), bits_of(want[1]));
  EXPECT_EQ(bits_of(w.grad()), bits_of(want[0]));
}

TEST_F(LayerOps, SoftmaxCrossEntropyValuesAndGradient) {
  const std::vector<float> z = values(12, 5);
  const std::vector<float> y{2, 0, 3};
  const std::vector<float> loss =
      nd::softmax_cross_entropy_rows(nd::array(z, {3, 4}), nd::array(y, {3})).to_vector();
  for (std::size_t r = 0; r < 3; ++r) {
    double denom = 0;
    for (std::size_t j = 0; j < 4; ++j) denom += std::exp(static_cast<double>(z[r * 4 + j]));
    EXPECT_NEAR(loss[r], std::log(denom) - z[r * 4 + static_cast<std::size_t>(y[r])], 1e-5);
  }
  for (bool from_logits : {false, true}) {
    check_gradient(
        [from_logits](auto& in) { return nd::softmax_cross_entropy_rows(in[0], in[1], from_logits); },
        {z, y}, {{3, 4}, {3}}, {true, false});
  }
}

TEST_F(LayerOps, ALabelOutOfRangeFailsAtTheBlocker) {
  NDArray l = nd::softmax_cross_entropy_rows(nd::zeros({3, 4}), nd::array({0.0f, 4.0f, 1.0f}, {3}));
  try {
    l.wait_to_read();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 4 of sample 1 is not a class index in [0, 4)"),
              std::string::npos) << e.what();
  }
}

TEST_F(LayerOps, ShapeErrorsNameTheShapes) {
  EXPECT_THROW(
      {
        try {
          nd::fully_connected(nd::zeros({4, 3}), nd::zeros({5, 2}), NDArray());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("input (4, 3), weight (5, 2)"), std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_THROW(nd::softmax_cross_entropy_rows(nd::zeros({3, 4}), nd::zeros({2})), Error);
  EXPECT_THROW(nd::fully_connected(nd::zeros({4, 3}), nd::zeros({5, 3}), nd::zeros({4})), Error);
}

}  // namespace
}  // namespace depengine
