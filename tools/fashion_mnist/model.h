// fashion_mnist/model.h — softmax regression, a one-hidden-layer ReLU MLP and the second
// source's CNN, written with the C++ Gluon layers (depengine/gluon.h): the forward pass is
// recorded by autograd and its backward pass pushed by it (depengine/autograd.h).
//
//   depengine::EngineScope use(*engine);
//   Model m({.kind = ModelKind::mlp, .inputs = 784, .hidden = 256, .classes = 10}, 42);
//   auto step = m.train_step(x, y, 0.1f);   // pushed; step.loss.item() blocks
//
// Every op is pushed to the engine of the current EngineScope with its reads and writes,
// so a training step returns at once and the same seed gives the same bits on every engine.
// A Model is used from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "depengine/gluon.h"
#include "depengine/ndarray.h"

namespace depengine::fashion_mnist {

enum class ModelKind { softmax, mlp, cnn };

// "softmax", "mlp" or "cnn"; parse_model_kind throws Error for anything else.
const char* model_kind_name(ModelKind kind) noexcept;
ModelKind parse_model_kind(const std::string& name);

struct ModelConfig {
  ModelKind kind = ModelKind::mlp;
  std::size_t inputs = 784;
  std::size_t hidden = 256;  // the MLP's hidden width; unused by softmax regression
  std::size_t classes = 10;
  // The CNN's image side: rows × cols = inputs; unused by the other models.
  std::size_t rows = 28, cols = 28;
  // gluon::Trainer's optimizer; its options other than the learning rate keep their defaults.
  std::string optimizer = "sgd";
};

class Model {
 public:
  // Parameters made on the current engine from `seed`. softmax and mlp: weights (units,
  // in_units) normal with stddev sqrt(2 / fan_in) for the ReLU layer, 0.01 for the output
  // layer; biases zero. cnn (conv 3×3 1→32, relu, conv 3×3 32→64, relu, max-pool 2, dropout
  // 0.25, flatten, dense 128, relu, dropout 0.5, dense 10; log-softmax and NLL): Xavier
  // weights, zero biases; images need rows and cols of at least 6.
  Model(ModelConfig config, std::uint64_t seed);

  const ModelConfig& config() const noexcept { return config_; }

  // Logits (batch, classes) of `x` (batch, inputs), in predict mode (no dropout).
  NDArray forward(const NDArray& x) const;

  struct Step {
    NDArray loss;     // 0-d: mean cross-entropy of the batch, before the update
    NDArray correct;  // 0-d: rows predicted right, before the update
  };
  // One optimizer step on the batch `x` (batch, inputs) with labels `y` (batch,): the forward
  // recorded in training mode (dropout on), autograd's backward, and an in-place update of
  // every parameter (gluon::Trainer: the gradient of the summed loss rescaled by 1 / batch).
  Step train_step(const NDArray& x, const NDArray& y, float lr);

  // Every parameter's data(), in the order of the layers, output layer last.
  const std::vector<NDArray>& parameters() const noexcept { return params_; }
  // Forward and backward without updating: one gradient per parameter of the batch's mean
  // loss (copies of the gradient buffers), in the order of parameters(); that loss and the
  // logits through `loss` and `logits` when they are not null.
  std::vector<NDArray> gradients(const NDArray& x, const NDArray& y, NDArray* loss,
                                 NDArray* logits = nullptr);

 private:
  // Logits and per-example losses of the batch, recorded in training mode.
  std::pair<NDArray, NDArray> record_forward(const NDArray& x, const NDArray& y);
  // x as the first block takes it: (batch, 1, rows, cols) for the CNN.
  NDArray shaped(const NDArray& x) const;

  ModelConfig config_;
  // Shared so that the const forward can run the (non-const) blocks.
  std::shared_ptr<gluon::Sequential> net_;
  gluon::SoftmaxCrossEntropyLoss loss_;
  gluon::Trainer trainer_;
  std::vector<NDArray> params_;
};

}  // namespace depengine::fashion_mnist
