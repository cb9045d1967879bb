// The models as Gluon blocks (Dense layers with weight (units, in_units), Conv2D, pooling,
// dropout) and softmax cross-entropy, differentiated by autograd.
#include "fashion_mnist/model.h"

#include <cmath>

#include "depengine/autograd.h"
#include "depengine/nn.h"

namespace depengine::fashion_mnist {
namespace {

std::shared_ptr<gluon::Sequential> build_net(const ModelConfig& c) {
  if (c.inputs == 0 || c.classes == 0 || (c.kind == ModelKind::mlp && c.hidden == 0)) {
    throw Error("Model: inputs, classes and the hidden width must be positive");
  }
  if (c.kind == ModelKind::cnn) {
    if (c.rows * c.cols != c.inputs || c.rows < 6 || c.cols < 6) {
      throw Error("Model: the CNN needs images of rows × cols = inputs, each side at least 6 (got " +
                  std::to_string(c.rows) + " × " + std::to_string(c.cols) + " for " +
                  std::to_string(c.inputs) + " inputs)");
    }
    auto net = std::make_shared<gluon::Sequential>();
    net->add(gluon::Conv2D(32, {3, 3}, {1, 1}, {0, 0}, "relu", true, 1))
        .add(gluon::Conv2D(64, {3, 3}, {1, 1}, {0, 0}, "relu", true, 32))
        .add(gluon::MaxPool2D({2, 2}))
        .add(gluon::Dropout(0.25f))
        .add(gluon::Flatten())
        .add(gluon::Dense(128, "relu", true, 64 * ((c.rows - 4) / 2) * ((c.cols - 4) / 2)))
        .add(gluon::Dropout(0.5f))
        .add(gluon::Dense(c.classes, "", true, 128));
    return net;
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

// The net with its parameters drawn from `seed`, before the trainer is made (so that it makes
// the optimizer states outside any recorded step).
std::shared_ptr<gluon::Sequential> make_net(const ModelConfig& c, std::uint64_t seed) {
  std::shared_ptr<gluon::Sequential> net = build_net(c);
  nd::seed(seed);
  net->initialize(gluon::init::Xavier());
  return net;
}

}  // namespace

const char* model_kind_name(ModelKind kind) noexcept {
  switch (kind) {
    case ModelKind::softmax:
      return "softmax";
    case ModelKind::mlp:
      return "mlp";
    case ModelKind::cnn:
      break;
  }
  return "cnn";
}

ModelKind parse_model_kind(const std::string& name) {
  if (name == "softmax") return ModelKind::softmax;
  if (name == "mlp") return ModelKind::mlp;
  if (name == "cnn") return ModelKind::cnn;
  throw Error("unknown model '" + name + "' (expected softmax, mlp or cnn)");
}

Model::Model(ModelConfig config, std::uint64_t seed)
    : config_(config),
      net_(make_net(config_, seed)),
      loss_(config_.kind == ModelKind::cnn),
      trainer_(net_->collect_params(), config_.optimizer) {
  for (const auto& [name, p] : net_->collect_params()) params_.push_back(p->data());
}

NDArray Model::shaped(const NDArray& x) const {
  if (config_.kind != ModelKind::cnn || x.ndim() != 2) return x;
  return x.reshape({x.shape()[0], 1, config_.rows, config_.cols});
}

NDArray Model::forward(const NDArray& x) const { return net_->forward(shaped(x)); }

std::pair<NDArray, NDArray> Model::record_forward(const NDArray& x, const NDArray& y) {
  autograd::RecordScope record;
  NDArray z = net_->forward(shaped(x));
  // The CNN's head as the second source's: log-softmax, then the negative log-likelihood.
  NDArray l = loss_(config_.kind == ModelKind::cnn ? nd::log_softmax(z) : z, y);
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
