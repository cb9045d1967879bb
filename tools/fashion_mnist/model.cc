// The forward and backward passes, op by op. Backward of a linear layer z = x·W + b:
// dW = xᵀ·dz and db = column sums of dz (gemm with a transpose, sum over axis 0), and
// dx = dz·Wᵀ; through h = relu(z1): dz1 = relu_backward(h, dh).
#include "fashion_mnist/model.h"

#include <cmath>

#include "depengine/nn.h"

namespace depengine::fashion_mnist {

const char* model_kind_name(ModelKind kind) noexcept {
  return kind == ModelKind::softmax ? "softmax" : "mlp";
}

ModelKind parse_model_kind(const std::string& name) {
  if (name == "softmax") return ModelKind::softmax;
  if (name == "mlp") return ModelKind::mlp;
  throw Error("unknown model '" + name + "' (expected softmax or mlp)");
}

Model::Model(ModelConfig config, std::uint64_t seed) : config_(config) {
  if (config_.inputs == 0 || config_.classes == 0 ||
      (config_.kind == ModelKind::mlp && config_.hidden == 0)) {
    throw Error("Model: inputs, classes and the hidden width must be positive");
  }
  nd::seed(seed);
  const std::size_t in = config_.inputs, out = config_.classes;
  if (config_.kind == ModelKind::softmax) {
    params_ = {nd::random_normal({in, out}, 0.0f, 0.01f), nd::zeros({out})};
    return;
  }
  const std::size_t h = config_.hidden;
  const float he = std::sqrt(2.0f / static_cast<float>(in));
  params_ = {nd::random_normal({in, h}, 0.0f, he), nd::zeros({h}),
             nd::random_normal({h, out}, 0.0f, 0.01f), nd::zeros({out})};
}

NDArray Model::forward(const NDArray& x) const {
  if (config_.kind == ModelKind::softmax) return nd::linear(x, params_[0], params_[1]);
  const NDArray h = nd::linear(x, params_[0], params_[1], true);
  return nd::linear(h, params_[2], params_[3]);
}

std::vector<NDArray> Model::gradients(const NDArray& x, const NDArray& y, NDArray* loss,
                                     NDArray* logits) {
  if (config_.kind == ModelKind::softmax) {
    const NDArray z = nd::linear(x, params_[0], params_[1]);
    nd::SoftmaxCrossEntropy sce = nd::softmax_cross_entropy(z, y);
    if (loss) *loss = sce.loss;
    if (logits) *logits = z;
    return {nd::gemm(x, sce.grad, true, false), nd::sum(sce.grad, 0)};
  }
  const NDArray h = nd::linear(x, params_[0], params_[1], true);
  const NDArray z = nd::linear(h, params_[2], params_[3]);
  nd::SoftmaxCrossEntropy sce = nd::softmax_cross_entropy(z, y);
  if (loss) *loss = sce.loss;
  if (logits) *logits = z;
  NDArray dw2 = nd::gemm(h, sce.grad, true, false);
  NDArray db2 = nd::sum(sce.grad, 0);
  // Reads W2 before train_step's update: the engine orders the update after this read.
  const NDArray dz1 = nd::relu_backward(h, nd::gemm(sce.grad, params_[2], false, true));
  return {nd::gemm(x, dz1, true, false), nd::sum(dz1, 0), std::move(dw2), std::move(db2)};
}

Model::Step Model::train_step(const NDArray& x, const NDArray& y, float lr) {
  Step step;
  NDArray z;
  const std::vector<NDArray> grads = gradients(x, y, &step.loss, &z);
  step.correct = nd::count_correct(z, y);
  for (std::size_t i = 0; i < params_.size(); ++i) nd::sgd_update(params_[i], grads[i], lr);
  return step;
}

}  // namespace depengine::fashion_mnist
