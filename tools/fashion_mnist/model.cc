// The models as Gluon blocks: Dense layers (weight (units, in_units)) and softmax
// cross-entropy, differentiated by autograd.
#include "fashion_mnist/model.h"

#include <cmath>

#include "depengine/autograd.h"
#include "depengine/nn.h"

namespace depengine::fashion_mnist {
namespace {

std::shared_ptr<gluon::Sequential> make_net(const ModelConfig& c) {
  if (c.inputs == 0 || c.classes == 0 || (c.kind == ModelKind::mlp && c.hidden == 0)) {
    throw Error("Model: inputs, classes and the hidden width must be positive");
  }
  auto normal = [](float sigma) { return std::make_shared<const gluon::Initializer>(gluon::init::Normal(sigma)); };
  auto net = std::make_shared<gluon::Sequential>();
  std::size_t in = c.inputs;
  if (c.kind == ModelKind::mlp) {
    const float he = std::sqrt(2.0f / static_cast<float>(in));
    net->add(gluon::Dense(c.hidden, "relu", true, in, normal(he)));
    in = c.hidden;
  }
  net->add(gluon::Dense(c.classes, "", true, in, normal(0.01f)));
  return net;
}

}  // namespace

const char* model_kind_name(ModelKind kind) noexcept {
  return kind == ModelKind::softmax ? "softmax" : "mlp";
}

ModelKind parse_model_kind(const std::string& name) {
  if (name == "softmax") return ModelKind::softmax;
  if (name == "mlp") return ModelKind::mlp;
  throw Error("unknown model '" + name + "' (expected softmax or mlp)");
}

Model::Model(ModelConfig config, std::uint64_t seed)
    : config_(config),
      net_(make_net(config_)),
      trainer_(net_->collect_params(), "sgd") {
  nd::seed(seed);
  net_->initialize();
  for (const auto& [name, p] : net_->collect_params()) params_.push_back(p->data());
}

NDArray Model::forward(const NDArray& x) const { return net_->forward(x); }

std::pair<NDArray, NDArray> Model::record_forward(const NDArray& x, const NDArray& y) {
  autograd::RecordScope record;
  NDArray z = net_->forward(x);
  NDArray l = loss_(z, y);
  return {std::move(z), std::move(l)};
}

std::vector<NDArray> Model::gradients(const NDArray& x, const NDArray& y, NDArray* loss,
                                     NDArray* logits) {
  const auto [z, l] = record_forward(x, y);
  // The mean's gradient: the sum's, scaled by 1 / batch.
  const NDArray mean = nd::mean(l);
  l.backward();
  if (loss) *loss = mean;
  if (logits) *logits = z;
  const float scale = 1.0f / static_cast<float>(x.shape()[0]);
  std::vector<NDArray> grads;
  for (const auto& [name, p] : net_->collect_params()) grads.push_back(p->grad() * scale);
  return grads;
}

Model::Step Model::train_step(const NDArray& x, const NDArray& y, float lr) {
  const auto [z, l] = record_forward(x, y);
  l.backward();
  Step step{nd::mean(l), nd::count_correct(z, y)};
  trainer_.set_learning_rate(lr);
  trainer_.step(x.shape()[0]);
  return step;
}

}  // namespace depengine::fashion_mnist
