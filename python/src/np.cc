// depengine.np and depengine.npx functions: mxnet.np names and keyword arguments
// (ctx= / device=, size=, dtype=), each a bound C++ function that pushes one op.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <climits>
#include <optional>

#include "binding.h"
#include "depengine/ndarray_ops.h"

namespace depengine::python {
namespace {

Engine& creation_engine() {
  Engine& e = current_engine();
  register_engine(&e);
  return e;
}

// NumPy's functions call the array's method with out=None (numpy.sum(a) calls a.sum(axis=None,
// dtype=None, out=None)): accepted; an output array is not.
void check_no_out(nb::handle out, const char* fn) {
  if (!out.is_none()) {
    throw nb::type_error((std::string(fn) + ": out= is not supported (the result is a new "
                          "array)").c_str());
  }
}

// A reduction's axis: None (all elements), an int, or a tuple or list of ints (one op over
// them all; not for argmax); keepdims puts the reduced axes back.
template <class All, class Axis, class Axes>
NDArray reduce(const NDArray& a, nb::handle axis, bool keepdims, const char* fn, All all,
               Axis along, Axes over) {
  if (axis.is_none()) {
    NDArray r = frontend_call(a.engine(), [&] { return all(a); });
    if (!keepdims) return r;
    return r.reshape(Shape(a.ndim(), 1));
  }
  if (PyTuple_Check(axis.ptr()) || PyList_Check(axis.ptr())) {
    std::vector<int> axes;
    const long nd = static_cast<long>(a.ndim());
    for (nb::handle h : nb::borrow<nb::sequence>(axis)) {
      axes.push_back(static_cast<int>(int_arg(h, fn, "axis", -nd, nd - 1)));
    }
    NDArray r = frontend_call(a.engine(), [&] { return over(a, axes); });
    if (!keepdims) return r;
    Shape s = a.shape();
    for (int ax : axes) s[static_cast<std::size_t>(ax < 0 ? ax + nd : ax)] = 1;
    return r.reshape(s);
  }
  if (!PyLong_Check(axis.ptr())) {
    throw nb::type_error((std::string(fn) + ": axis must be None, an int or a tuple of ints, got " +
                          Py_TYPE(axis.ptr())->tp_name).c_str());
  }
  const long long ax = int_value(axis);
  const long nd = static_cast<long>(a.ndim());
  if (ax < -nd || ax >= nd) {
    throw nb::value_error((std::string(fn) + ": axis " + std::to_string(ax) +
                           " is out of bounds for an array of dimension " + std::to_string(nd)).c_str());
  }
  NDArray r = frontend_call(a.engine(), [&] { return along(a, static_cast<int>(ax)); });
  if (!keepdims) return r;
  Shape s = a.shape();
  s[static_cast<std::size_t>(ax < 0 ? ax + nd : ax)] = 1;
  return r.reshape(s);
}

#define DEPENGINE_REDUCTION(name, over)                                                    \
  [](nb::handle a, nb::handle axis, nb::handle dtype, nb::handle out, nb::handle keepdims) { \
    check_dtype(dtype, #name);                                                             \
    check_no_out(out, #name);                                                              \
    return reduce(                                                                         \
        as_array(a, nullptr, #name), axis, bool_arg(keepdims, #name, "keepdims"), #name,    \
        [](const NDArray& x) { return nd::name(x); },                                      \
        [](const NDArray& x, int ax) { return nd::name(x, ax); }, over);                   \
  }
#define DEPENGINE_OVER(name) [](const NDArray& x, const std::vector<int>& axes) { return nd::name(x, axes); }

// f(x) for an ndarray, or for data that np.array takes.
template <NDArray (*f)(const NDArray&)>
NDArray unary(nb::handle x) {
  const NDArray a = as_array(x, nullptr, "unary");
  return frontend_call(a.engine(), [&] { return f(a); });
}

// f(x, y) where either may be a scalar or data; at least one operand's array decides the
// engine and device.
template <NDArray (*f)(const NDArray&, const NDArray&)>
NDArray binary(nb::handle x, nb::handle y) {
  const bool xa = nb::isinstance<NDArray>(x);
  const NDArray a = xa ? nb::cast<const NDArray&>(x) : NDArray();
  const NDArray b = nb::isinstance<NDArray>(y) ? nb::cast<const NDArray&>(y)
                                               : as_array(y, xa ? &a : nullptr, "binary");
  const NDArray a2 = xa ? a : as_array(x, &b, "binary");
  return frontend_call(a2.engine(), [&] { return f(a2, b); });
}

NDArray make_random(const char* fn, nb::handle size, nb::handle dtype, nb::handle ctx,
               nb::handle device, float p0, float p1, bool normal) {
  check_dtype(dtype, fn);
  const Shape shape = size.is_none() ? Shape{} : shape_arg(size, fn);
  const Device d = device_arg(ctx, device, fn);
  return frontend_call(creation_engine(), [&] {
    return normal ? nd::random_normal(shape, p0, p1, d) : nd::random_uniform(shape, p0, p1, d);
  });
}

}  // namespace

void bind_np(nb::module_& np, nb::module_& npx) {
  using namespace nb::literals;

  // Creation.
  np.def("zeros",
         [](nb::handle shape, nb::handle dtype, const std::string& order, nb::handle ctx, nb::handle device) {
           check_dtype(dtype, "zeros");
           if (order != "C") throw nb::value_error("zeros: only order='C' is supported");
           const Shape s = shape_arg(shape, "zeros");
           const Device d = device_arg(ctx, device, "zeros");
           return frontend_call(creation_engine(), [&] { return nd::zeros(s, d); });
         },
         "shape"_a, "dtype"_a = nb::none(), "order"_a = "C", nb::kw_only(), "ctx"_a = nb::none(),
         "device"_a = nb::none());
  np.def("ones",
         [](nb::handle shape, nb::handle dtype, const std::string& order, nb::handle ctx, nb::handle device) {
           check_dtype(dtype, "ones");
           if (order != "C") throw nb::value_error("ones: only order='C' is supported");
           const Shape s = shape_arg(shape, "ones");
           const Device d = device_arg(ctx, device, "ones");
           return frontend_call(creation_engine(), [&] { return nd::ones(s, d); });
         },
         "shape"_a, "dtype"_a = nb::none(), "order"_a = "C", nb::kw_only(), "ctx"_a = nb::none(),
         "device"_a = nb::none());
  np.def("full",
         [](nb::handle shape, nb::handle fill_value, nb::handle dtype, nb::handle ctx, nb::handle device) {
           check_dtype(dtype, "full");
           float v;
           if (!scalar_value(fill_value, v)) throw nb::type_error("full: fill_value must be a number");
           const Shape s = shape_arg(shape, "full");
           const Device d = device_arg(ctx, device, "full");
           return frontend_call(creation_engine(), [&] { return nd::full(s, v, d); });
         },
         "shape"_a, "fill_value"_a, "dtype"_a = nb::none(), nb::kw_only(), "ctx"_a = nb::none(),
         "device"_a = nb::none());
  np.def("arange",
         [](nb::handle start_arg, nb::handle stop_arg, nb::handle step_arg, nb::handle dtype,
            nb::handle ctx, nb::handle device) {
           check_dtype(dtype, "arange");
           const Device d = device_arg(ctx, device, "arange");
           const double start = number_arg(start_arg, "arange", "start");
           const double step = number_arg(step_arg, "arange", "step");
           const std::optional<double> stop =
               stop_arg.is_none() ? std::nullopt
                                  : std::optional<double>(number_arg(stop_arg, "arange", "stop"));
           const double lo = stop ? start : 0.0, hi = stop ? *stop : start;
           return frontend_call(creation_engine(), [&] { return nd::arange(lo, hi, step, d); });
         },
         "start"_a.none(), "stop"_a.none() = nb::none(), "step"_a.none() = 1.0,
         "dtype"_a = nb::none(), nb::kw_only(),
         "ctx"_a = nb::none(), "device"_a = nb::none());
  np.def("array",
         [](nb::handle object, nb::handle dtype, nb::handle ctx, nb::handle device) {
           check_dtype(dtype, "array");
           return array_from(object, device_arg(ctx, device, "array"), "array");
         },
         "object"_a.none(), "dtype"_a = nb::none(), nb::kw_only(), "ctx"_a = nb::none(),
         "device"_a = nb::none());

  // Elementwise.
  np.def("exp", &unary<nd::exp>, "x"_a);
  np.def("log", &unary<nd::log>, "x"_a);
  np.def("abs", &unary<nd::abs>, "x"_a);
  np.def("absolute", &unary<nd::abs>, "x"_a);
  np.def("sqrt", &unary<nd::sqrt>, "x"_a);
  np.def("square", &unary<nd::square>, "x"_a);
  np.def("tanh", &unary<nd::tanh>, "x"_a);
  np.def("negative", &unary<nd::negative>, "x"_a);
  np.def("copy", &unary<nd::copy>, "a"_a);
  np.def("transpose", &unary<nd::transpose>, "a"_a);
  np.def("add", &binary<nd::add>, "x1"_a, "x2"_a);
  np.def("subtract", &binary<nd::subtract>, "x1"_a, "x2"_a);
  np.def("multiply", &binary<nd::multiply>, "x1"_a, "x2"_a);
  np.def("divide", &binary<nd::divide>, "x1"_a, "x2"_a);
  np.def("true_divide", &binary<nd::divide>, "x1"_a, "x2"_a);
  np.def("power", &binary<nd::pow>, "x1"_a, "x2"_a);
  np.def("maximum", &binary<nd::maximum>, "x1"_a, "x2"_a);
  np.def("minimum", &binary<nd::minimum>, "x1"_a, "x2"_a);
  np.def("dot", &binary<nd::dot>, "a"_a, "b"_a);
  np.def("matmul", &binary<nd::dot>, "a"_a, "b"_a);
  // MXNet's np.reshape(a, newshape) and NumPy 2.1's np.reshape(a, shape=...).
  np.def("reshape", [](nb::handle a, nb::handle shape, nb::handle order, nb::handle newshape) {
    if (!shape.is_none() && !newshape.is_none()) {
      throw nb::type_error("reshape: give the shape once (shape= or newshape=)");
    }
    const NDArray x = as_array(a, nullptr, "reshape");
    return nb::cast(x).attr("reshape")("shape"_a = shape.is_none() ? newshape : shape,
                                       "order"_a = order);
  }, "a"_a.none(), "shape"_a.none() = nb::none(), "order"_a.none() = "C", nb::kw_only(),
     "newshape"_a.none() = nb::none());

  // Reductions, as functions and as methods.
  nb::object cls = np.attr("ndarray");
  auto reduction = [&](const char* name, auto fn) {
    np.def(name, fn, "a"_a.none(), "axis"_a.none() = nb::none(), "dtype"_a.none() = nb::none(),
           "out"_a.none() = nb::none(), "keepdims"_a.none() = false);
    cls.attr(name) = nb::cpp_function(fn, nb::scope(cls), nb::is_method(), nb::name(name),
                                      "axis"_a.none() = nb::none(), "dtype"_a.none() = nb::none(),
                                      "out"_a.none() = nb::none(), "keepdims"_a.none() = false);
  };
  reduction("sum", DEPENGINE_REDUCTION(sum, DEPENGINE_OVER(sum)));
  reduction("mean", DEPENGINE_REDUCTION(mean, DEPENGINE_OVER(mean)));
  reduction("max", DEPENGINE_REDUCTION(max, DEPENGINE_OVER(max)));
  reduction("argmax", DEPENGINE_REDUCTION(argmax, [](const NDArray&, const std::vector<int>&) -> NDArray {
              throw Error("argmax: axis must be None or an int, not a tuple");
            }));
  np.attr("amax") = np.attr("max");

  // Random.
  nb::module_ rnd = np.def_submodule("random", "mxnet.np.random");
  rnd.def("normal",
             [](nb::handle loc, nb::handle scale, nb::handle size, nb::handle dtype, nb::handle ctx,
                nb::handle device) {
               return make_random("normal", size, dtype, ctx, device,
                                  static_cast<float>(number_arg(loc, "normal", "loc")),
                                  static_cast<float>(number_arg(scale, "normal", "scale")), true);
             },
             "loc"_a.none() = 0.0f, "scale"_a.none() = 1.0f, "size"_a = nb::none(), "dtype"_a = nb::none(),
             nb::kw_only(), "ctx"_a = nb::none(), "device"_a = nb::none());
  rnd.def("uniform",
             [](nb::handle low, nb::handle high, nb::handle size, nb::handle dtype, nb::handle ctx,
                nb::handle device) {
               return make_random("uniform", size, dtype, ctx, device,
                                  static_cast<float>(number_arg(low, "uniform", "low")),
                                  static_cast<float>(number_arg(high, "uniform", "high")), false);
             },
             "low"_a.none() = 0.0f, "high"_a.none() = 1.0f, "size"_a = nb::none(), "dtype"_a = nb::none(),
             nb::kw_only(), "ctx"_a = nb::none(), "device"_a = nb::none());
  auto seed = [](nb::handle arg) {
    const long long s = int_arg(arg, "seed", "seed", 0, LLONG_MAX);
    frontend_call(creation_engine(), [&] { nd::seed(static_cast<std::uint64_t>(s)); return 0; });
  };
  rnd.def("seed", seed, "seed"_a.none());
  np.attr("float32") = nb::module_::import_("numpy").attr("float32");

  // npx.
  npx.def("waitall",
          [] {
            python::wait_all(creation_engine());
          },
          "Waits for every op pushed to the current engine; raises the first failure.");
  npx.def("set_np", [](nb::args, nb::kwargs) {}, "Accepted for MXNet code; depengine.np is always on.");
  npx.def("reset_np", [] {});
  npx.def("cpu", [](nb::handle i) {
    int_arg(i, "cpu", "device_id", 0, 0);  // only cpu(0) exists
    return Device::cpu();
  }, "device_id"_a.none() = 0);
  npx.def("gpu", [](nb::handle i) {
    return Device::gpu(static_cast<int>(int_arg(i, "gpu", "device_id", 0, INT_MAX)));
  }, "device_id"_a.none() = 0);
  npx.def("num_gpus", [] {
    const int sim = current_engine().sim_gpus();
    return sim > 0 ? sim : Device::gpu_count();
  }, "GPUs the current engine can use: its simulated GPUs, else the CUDA devices.");
  npx.def("seed", seed, "seed"_a.none());
  npx.def("relu", &unary<nd::relu>, "data"_a);
  npx.def("sigmoid", &unary<nd::sigmoid>, "data"_a);
}

}  // namespace depengine::python
