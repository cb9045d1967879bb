// depengine.npx's CNN operators, with mxnet.npx 1.9's names, keywords and defaults:
// convolution (and the fused convolution_relu), pooling, softmax, log_softmax and batch_norm. Each converts its arguments and calls one nd:: op of
// depengine/nn.h. Arguments MXNet takes that depengine does not implement (dilation, groups,
// other layouts, the "full" pooling convention, a softmax temperature) raise ValueError
// instead of being silently ignored; cuDNN and workspace tuning hints are accepted.
#include <nanobind/stl/string.h>

#include <string>

#include "binding.h"
#include "depengine/autograd.h"
#include "depengine/nn.h"

namespace depengine::python {
namespace {

using namespace nb::literals;

std::string str_of(nb::handle h) { return nb::cast<std::string>(nb::str(h)); }

// MXNet's hints for cuDNN and workspace sizing (and an op name) are accepted; any other
// keyword is a TypeError, as for a Python function.
void check_kwargs(const nb::kwargs& kwargs, const char* fn) {
  for (auto [key, value] : kwargs) {
    const std::string k = str_of(key);
    if (k != "cudnn_tune" && k != "cudnn_off" && k != "workspace" && k != "name") {
      throw nb::type_error((std::string(fn) + "() got an unexpected keyword argument '" + k + "'").c_str());
    }
  }
}

// None (the default), an int (both sides) or a sequence of two ints, each in [lo, ∞).
nd::Size2 pair_arg(nb::handle h, const char* fn, const char* name, nd::Size2 dflt, long long lo) {
  if (h.is_none()) return dflt;
  const std::string what = std::string(name);
  if (PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
    const auto v = static_cast<std::size_t>(int_arg(h, fn, name, lo, LLONG_MAX));
    return {v, v};
  }
  if (!PySequence_Check(h.ptr()) || nb::len(h) != 2) {
    throw nb::value_error((std::string(fn) + ": " + what +
                           " must be a pair of ints (layout NCHW: 2-d windows only), got " +
                           str_of(h)).c_str());
  }
  return {static_cast<std::size_t>(int_arg(h[0], fn, name, lo, LLONG_MAX)),
          static_cast<std::size_t>(int_arg(h[1], fn, name, lo, LLONG_MAX))};
}

void check_layout(nb::handle layout, const char* fn) {
  if (!layout.is_none() && str_of(layout) != "NCHW") {
    throw nb::value_error((std::string(fn) + ": layout " + str_of(layout) +
                           " is not supported (only 'NCHW')").c_str());
  }
}

std::string pair_str(nd::Size2 p) {
  return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ")";
}

// npx.convolution (relu false) and npx.convolution_relu (relu true: nd::convolution_relu, the
// convolution, bias and ReLU in one op and one tape entry, bit for bit relu(convolution(...))).
template <bool relu>
NDArray convolution(nb::handle data, nb::handle weight, nb::handle bias, nb::handle kernel,
                    nb::handle stride, nb::handle dilate, nb::handle pad, nb::handle num_filter,
                    nb::handle num_group, bool no_bias, nb::handle layout, nb::kwargs kwargs) {
  const char* fn = relu ? "convolution_relu" : "convolution";
  check_kwargs(kwargs, fn);
  check_layout(layout, fn);
  const NDArray x = as_array(data, nullptr, fn);
  const NDArray w = as_array(weight, &x, fn);
  const NDArray b = no_bias || bias.is_none() ? NDArray() : as_array(bias, &x, fn);
  if (pair_arg(dilate, fn, "dilate", {1, 1}, 1) != nd::Size2{1, 1}) {
    throw nb::value_error((std::string(fn) + ": dilate other than (1, 1) is not supported").c_str());
  }
  if (!num_group.is_none() && int_arg(num_group, fn, "num_group", 1, LLONG_MAX) != 1) {
    throw nb::value_error((std::string(fn) + ": num_group other than 1 is not supported").c_str());
  }
  if (w.ndim() == 4) {
    const nd::Size2 k = pair_arg(kernel, fn, "kernel", {w.shape()[2], w.shape()[3]}, 1);
    if (k != nd::Size2{w.shape()[2], w.shape()[3]}) {
      throw nb::value_error((std::string(fn) + ": kernel " + pair_str(k) + " does not match weight " +
                             shape_str(w.shape())).c_str());
    }
    if (!num_filter.is_none() &&
        static_cast<std::size_t>(int_arg(num_filter, fn, "num_filter", 1, LLONG_MAX)) != w.shape()[0]) {
      throw nb::value_error((std::string(fn) + ": num_filter " + str_of(num_filter) +
                             " does not match weight " + shape_str(w.shape())).c_str());
    }
  }
  const nd::Size2 s = pair_arg(stride, fn, "stride", {1, 1}, 1);
  const nd::Size2 p = pair_arg(pad, fn, "pad", {0, 0}, 0);
  return frontend_call(x.engine(), [&] {
    return relu ? nd::convolution_relu(x, w, b, s, p) : nd::convolution(x, w, b, s, p);
  });
}

NDArray pooling(nb::handle data, nb::handle kernel, const std::string& pool_type,
                bool global_pool, const std::string& pooling_convention, nb::handle stride,
                nb::handle pad, bool count_include_pad, nb::handle layout, nb::kwargs kwargs) {
  const char* fn = "pooling";
  check_kwargs(kwargs, fn);
  check_layout(layout, fn);
  if (pool_type != "max" && pool_type != "avg") {
    throw nb::value_error(("pooling: pool_type '" + pool_type +
                           "' is not supported ('max' or 'avg')").c_str());
  }
  if (pooling_convention != "valid") {
    throw nb::value_error(("pooling: pooling_convention '" + pooling_convention +
                           "' is not supported (only 'valid')").c_str());
  }
  const NDArray x = as_array(data, nullptr, fn);
  if (!global_pool && kernel.is_none()) throw nb::value_error("pooling: kernel is required unless global_pool");
  const nd::Size2 k = global_pool ? nd::Size2{1, 1} : pair_arg(kernel, fn, "kernel", {1, 1}, 1);
  const nd::Size2 s = pair_arg(stride, fn, "stride", {1, 1}, 1);
  const nd::Size2 p = pair_arg(pad, fn, "pad", {0, 0}, 0);
  const nd::PoolType t = pool_type == "max" ? nd::PoolType::max : nd::PoolType::avg;
  return frontend_call(x.engine(), [&] {
    return nd::pooling(x, k, s, p, t, global_pool, count_include_pad);
  });
}

template <NDArray (*f)(const NDArray&, int)>
NDArray softmax(nb::handle data, nb::handle axis, nb::handle length, nb::handle temperature,
                bool use_length, nb::handle dtype, nb::kwargs kwargs) {
  const char* fn = "softmax";
  check_kwargs(kwargs, fn);
  check_dtype(dtype, fn);
  if (use_length || !length.is_none()) {
    throw nb::value_error("softmax: length / use_length are not supported");
  }
  float t = 1.0f;
  if (!temperature.is_none() && (!scalar_value(temperature, t) || t != 1.0f)) {
    throw nb::value_error("softmax: a temperature other than 1 is not supported");
  }
  const NDArray x = as_array(data, nullptr, fn);
  const int ax = static_cast<int>(int_arg(axis, fn, "axis", INT_MIN, INT_MAX));
  return frontend_call(x.engine(), [&] { return f(x, ax); });
}

NDArray batch_norm(nb::handle x_, nb::handle gamma_, nb::handle beta_, NDArray& running_mean,
                   NDArray& running_var, float eps, float momentum, bool fix_gamma,
                   bool use_global_stats, bool output_mean_var, nb::handle axis, nb::kwargs kwargs) {
  const char* fn = "batch_norm";
  check_kwargs(kwargs, fn);
  if (output_mean_var) throw nb::value_error("batch_norm: output_mean_var=True is not supported");
  const NDArray x = as_array(x_, nullptr, fn);
  const long long ax = int_arg(axis, fn, "axis", -static_cast<long long>(x.ndim()),
                               static_cast<long long>(x.ndim()) - 1);
  if (ax != 1 && ax + static_cast<long long>(x.ndim()) != 1) {
    throw nb::value_error("batch_norm: only axis=1 (the channel axis of NCHW) is supported");
  }
  const NDArray gamma = as_array(gamma_, &x, fn), beta = as_array(beta_, &x, fn);
  // As MXNet: the batch's statistics (and an update of the running ones) in training mode
  // (autograd.record() or train_mode()), unless use_global_stats; else the running ones.
  const bool training = !use_global_stats && autograd::is_training();
  return frontend_call(x.engine(), [&] {
    return nd::batch_norm(x, gamma, beta, running_mean, running_var, eps, momentum, training,
                          fix_gamma);
  });
}

}  // namespace

void bind_np_nn(nb::module_& npx) {
  npx.def("convolution", &convolution<false>, "data"_a, "weight"_a, "bias"_a = nb::none(),
          "kernel"_a = nb::none(), "stride"_a = nb::none(), "dilate"_a = nb::none(),
          "pad"_a = nb::none(), "num_filter"_a = nb::none(), "num_group"_a = nb::none(),
          "no_bias"_a = false, "layout"_a = nb::none(), "kwargs"_a,
          "mxnet.npx.convolution: 2-d, NCHW, weight (num_filter, C, kh, kw).");
  npx.def("convolution_relu", &convolution<true>, "data"_a, "weight"_a, "bias"_a = nb::none(),
          "kernel"_a = nb::none(), "stride"_a = nb::none(), "dilate"_a = nb::none(),
          "pad"_a = nb::none(), "num_filter"_a = nb::none(), "num_group"_a = nb::none(),
          "no_bias"_a = false, "layout"_a = nb::none(), "kwargs"_a,
          "npx.relu(npx.convolution(...)) bit for bit, as one op and one tape entry on the CPU "
          "(the ReLU applied as the kernel stores each output); gluon's "
          "Conv2D(activation='relu') calls it. Not in MXNet.");
  npx.def("pooling", &pooling, "data"_a, "kernel"_a = nb::none(), "pool_type"_a = "max",
          "global_pool"_a = false, "pooling_convention"_a = "valid", "stride"_a = nb::none(),
          "pad"_a = nb::none(), "count_include_pad"_a = true, "layout"_a = nb::none(),
          "kwargs"_a, "mxnet.npx.pooling: 2-d max or avg pooling, NCHW.");
  npx.def("softmax", &softmax<nd::softmax>, "data"_a, "axis"_a = -1, "length"_a = nb::none(),
          "temperature"_a = nb::none(), "use_length"_a = false, "dtype"_a = nb::none(),
          "kwargs"_a, "mxnet.npx.softmax along `axis`.");
  npx.def("log_softmax", &softmax<nd::log_softmax>, "data"_a, "axis"_a = -1,
          "length"_a = nb::none(), "temperature"_a = nb::none(), "use_length"_a = false,
          "dtype"_a = nb::none(), "kwargs"_a, "mxnet.npx.log_softmax along `axis`.");
  npx.def("batch_norm", &batch_norm, "x"_a, "gamma"_a, "beta"_a, "running_mean"_a,
          "running_var"_a, "eps"_a = 1e-3f, "momentum"_a = 0.9f, "fix_gamma"_a = true,
          "use_global_stats"_a = false, "output_mean_var"_a = false, "axis"_a = 1, "kwargs"_a,
          "mxnet.npx.batch_norm over axis 1; in training mode it updates running_mean and "
          "running_var in place.");
}

}  // namespace depengine::python
