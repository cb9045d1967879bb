// depengine/gluon.h — layers, losses and a trainer in the C++ frontend, with MXNet Gluon's
// names: parameters with deferred shape inference, blocks whose forward is taped by autograd
// (depengine/autograd.h), and optimizer steps pushed to the engine like any op.
//
//   #include <depengine/gluon.h>
//   using namespace depengine;
//   gluon::Sequential net;
//   net.add(gluon::Dense(256, "relu")).add(gluon::Dense(10));   // in_units inferred
//   net.initialize(gluon::init::Xavier());
//   gluon::SoftmaxCrossEntropyLoss loss_fn;
//   gluon::Trainer trainer(net.collect_params(), "sgd", {{"learning_rate", 0.1}});
//   for (const auto& [x, y] : batches) {
//     NDArray l;
//     {
//       autograd::RecordScope record;
//       l = loss_fn(net(x), y);                 // (batch,): one loss per example
//     }
//     l.backward();                             // pushed, returns at once
//     trainer.step(x.shape()[0]);               // gradients rescaled by 1 / batch size
//   }
//
// Parameters are drawn from the engine's counter-based generator (nd::random_*), so the same
// seed (nd::seed) gives the same parameters, and the same training, on every engine and any
// number of workers. Dropout is active only while the thread is in training mode
// (autograd::RecordScope's default); its masks come from the same generator.
//
// Errors (depengine::Error, thrown at the call, nothing pushed for the failing layer): an
// input whose shape does not fit a layer (the message names the layer and both shapes), an
// unknown activation, initializer or optimizer name or optimizer option, a parameter used
// before initialize(), a parameter file that does not match the block. A label out of range
// fails the loss's op: the Error reaches the next blocker on the loss.
//
// Thread safety: a block, its parameters and a trainer are used from one thread at a time;
// different threads may train different blocks on one engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/ndarray.h"
#include "depengine/nn.h"

namespace depengine::gluon {

using autograd::GradReq;

// How a parameter's first values are drawn (mxnet.init). A value type; copies are cheap.
class Initializer {
 public:
  enum class Kind { uniform, normal, xavier, zero, one };
  // Xavier's spread: how fan_in and fan_out are combined, and which distribution.
  enum class Factor { avg, in, out };

  // Made by the functions of gluon::init. `value`: uniform's scale, normal's sigma,
  // xavier's magnitude; `gaussian`: xavier draws from a normal instead of a uniform.
  Initializer(Kind kind, float value, Factor factor = Factor::avg, bool gaussian = false)
      : kind_(kind), value_(value), factor_(factor), gaussian_(gaussian) {}

  // Draws an array of `shape` on `device` from the current engine's generator.
  NDArray make(const Shape& shape, Device device) const;
  Kind kind() const noexcept { return kind_; }
  // e.g. "Uniform(scale=0.07)".
  std::string str() const;

 private:
  Kind kind_;
  float value_;
  Factor factor_;
  bool gaussian_;
};

namespace init {
// U(-scale, scale); MXNet's default initializer is Uniform(0.07).
Initializer Uniform(float scale = 0.07f);
// N(0, sigma²).
Initializer Normal(float sigma = 0.01f);
// Glorot: scale = sqrt(magnitude / factor) with factor (fan_in + fan_out) / 2, fan_in or
// fan_out (fan_in = shape[1]·receptive field, fan_out = shape[0]·receptive field); then
// U(-scale, scale), or N(0, scale²) for rnd_type "gaussian". Error for another rnd_type or
// factor_type.
Initializer Xavier(const std::string& rnd_type = "uniform", const std::string& factor_type = "avg",
                   float magnitude = 3.0f);
Initializer Zero();
Initializer One();
// By MXNet's name: "uniform", "normal", "xavier", "zeros"/"zero", "ones"/"one" with their
// defaults; Error naming anything else.
Initializer create(const std::string& name);
}  // namespace init

// A weight or bias of a block: its shape (0 for a dimension not known until the first
// forward), its values (data()) and its gradient buffer (grad()).
class Parameter {
 public:
  // `init`: this parameter's own initializer (MXNet's `init=`), used instead of the one
  // passed to initialize(); a null `init` means none.
  Parameter(std::string name, Shape shape, GradReq grad_req = GradReq::write,
            std::shared_ptr<const Initializer> init = nullptr);

  const std::string& name() const noexcept { return name_; }
  const Shape& shape() const noexcept { return shape_; }
  GradReq grad_req() const noexcept { return grad_req_; }
  // Changes how the gradient is received; GradReq::null drops the gradient buffer.
  void set_grad_req(GradReq req);

  // Draws the values with this parameter's own initializer, else `init`, on `device`. When
  // the shape is not known yet, the draw is deferred until set_shape completes it (the
  // layer's first forward). Again on an initialized parameter: nothing, unless force_reinit.
  void initialize(const Initializer& init = init::Uniform(), Device device = Device::cpu(),
                  bool force_reinit = false);
  bool initialized() const noexcept { return data_.defined(); }
  // Fills in the unknown (0) dimensions; a known dimension that differs is an Error naming
  // the parameter and both shapes. Runs a deferred initialization.
  void set_shape(const Shape& shape);

  // The values; Error when not initialized (naming the parameter, and saying its shape is
  // inferred at the first forward when it is deferred).
  const NDArray& data() const;
  // The gradient buffer (data()'s shape); Error when not initialized or grad_req is null.
  NDArray grad() const;
  // Copies `value` (of the parameter's shape, unknown dimensions taken from it) into the
  // values; initializes an uninitialized parameter with it (on value's device).
  void set_data(const NDArray& value);
  // Sets the gradient buffer to zeros (pushed).
  void zero_grad();

 private:
  void attach();

  std::string name_;
  Shape shape_;
  GradReq grad_req_;
  std::shared_ptr<const Initializer> own_init_;
  // A deferred initialize(): the initializer and device to use once the shape is known.
  std::shared_ptr<const Initializer> deferred_;
  Device device_ = Device::cpu();
  NDArray data_;
};

// Parameters by name, in registration order (a block's own, then its children's, each
// prefixed by the child's name and a dot: "0.weight").
class ParameterDict {
 public:
  using Entry = std::pair<std::string, std::shared_ptr<Parameter>>;

  void add(std::string name, std::shared_ptr<Parameter> p);
  std::size_t size() const noexcept { return entries_.size(); }
  // Error naming `name` when there is no such parameter.
  Parameter& operator[](const std::string& name) const;
  std::vector<Entry>::const_iterator begin() const noexcept { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const noexcept { return entries_.end(); }

  void initialize(const Initializer& init = init::Uniform(), Device device = Device::cpu(),
                  bool force_reinit = false) const;
  void zero_grad() const;

 private:
  std::vector<Entry> entries_;
};

// A layer or a network of layers. Subclasses register their parameters and children in the
// constructor and implement forward.
class Block {
 public:
  Block() = default;
  virtual ~Block() = default;
  Block(const Block&) = default;
  Block& operator=(const Block&) = default;
  Block(Block&&) = default;
  Block& operator=(Block&&) = default;

  virtual NDArray forward(const NDArray& x) = 0;
  NDArray operator()(const NDArray& x) { return forward(x); }
  // The layer as errors name it, e.g. "Dense(units=10, in_units=256)".
  virtual std::string str() const = 0;

  ParameterDict collect_params() const;
  void initialize(const Initializer& init = init::Uniform(), Device device = Device::cpu(),
                  bool force_reinit = false);

  // Writes every parameter's name, shape and values (blocks until they are computed).
  // Error when one is not initialized or the file cannot be written.
  void save_parameters(const std::string& path) const;
  // Reads a file written by save_parameters into the parameters, on `device`; a parameter
  // of unknown shape takes the file's. Error naming the file and the parameter for a
  // parameter missing from the file or from the block, a shape that differs, or a file that
  // is not a parameter file.
  void load_parameters(const std::string& path, Device device = Device::cpu());

 protected:
  std::shared_ptr<Parameter> register_parameter(std::shared_ptr<Parameter> p);
  void register_child(std::string name, std::shared_ptr<Block> child);
  const std::vector<std::pair<std::string, std::shared_ptr<Block>>>& children() const noexcept {
    return children_;
  }

 private:
  std::vector<std::shared_ptr<Parameter>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Block>>> children_;
};

// Runs its children one after another; children are named "0", "1", ... in order.
class Sequential : public Block {
 public:
  // Takes a copy of `block` (its parameters are shared with the original).
  template <class B>
  Sequential& add(B block) {
    return add(std::shared_ptr<Block>(std::make_shared<B>(std::move(block))));
  }
  Sequential& add(std::shared_ptr<Block> block);
  std::size_t size() const noexcept { return children().size(); }
  // Error for an index past the end.
  Block& operator[](std::size_t i) const;

  NDArray forward(const NDArray& x) override;
  std::string str() const override;
};

// y = activation(x · weightᵀ + bias), weight (units, in_units), bias (units,). in_units = 0:
// inferred from the first input. Inputs of more than 2 dimensions are flattened to
// (batch, rest) (MXNet's flatten=True). activation: "" (none) or one of Activation's names.
class Dense : public Block {
 public:
  explicit Dense(std::size_t units, const std::string& activation = "", bool use_bias = true,
                 std::size_t in_units = 0, std::shared_ptr<const Initializer> weight_init = nullptr,
                 std::shared_ptr<const Initializer> bias_init = nullptr);
  NDArray forward(const NDArray& x) override;
  std::string str() const override;
  Parameter& weight() const { return *weight_; }
  // Error when use_bias was false.
  Parameter& bias() const;

 private:
  std::size_t units_;
  std::string activation_;
  std::shared_ptr<Parameter> weight_, bias_;
};

// Elementwise: "relu", "sigmoid", "tanh", "softrelu" (log(1 + exp(x))); Error for another name.
class Activation : public Block {
 public:
  explicit Activation(const std::string& name);
  NDArray forward(const NDArray& x) override;
  std::string str() const override;

 private:
  std::string name_;
};

// In training mode (autograd::is_training()), zeroes each element with probability `rate`
// and scales the rest by 1 / (1 - rate); otherwise the identity. rate in [0, 1) (Error
// otherwise). CPU arrays.
class Dropout : public Block {
 public:
  explicit Dropout(float rate);
  NDArray forward(const NDArray& x) override;
  std::string str() const override;

 private:
  float rate_;
};

// (batch, d1, d2, ...) -> (batch, d1·d2·...); Error for a 0-d input.
class Flatten : public Block {
 public:
  NDArray forward(const NDArray& x) override;
  std::string str() const override { return "Flatten"; }
};

// y = activation(convolution(x, weight) + bias), NCHW: x (N, in_channels, H, W), weight
// (channels, in_channels, kh, kw), bias (channels,). in_channels = 0: inferred from the first
// input. An input that is not 4-d, has another channel count, or is smaller than the kernel
// (after padding) is an Error naming the layer and both shapes.
class Conv2D : public Block {
 public:
  Conv2D(std::size_t channels, nd::Size2 kernel_size, nd::Size2 strides = {1, 1},
         nd::Size2 padding = {0, 0}, const std::string& activation = "", bool use_bias = true,
         std::size_t in_channels = 0, std::shared_ptr<const Initializer> weight_init = nullptr,
         std::shared_ptr<const Initializer> bias_init = nullptr);
  NDArray forward(const NDArray& x) override;
  std::string str() const override;
  Parameter& weight() const { return *weight_; }

 private:
  std::size_t channels_;
  nd::Size2 kernel_, strides_, padding_;
  std::string activation_;
  std::shared_ptr<Parameter> weight_, bias_;
};

// Max or average pooling over pool_size windows of an NCHW input; strides {0, 0}: the pool
// size (MXNet's default). An input that is not 4-d or smaller than the window is an Error
// naming the layer and both shapes.
class MaxPool2D : public Block {
 public:
  explicit MaxPool2D(nd::Size2 pool_size = {2, 2}, nd::Size2 strides = {0, 0},
                     nd::Size2 padding = {0, 0});
  NDArray forward(const NDArray& x) override;
  std::string str() const override;

 protected:
  MaxPool2D(nd::Size2 pool_size, nd::Size2 strides, nd::Size2 padding, nd::PoolType type,
            bool global);

 private:
  nd::Size2 pool_, strides_, padding_;
  nd::PoolType type_;
  bool global_;
};

// Average pooling; the window's area divides (count_include_pad, MXNet's default).
class AvgPool2D : public MaxPool2D {
 public:
  explicit AvgPool2D(nd::Size2 pool_size = {2, 2}, nd::Size2 strides = {0, 0},
                     nd::Size2 padding = {0, 0})
      : MaxPool2D(pool_size, strides, padding, nd::PoolType::avg, false) {}
};

// The mean of each channel's plane: (N, C, H, W) -> (N, C, 1, 1).
class GlobalAvgPool2D : public MaxPool2D {
 public:
  GlobalAvgPool2D() : MaxPool2D({1, 1}, {1, 1}, {0, 0}, nd::PoolType::avg, true) {}
};

// Batch normalization over axis 1 (channels): gamma (ones), beta (zeros) and the running
// mean (zeros) and variance (ones), all (in_channels,), in_channels inferred when 0. In
// training mode (autograd::is_training()) it normalizes with the batch's statistics and
// updates the running ones (running = momentum·running + (1 − momentum)·batch); otherwise
// it uses the running statistics. scale = false: gamma fixed at 1; center = false: beta
// fixed at 0 (neither gets a gradient).
class BatchNorm : public Block {
 public:
  explicit BatchNorm(float momentum = 0.9f, float epsilon = 1e-5f, bool center = true,
                     bool scale = true, std::size_t in_channels = 0);
  NDArray forward(const NDArray& x) override;
  std::string str() const override;
  Parameter& running_mean() const { return *running_mean_; }
  Parameter& running_var() const { return *running_var_; }

 private:
  float momentum_, epsilon_;
  bool scale_;
  std::shared_ptr<Parameter> gamma_, beta_, running_mean_, running_var_;
};

// A loss: one value per example, (batch,).
class Loss {
 public:
  virtual ~Loss() = default;
  virtual NDArray operator()(const NDArray& pred, const NDArray& label) const = 0;
};

// weight / 2 · (pred - label)², averaged over every axis but the first. label has pred's
// size (it is reshaped to pred's shape); Error otherwise.
class L2Loss : public Loss {
 public:
  explicit L2Loss(float weight = 1.0f) : weight_(weight) {}
  NDArray operator()(const NDArray& pred, const NDArray& label) const override;

 private:
  float weight_;
};

// -log softmax(pred)[label] per row, pred (batch, classes) and label (batch,) holding class
// indices as floats (sparse labels). from_logits: pred already holds log-probabilities,
// the loss is -pred[label]. A label outside [0, classes) fails the op (Error at the blocker).
// CPU arrays.
class SoftmaxCrossEntropyLoss : public Loss {
 public:
  explicit SoftmaxCrossEntropyLoss(bool from_logits = false) : from_logits_(from_logits) {}
  NDArray operator()(const NDArray& pred, const NDArray& label) const override;

 private:
  bool from_logits_;
};

// Updates parameters from their gradients: one fused op per parameter and step
// (depengine/optim.h), with MXNet 1.9's optimizers, formulas and keywords:
//   "sgd"      learning_rate (0.01), momentum (0): w -= lr·(grad/batch + wd·w), with momentum
//              through a state as MXNet's sgd_mom_update;
//   "adam"     learning_rate (0.001), beta1 (0.9), beta2 (0.999), epsilon (1e-8); the bias
//              correction through the learning rate, lr·sqrt(1 - beta2^t) / (1 - beta1^t);
//   "adadelta" rho (0.9), epsilon (1e-5); no learning rate (MXNet 1.9's AdaDelta);
//   "rmsprop"  learning_rate (0.001), gamma1 (0.9), gamma2 (0.9), epsilon (1e-8), centered
//              (0 or 1), clip_weights (off);
// and for all: wd (0), clip_gradient (off). Error naming an unknown optimizer or option, or a
// learning rate or wd that is negative or not finite; the updates check the rest at step().
// The optimizer states (zeros of each weight's shape) are made by the constructor for the
// parameters initialized by then, else at a parameter's first update. To record a training
// step for replay (depengine/record.h), construct the trainer after initializing the block.
class Trainer {
 public:
  Trainer(ParameterDict params, const std::string& optimizer,
          const std::map<std::string, double>& options = {});
  // One update of every parameter whose grad_req is not null, with gradients scaled by
  // 1 / batch_size. Pushed; returns at once. batch_size must be positive.
  void step(std::size_t batch_size);
  float learning_rate() const noexcept { return lr_; }
  void set_learning_rate(float lr);

 private:
  enum class Kind { sgd, adam, adadelta, rmsprop };
  // Makes the missing states of parameter k (weight w).
  void make_states(std::size_t k, const NDArray& w);

  ParameterDict params_;
  Kind kind_;
  float lr_ = 0.01f, wd_ = 0.0f, clip_gradient_ = -1.0f;
  float momentum_ = 0.0f, beta1_ = 0.9f, beta2_ = 0.999f, epsilon_ = 1e-8f, rho_ = 0.9f;
  float gamma1_ = 0.9f, gamma2_ = 0.9f, clip_weights_ = -1.0f;
  bool centered_ = false;
  std::vector<std::vector<NDArray>> states_;  // per parameter, in params_'s order
  std::vector<std::uint64_t> updates_;        // per parameter: Adam's t
};

}  // namespace depengine::gluon
