// Layers, losses and the trainer of depengine/gluon.h, written with NDArray ops so that
// autograd tapes them. Dense and SoftmaxCrossEntropyLoss use the fused ops of
// depengine/layer_ops.h (one op forward, one tape entry); relu is one tape entry whose
// gradient is nd::relu_backward.
#include "depengine/gluon.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "autograd_internal.h"
#include "depengine/layer_ops.h"
#include "depengine/nn.h"
#include "depengine/optim.h"
#include "internal.h"

namespace depengine::gluon {
namespace {

namespace ag = autograd::detail;

std::string fmt(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// Runs the forward of a fused tape entry unrecorded, keeping the training flag.
class Unrecorded {
 public:
  Unrecorded() : pause_(autograd::is_training()) {}

 private:
  autograd::PauseScope pause_;
};

const char* const kActivations[] = {"relu", "sigmoid", "tanh", "softrelu"};

void check_activation(const std::string& name, const char* layer) {
  for (const char* a : kActivations) {
    if (name == a) return;
  }
  throw Error(std::string(layer) + ": unknown activation '" + name +
              "' (expected relu, sigmoid, tanh or softrelu)");
}

// relu taped as one entry whose gradient is one op (nd::relu_backward: dy where y > 0),
// rather than nd::relu's compare and multiply; relu_backward is a CPU op, so GPU arrays take
// nd::relu.
NDArray relu(const NDArray& x) {
  if (!x.device().is_cpu()) return nd::relu(x);
  const bool record = ag::should_record({&x});
  NDArray y;
  {
    Unrecorded pause;
    y = nd::relu(x);
  }
  if (record) {
    ag::record_op("relu", {x}, {&y}, {y}, [](const ag::Saved& s, const std::vector<NDArray>& dy) {
      return std::vector<NDArray>{nd::relu_backward(s[0], dy[0])};
    });
  }
  return y;
}

NDArray activate(const std::string& name, const NDArray& x) {
  if (name == "relu") return relu(x);
  if (name == "sigmoid") return nd::sigmoid(x);
  if (name == "tanh") return nd::tanh(x);
  // softrelu: log(1 + exp(x)) = relu(x) + log(1 + exp(-|x|)), without overflow.
  return nd::relu(x) + nd::log(nd::exp(-nd::abs(x)) + 1.0f);
}

// x (m, k) · wᵀ (w (n, k)) + b (n,) then relu: nd::fully_connected (one op, one tape entry)
// on the CPU, where its kernel is; on a GPU composed of dot and transpose, which tape
// themselves.
NDArray fully_connected(const NDArray& x, const NDArray& w, const NDArray& b, bool relu) {
  if (x.device().is_cpu()) return nd::fully_connected(x, w, b, relu);
  NDArray y = nd::dot(x, nd::transpose(w));
  if (b.defined()) y = y + b;
  return relu ? nd::relu(y) : y;
}

std::size_t product(const Shape& s, std::size_t from) {
  std::size_t n = 1;
  for (std::size_t i = from; i < s.size(); ++i) n *= s[i];
  return n;
}

bool finite_nonnegative(double v) { return std::isfinite(v) && v >= 0.0; }

}  // namespace

// ---- Initializer ---------------------------------------------------------------------------

NDArray Initializer::make(const Shape& shape, Device device) const {
  switch (kind_) {
    case Kind::uniform:
      return nd::random_uniform(shape, -value_, value_, device);
    case Kind::normal:
      return nd::random_normal(shape, 0.0f, value_, device);
    case Kind::zero:
      return nd::zeros(shape, device);
    case Kind::one:
      return nd::ones(shape, device);
    case Kind::xavier:
      break;
  }
  if (shape.size() < 2) {
    throw Error(str() + ": cannot initialize a parameter of shape " + shape_str(shape) +
                " (it needs at least 2 dimensions for fan_in and fan_out)");
  }
  const double field = static_cast<double>(product(shape, 2));
  const double fan_in = static_cast<double>(shape[1]) * field;
  const double fan_out = static_cast<double>(shape[0]) * field;
  const double factor = factor_ == Factor::avg  ? (fan_in + fan_out) / 2.0
                        : factor_ == Factor::in ? fan_in
                                                : fan_out;
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(value_) / factor));
  return gaussian_ ? nd::random_normal(shape, 0.0f, scale, device)
                   : nd::random_uniform(shape, -scale, scale, device);
}

std::string Initializer::str() const {
  switch (kind_) {
    case Kind::uniform:
      return "Uniform(scale=" + fmt(value_) + ")";
    case Kind::normal:
      return "Normal(sigma=" + fmt(value_) + ")";
    case Kind::zero:
      return "Zero()";
    case Kind::one:
      return "One()";
    case Kind::xavier:
      break;
  }
  const char* f = factor_ == Factor::avg ? "avg" : factor_ == Factor::in ? "in" : "out";
  return std::string("Xavier(rnd_type=") + (gaussian_ ? "gaussian" : "uniform") +
         ", factor_type=" + f + ", magnitude=" + fmt(value_) + ")";
}

namespace init {

Initializer Uniform(float scale) {
  if (!(std::isfinite(scale) && scale >= 0.0f)) {
    throw Error("Uniform: scale " + fmt(scale) + " is not a finite number >= 0");
  }
  return {Initializer::Kind::uniform, scale};
}

Initializer Normal(float sigma) {
  if (!(std::isfinite(sigma) && sigma >= 0.0f)) {
    throw Error("Normal: sigma " + fmt(sigma) + " is not a finite number >= 0");
  }
  return {Initializer::Kind::normal, sigma};
}

Initializer Xavier(const std::string& rnd_type, const std::string& factor_type, float magnitude) {
  if (rnd_type != "uniform" && rnd_type != "gaussian") {
    throw Error("Xavier: unknown rnd_type '" + rnd_type + "' (expected uniform or gaussian)");
  }
  Initializer::Factor f;
  if (factor_type == "avg") {
    f = Initializer::Factor::avg;
  } else if (factor_type == "in") {
    f = Initializer::Factor::in;
  } else if (factor_type == "out") {
    f = Initializer::Factor::out;
  } else {
    throw Error("Xavier: unknown factor_type '" + factor_type + "' (expected avg, in or out)");
  }
  if (!(std::isfinite(magnitude) && magnitude >= 0.0f)) {
    throw Error("Xavier: magnitude " + fmt(magnitude) + " is not a finite number >= 0");
  }
  return {Initializer::Kind::xavier, magnitude, f, rnd_type == "gaussian"};
}

Initializer Zero() { return {Initializer::Kind::zero, 0.0f}; }
Initializer One() { return {Initializer::Kind::one, 1.0f}; }

Initializer create(const std::string& name) {
  if (name == "uniform") return Uniform();
  if (name == "normal") return Normal();
  if (name == "xavier") return Xavier();
  if (name == "zeros" || name == "zero") return Zero();
  if (name == "ones" || name == "one") return One();
  throw Error("unknown initializer '" + name + "' (expected uniform, normal, xavier, zeros or ones)");
}

}  // namespace init

// ---- Parameter -----------------------------------------------------------------------------

Parameter::Parameter(std::string name, Shape shape, GradReq grad_req,
                     std::shared_ptr<const Initializer> init)
    : name_(std::move(name)), shape_(std::move(shape)), grad_req_(grad_req),
      own_init_(std::move(init)) {}

void Parameter::set_grad_req(GradReq req) {
  grad_req_ = req;
  if (data_.defined()) attach();
}

void Parameter::attach() { data_.attach_grad(grad_req_); }

void Parameter::initialize(const Initializer& init, Device device, bool force_reinit) {
  if (data_.defined() && !force_reinit) return;
  const Initializer& chosen = own_init_ ? *own_init_ : init;
  device_ = device;
  if (product(shape_, 0) == 0) {
    // Unknown dimensions (0) are filled in by the layer's first forward (set_shape).
    deferred_ = std::make_shared<const Initializer>(chosen);
    data_ = NDArray();
    return;
  }
  deferred_ = nullptr;
  data_ = chosen.make(shape_, device);
  attach();
}

void Parameter::set_shape(const Shape& shape) {
  bool fits = shape.size() == shape_.size();
  for (std::size_t i = 0; fits && i < shape.size(); ++i) {
    fits = shape_[i] == 0 || shape_[i] == shape[i];
  }
  if (!fits) {
    throw Error("Parameter '" + name_ + "': shape " + shape_str(shape) + " does not fit " +
                shape_str(shape_));
  }
  shape_ = shape;
  if (deferred_ && product(shape_, 0) != 0) {
    const std::shared_ptr<const Initializer> init = deferred_;
    deferred_ = nullptr;
    data_ = init->make(shape_, device_);
    attach();
  }
}

const NDArray& Parameter::data() const {
  if (!data_.defined()) {
    if (deferred_) {
      throw Error("Parameter '" + name_ + "' of shape " + shape_str(shape_) +
                  " is not initialized yet: its shape is inferred at the layer's first forward");
    }
    throw Error("Parameter '" + name_ + "' is not initialized: call initialize() first");
  }
  return data_;
}

NDArray Parameter::grad() const {
  const NDArray& d = data();
  if (grad_req_ == GradReq::null) {
    throw Error("Parameter '" + name_ + "' has no gradient: its grad_req is null");
  }
  return d.grad();
}

void Parameter::set_data(const NDArray& value) {
  if (!value.defined()) throw Error("Parameter '" + name_ + "': set_data with a null array");
  set_shape(value.shape());
  if (!data_.defined()) {
    deferred_ = nullptr;
    device_ = value.device();
    data_ = nd::copy(value.detach());
    attach();
    return;
  }
  ag::copy_into(data_, value.detach());
}

void Parameter::zero_grad() {
  if (!data_.defined() || grad_req_ == GradReq::null) return;
  const NDArray g = data_.grad();
  ag::copy_into(g, nd::zeros_like(g));
}

// ---- ParameterDict -------------------------------------------------------------------------

void ParameterDict::add(std::string name, std::shared_ptr<Parameter> p) {
  entries_.emplace_back(std::move(name), std::move(p));
}

Parameter& ParameterDict::operator[](const std::string& name) const {
  for (const Entry& e : entries_) {
    if (e.first == name) return *e.second;
  }
  throw Error("no parameter named '" + name + "'");
}

void ParameterDict::initialize(const Initializer& init, Device device, bool force_reinit) const {
  for (const Entry& e : entries_) e.second->initialize(init, device, force_reinit);
}

void ParameterDict::zero_grad() const {
  for (const Entry& e : entries_) e.second->zero_grad();
}

// ---- Block ---------------------------------------------------------------------------------

std::shared_ptr<Parameter> Block::register_parameter(std::shared_ptr<Parameter> p) {
  params_.push_back(p);
  return p;
}

void Block::register_child(std::string name, std::shared_ptr<Block> child) {
  if (!child) throw Error("a null block cannot be a child");
  children_.emplace_back(std::move(name), std::move(child));
}

ParameterDict Block::collect_params() const {
  ParameterDict d;
  for (const auto& p : params_) d.add(p->name(), p);
  for (const auto& [name, child] : children_) {
    for (const auto& [pname, p] : child->collect_params()) d.add(name + "." + pname, p);
  }
  return d;
}

void Block::initialize(const Initializer& init, Device device, bool force_reinit) {
  collect_params().initialize(init, device, force_reinit);
}

namespace {

constexpr char kMagic[8] = {'D', 'E', 'P', 'G', 'L', 'U', 'O', '1'};

void write_u64(std::ofstream& out, std::uint64_t v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

std::uint64_t read_u64(std::ifstream& in, const std::string& path) {
  std::uint64_t v = 0;
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) {
    throw Error("load_parameters: '" + path + "' ends early (not a parameter file?)");
  }
  return v;
}

}  // namespace

void Block::save_parameters(const std::string& path) const {
  const ParameterDict params = collect_params();
  std::vector<std::vector<float>> values;
  for (const auto& [name, p] : params) values.push_back(p->data().to_vector());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("save_parameters: cannot open '" + path + "' for writing");
  out.write(kMagic, sizeof kMagic);
  write_u64(out, params.size());
  std::size_t i = 0;
  for (const auto& [name, p] : params) {
    write_u64(out, name.size());
    out.write(name.data(), static_cast<std::streamsize>(name.size()));
    write_u64(out, p->shape().size());
    for (std::size_t d : p->shape()) write_u64(out, d);
    const std::vector<float>& v = values[i++];
    out.write(reinterpret_cast<const char*>(v.data()),
              static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
  if (!out.flush()) throw Error("save_parameters: writing '" + path + "' failed");
}

void Block::load_parameters(const std::string& path, Device device) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("load_parameters: cannot open '" + path + "'");
  char magic[sizeof kMagic] = {};
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
    throw Error("load_parameters: '" + path + "' is not a parameter file");
  }
  const ParameterDict params = collect_params();
  const std::uint64_t count = read_u64(in, path);
  if (count > (1u << 20)) throw Error("load_parameters: '" + path + "' is not a parameter file");
  std::vector<std::pair<std::string, NDArray>> loaded;
  for (std::uint64_t k = 0; k < count; ++k) {
    const std::uint64_t len = read_u64(in, path);
    if (len > 4096) throw Error("load_parameters: '" + path + "' is not a parameter file");
    std::string name(len, '\0');
    if (!in.read(name.data(), static_cast<std::streamsize>(len))) {
      throw Error("load_parameters: '" + path + "' ends early (not a parameter file?)");
    }
    const std::uint64_t ndim = read_u64(in, path);
    if (ndim > kMaxNdim) throw Error("load_parameters: '" + path + "' is not a parameter file");
    Shape shape(ndim);
    for (std::size_t& d : shape) d = read_u64(in, path);
    detail::checked_size(shape, "load_parameters");
    std::vector<float> v(product(shape, 0));
    if (!in.read(reinterpret_cast<char*>(v.data()),
                 static_cast<std::streamsize>(v.size() * sizeof(float)))) {
      throw Error("load_parameters: '" + path + "' ends early (not a parameter file?)");
    }
    bool known = false;
    for (const auto& [pname, p] : params) known = known || pname == name;
    if (!known) {
      throw Error("load_parameters: '" + path + "' has parameter '" + name +
                  "', which the block does not have");
    }
    loaded.emplace_back(name, nd::array(v, shape, device));
  }
  for (const auto& [pname, p] : params) {
    const NDArray* value = nullptr;
    for (const auto& [name, a] : loaded) {
      if (name == pname) value = &a;
    }
    if (!value) {
      throw Error("load_parameters: '" + path + "' lacks parameter '" + pname + "'");
    }
    try {
      p->set_data(*value);
    } catch (const Error& e) {
      throw Error("load_parameters: '" + path + "', parameter '" + pname + "': " + e.what());
    }
  }
}

// ---- Sequential ----------------------------------------------------------------------------

Sequential& Sequential::add(std::shared_ptr<Block> block) {
  register_child(std::to_string(children().size()), std::move(block));
  return *this;
}

Block& Sequential::operator[](std::size_t i) const {
  if (i >= children().size()) {
    throw Error("Sequential: no block " + std::to_string(i) + " (it has " +
                std::to_string(children().size()) + ")");
  }
  return *children()[i].second;
}

NDArray Sequential::forward(const NDArray& x) {
  NDArray y = x;
  for (const auto& [name, block] : children()) y = block->forward(y);
  return y;
}

std::string Sequential::str() const {
  std::string s = "Sequential(";
  for (std::size_t i = 0; i < children().size(); ++i) {
    s += (i ? ", " : "") + children()[i].second->str();
  }
  return s + ")";
}

// ---- Dense, Activation, Dropout, Flatten ---------------------------------------------------

Dense::Dense(std::size_t units, const std::string& activation, bool use_bias, std::size_t in_units,
             std::shared_ptr<const Initializer> weight_init,
             std::shared_ptr<const Initializer> bias_init)
    : units_(units), activation_(activation) {
  if (units == 0) throw Error("Dense: units must be positive");
  if (!activation.empty()) check_activation(activation, "Dense");
  weight_ = register_parameter(std::make_shared<Parameter>(
      "weight", Shape{units, in_units}, GradReq::write, std::move(weight_init)));
  if (use_bias) {
    bias_ = register_parameter(std::make_shared<Parameter>(
        "bias", Shape{units}, GradReq::write,
        bias_init ? std::move(bias_init) : std::make_shared<const Initializer>(init::Zero())));
  }
}

Parameter& Dense::bias() const {
  if (!bias_) throw Error(str() + " has no bias (use_bias was false)");
  return *bias_;
}

std::string Dense::str() const {
  std::string s = "Dense(units=" + std::to_string(units_) +
                  ", in_units=" + std::to_string(weight_->shape()[1]);
  if (!activation_.empty()) s += ", activation=" + activation_;
  return s + ")";
}

NDArray Dense::forward(const NDArray& x) {
  if (!x.defined()) throw Error(str() + ": the input is a null array");
  if (x.ndim() < 2) {
    throw Error(str() + ": input of shape " + shape_str(x.shape()) +
                " does not fit: expected (batch, in_units)");
  }
  const std::size_t in = product(x.shape(), 1);
  const std::size_t expected = weight_->shape()[1];
  if (expected != 0 && expected != in) {
    throw Error(str() + ": input of shape " + shape_str(x.shape()) + " does not fit the weight of shape " +
                shape_str(weight_->shape()) + ": expected (batch, " + std::to_string(expected) + ")");
  }
  weight_->set_shape({units_, in});
  const NDArray flat = x.ndim() == 2 ? x : x.reshape({x.shape()[0], in});
  const bool fuse_relu = activation_ == "relu";
  const NDArray& w = weight_->data();
  NDArray y = fully_connected(flat, w, bias_ ? bias_->data() : NDArray(), fuse_relu);
  return activation_.empty() || fuse_relu ? y : activate(activation_, y);
}

Activation::Activation(const std::string& name) : name_(name) {
  check_activation(name, "Activation");
}

NDArray Activation::forward(const NDArray& x) {
  if (!x.defined()) throw Error(str() + ": the input is a null array");
  return activate(name_, x);
}

std::string Activation::str() const { return "Activation(" + name_ + ")"; }

Dropout::Dropout(float rate) : rate_(rate) {
  if (!(rate >= 0.0f && rate < 1.0f)) {
    throw Error("Dropout: rate " + fmt(rate) + " is not in [0, 1)");
  }
}

NDArray Dropout::forward(const NDArray& x) {
  if (!x.defined()) throw Error(str() + ": the input is a null array");
  if (!autograd::is_training() || rate_ == 0.0f) return x;
  if (!x.device().is_cpu()) {
    throw Error(str() + ": the input is on " + x.device().str() + " (CPU arrays only)");
  }
  // The mask is a constant of the tape (compare is not recorded): the gradient is dy·mask.
  const NDArray keep =
      nd::compare(nd::random_uniform(x.shape(), 0.0f, 1.0f), rate_, nd::Compare::greater_equal);
  return x * (keep * (1.0f / (1.0f - rate_)));
}

std::string Dropout::str() const { return "Dropout(rate=" + fmt(rate_) + ")"; }

NDArray Flatten::forward(const NDArray& x) {
  if (!x.defined()) throw Error("Flatten: the input is a null array");
  if (x.ndim() == 0) throw Error("Flatten: input of shape () has no batch axis");
  if (x.ndim() == 2) return x;
  return x.reshape({x.shape()[0], product(x.shape(), 1)});
}

// ---- Conv2D, pooling, BatchNorm -----------------------------------------------------------

namespace {

std::string size2(nd::Size2 s) { return "(" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ")"; }

void require_nchw(const Block& layer, const NDArray& x) {
  if (!x.defined()) throw Error(layer.str() + ": the input is a null array");
  if (x.ndim() != 4) {
    throw Error(layer.str() + ": input of shape " + shape_str(x.shape()) +
                " does not fit: expected (batch, channels, height, width)");
  }
}

// An output side of (in + 2·pad − window) / stride + 1, or an Error naming the layer.
void require_window(const Block& layer, const NDArray& x, nd::Size2 window, nd::Size2 pad) {
  for (int d = 0; d < 2; ++d) {
    if (x.shape()[2 + d] + 2 * pad[d] < window[d]) {
      throw Error(layer.str() + ": input of shape " + shape_str(x.shape()) + " is smaller than the " +
                  size2(window) + " window (padding " + size2(pad) + ")");
    }
  }
}

}  // namespace

Conv2D::Conv2D(std::size_t channels, nd::Size2 kernel_size, nd::Size2 strides, nd::Size2 padding,
               const std::string& activation, bool use_bias, std::size_t in_channels,
               std::shared_ptr<const Initializer> weight_init,
               std::shared_ptr<const Initializer> bias_init)
    : channels_(channels), kernel_(kernel_size), strides_(strides), padding_(padding),
      activation_(activation) {
  if (channels == 0 || kernel_size[0] == 0 || kernel_size[1] == 0 || strides[0] == 0 ||
      strides[1] == 0) {
    throw Error("Conv2D: channels, kernel_size and strides must be positive");
  }
  if (!activation.empty()) check_activation(activation, "Conv2D");
  weight_ = register_parameter(std::make_shared<Parameter>(
      "weight", Shape{channels, in_channels, kernel_size[0], kernel_size[1]}, GradReq::write,
      std::move(weight_init)));
  if (use_bias) {
    bias_ = register_parameter(std::make_shared<Parameter>(
        "bias", Shape{channels}, GradReq::write,
        bias_init ? std::move(bias_init) : std::make_shared<const Initializer>(init::Zero())));
  }
}

std::string Conv2D::str() const {
  std::string s = "Conv2D(channels=" + std::to_string(channels_) +
                  ", in_channels=" + std::to_string(weight_->shape()[1]) +
                  ", kernel_size=" + size2(kernel_);
  if (strides_ != nd::Size2{1, 1}) s += ", strides=" + size2(strides_);
  if (padding_ != nd::Size2{0, 0}) s += ", padding=" + size2(padding_);
  if (!activation_.empty()) s += ", activation=" + activation_;
  return s + ")";
}

NDArray Conv2D::forward(const NDArray& x) {
  require_nchw(*this, x);
  const std::size_t expected = weight_->shape()[1];
  if (expected != 0 && x.shape()[1] != expected) {
    throw Error(str() + ": input of shape " + shape_str(x.shape()) +
                " does not fit the weight of shape " + shape_str(weight_->shape()) + ": expected " +
                std::to_string(expected) + " channels");
  }
  require_window(*this, x, kernel_, padding_);
  weight_->set_shape({channels_, x.shape()[1], kernel_[0], kernel_[1]});
  const NDArray& w = weight_->data();
  const NDArray b = bias_ ? bias_->data() : NDArray();
  // relu fused into the convolution's op on the CPU (one op and one tape entry fewer).
  if (activation_ == "relu") return nd::convolution_relu(x, w, b, strides_, padding_);
  const NDArray y = nd::convolution(x, w, b, strides_, padding_);
  return activation_.empty() ? y : activate(activation_, y);
}

MaxPool2D::MaxPool2D(nd::Size2 pool_size, nd::Size2 strides, nd::Size2 padding)
    : MaxPool2D(pool_size, strides, padding, nd::PoolType::max, false) {}

MaxPool2D::MaxPool2D(nd::Size2 pool_size, nd::Size2 strides, nd::Size2 padding,
                     nd::PoolType type, bool global)
    : pool_(pool_size), strides_(strides == nd::Size2{0, 0} ? pool_size : strides),
      padding_(padding), type_(type), global_(global) {
  if (pool_[0] == 0 || pool_[1] == 0 || strides_[0] == 0 || strides_[1] == 0) {
    throw Error("pooling: pool_size and strides must be positive");
  }
  if (padding_[0] >= pool_[0] || padding_[1] >= pool_[1]) {
    throw Error("pooling: padding " + size2(padding_) + " must be smaller than pool_size " +
                size2(pool_));
  }
}

std::string MaxPool2D::str() const {
  if (global_) return "GlobalAvgPool2D";
  return std::string(type_ == nd::PoolType::max ? "MaxPool2D" : "AvgPool2D") +
         "(pool_size=" + size2(pool_) + ", strides=" + size2(strides_) + ")";
}

NDArray MaxPool2D::forward(const NDArray& x) {
  require_nchw(*this, x);
  if (!global_) require_window(*this, x, pool_, padding_);
  return nd::pooling(x, pool_, strides_, padding_, type_, global_);
}

BatchNorm::BatchNorm(float momentum, float epsilon, bool center, bool scale,
                     std::size_t in_channels)
    : momentum_(momentum), epsilon_(epsilon), scale_(scale) {
  if (!(momentum >= 0.0f && momentum <= 1.0f) || !(epsilon > 0.0f && std::isfinite(epsilon))) {
    throw Error("BatchNorm: momentum " + fmt(momentum) + " must be in [0, 1] and epsilon " +
                fmt(epsilon) + " positive");
  }
  auto fixed = [](Initializer i) { return std::make_shared<const Initializer>(i); };
  gamma_ = register_parameter(std::make_shared<Parameter>(
      "gamma", Shape{in_channels}, scale ? GradReq::write : GradReq::null, fixed(init::One())));
  beta_ = register_parameter(std::make_shared<Parameter>(
      "beta", Shape{in_channels}, center ? GradReq::write : GradReq::null, fixed(init::Zero())));
  running_mean_ = register_parameter(std::make_shared<Parameter>(
      "running_mean", Shape{in_channels}, GradReq::null, fixed(init::Zero())));
  running_var_ = register_parameter(std::make_shared<Parameter>(
      "running_var", Shape{in_channels}, GradReq::null, fixed(init::One())));
}

std::string BatchNorm::str() const {
  return "BatchNorm(in_channels=" + std::to_string(gamma_->shape()[0]) + ")";
}

NDArray BatchNorm::forward(const NDArray& x) {
  if (!x.defined()) throw Error(str() + ": the input is a null array");
  if (x.ndim() < 2) {
    throw Error(str() + ": input of shape " + shape_str(x.shape()) +
                " does not fit: expected (batch, channels, ...)");
  }
  const std::size_t expected = gamma_->shape()[0];
  if (expected != 0 && x.shape()[1] != expected) {
    throw Error(str() + ": input of shape " + shape_str(x.shape()) + " does not fit: expected " +
                std::to_string(expected) + " channels");
  }
  const Shape c{x.shape()[1]};
  for (const auto& p : {gamma_, beta_, running_mean_, running_var_}) p->set_shape(c);
  NDArray mean = running_mean_->data(), var = running_var_->data();
  return nd::batch_norm(x, gamma_->data(), beta_->data(), mean, var, epsilon_, momentum_,
                        autograd::is_training(), !scale_);
}

// ---- Losses --------------------------------------------------------------------------------

NDArray L2Loss::operator()(const NDArray& pred, const NDArray& label) const {
  if (!pred.defined() || !label.defined()) throw Error("L2Loss: a null array");
  if (pred.ndim() == 0 || pred.size() != label.size()) {
    throw Error("L2Loss: prediction of shape " + shape_str(pred.shape()) +
                " and label of shape " + shape_str(label.shape()) + " do not fit");
  }
  const std::size_t m = pred.shape()[0];
  const NDArray sq = nd::square(pred - label.reshape(pred.shape()));
  const NDArray rows = pred.ndim() == 1 ? sq : nd::mean(sq.reshape({m, product(pred.shape(), 1)}), 1);
  return rows * (weight_ / 2.0f);
}

NDArray SoftmaxCrossEntropyLoss::operator()(const NDArray& pred, const NDArray& label) const {
  const char* who = "SoftmaxCrossEntropyLoss";
  if (!pred.defined() || !label.defined()) throw Error(std::string(who) + ": a null array");
  if (pred.ndim() != 2 || label.ndim() != 1 || label.shape()[0] != pred.shape()[0] ||
      pred.shape()[1] == 0) {
    throw Error(std::string(who) + ": prediction of shape " + shape_str(pred.shape()) +
                " and label of shape " + shape_str(label.shape()) +
                " do not fit: expected (batch, classes) and (batch,)");
  }
  return nd::softmax_cross_entropy_rows(pred, label, from_logits_);
}

// ---- Trainer -------------------------------------------------------------------------------

Trainer::Trainer(ParameterDict params, const std::string& optimizer,
                 const std::map<std::string, double>& options)
    : params_(std::move(params)) {
  std::vector<std::string> keys{"learning_rate", "wd", "clip_gradient"};
  if (optimizer == "sgd") {
    kind_ = Kind::sgd;
    keys.push_back("momentum");
  } else if (optimizer == "adam") {
    kind_ = Kind::adam;
    lr_ = 0.001f;
    keys.insert(keys.end(), {"beta1", "beta2", "epsilon"});
  } else if (optimizer == "adadelta") {
    kind_ = Kind::adadelta;
    epsilon_ = 1e-5f;
    keys.insert(keys.end(), {"rho", "epsilon"});
  } else if (optimizer == "rmsprop") {
    kind_ = Kind::rmsprop;
    lr_ = 0.001f;
    keys.insert(keys.end(), {"gamma1", "gamma2", "epsilon", "centered", "clip_weights"});
  } else {
    throw Error("Trainer: unknown optimizer '" + optimizer +
                "' (expected sgd, adam, adadelta or rmsprop)");
  }
  for (const auto& [key, value] : options) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string known;
      for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
      throw Error("Trainer: unknown option '" + key + "' of optimizer " + optimizer +
                  " (expected " + known + ")");
    }
    const auto v = static_cast<float>(value);
    if (key == "learning_rate") {
      set_learning_rate(v);
    } else if (key == "wd") {
      if (!finite_nonnegative(value)) {
        throw Error("Trainer: wd " + fmt(v) + " is not a finite number >= 0");
      }
      wd_ = v;
    } else if (key == "clip_gradient") {
      clip_gradient_ = v;
    } else if (key == "momentum") {
      momentum_ = v;
    } else if (key == "beta1") {
      beta1_ = v;
    } else if (key == "beta2") {
      beta2_ = v;
    } else if (key == "epsilon") {
      epsilon_ = v;
    } else if (key == "rho") {
      rho_ = v;
    } else if (key == "gamma1") {
      gamma1_ = v;
    } else if (key == "gamma2") {
      gamma2_ = v;
    } else if (key == "centered") {
      centered_ = value != 0.0;
    } else {
      clip_weights_ = v;
    }
  }
  states_.resize(params_.size());
  updates_.resize(params_.size());
  // The states of the parameters initialized by now are made here rather than at their first
  // update: a step recorded by nd::record would otherwise zero them again at each replay.
  std::size_t i = 0;
  for (const auto& [name, p] : params_) {
    if (p->initialized() && p->grad_req() != GradReq::null) make_states(i, p->data());
    ++i;
  }
}

void Trainer::make_states(std::size_t k, const NDArray& w) {
  const std::size_t needed = kind_ == Kind::sgd       ? (momentum_ != 0.0f ? 1 : 0)
                             : kind_ == Kind::rmsprop ? (centered_ ? 3 : 1)
                                                      : 2;
  while (states_[k].size() < needed) states_[k].push_back(nd::zeros_like(w));
}

void Trainer::set_learning_rate(float lr) {
  if (!finite_nonnegative(lr)) {
    throw Error("Trainer: learning rate " + fmt(lr) + " is not a finite number >= 0");
  }
  lr_ = lr;
}

void Trainer::step(std::size_t batch_size) {
  if (batch_size == 0) throw Error("Trainer::step: batch_size must be positive");
  const float rescale = 1.0f / static_cast<float>(batch_size);
  std::size_t i = 0;
  for (const auto& [name, p] : params_) {
    const std::size_t k = i++;
    if (p->grad_req() == GradReq::null) continue;
    NDArray w = p->data();
    const NDArray g = p->grad();
    make_states(k, w);
    std::vector<NDArray>& st = states_[k];
    const std::uint64_t t = ++updates_[k];
    switch (kind_) {
      case Kind::sgd: {
        const nd::SgdOptions o{.lr = lr_, .momentum = momentum_, .wd = wd_,
                               .rescale_grad = rescale, .clip_gradient = clip_gradient_};
        if (momentum_ != 0.0f) {
          nd::sgd_mom_update(w, g, st[0], o);
        } else {
          nd::sgd_update(w, g, o);
        }
        break;
      }
      case Kind::adam: {
        const double td = static_cast<double>(t);
        const auto lr = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(beta2_, td)) /
                                           (1.0 - std::pow(beta1_, td)));
        nd::adam_update(w, g, st[0], st[1],
                        {.lr = lr, .beta1 = beta1_, .beta2 = beta2_, .epsilon = epsilon_,
                         .wd = wd_, .rescale_grad = rescale, .clip_gradient = clip_gradient_});
        break;
      }
      case Kind::adadelta:
        nd::adadelta_update(w, g, st[0], st[1],
                            {.rho = rho_, .epsilon = epsilon_, .wd = wd_, .rescale_grad = rescale,
                             .clip_gradient = clip_gradient_});
        break;
      case Kind::rmsprop: {
        const nd::RmsPropOptions o{.lr = lr_, .gamma1 = gamma1_, .gamma2 = gamma2_,
                                   .epsilon = epsilon_, .wd = wd_, .rescale_grad = rescale,
                                   .clip_gradient = clip_gradient_, .clip_weights = clip_weights_,
                                   .centered = centered_};
        if (centered_) {
          nd::rmspropalex_update(w, g, st[0], st[1], st[2], o);
        } else {
          nd::rmsprop_update(w, g, st[0], o);
        }
        break;
      }
    }
  }
}

}  // namespace depengine::gluon
