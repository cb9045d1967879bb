// depengine.np functions beyond np.cc's (mxnet.np names and keywords): concatenate, stack,
// zeros_like / ones_like / empty / linspace, mod / remainder / floor_divide (and %, //),
// transpose with axes, batched matmul; npx.dropout. Each is one bound C++ function that
// pushes the frontend's ops (depengine/ndarray_ops.h).
#include <nanobind/stl/string.h>

#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "binding.h"
#include "depengine/autograd.h"
#include "depengine/ndarray_ops.h"

namespace depengine::python {
namespace {

using namespace nb::literals;

std::vector<NDArray> arrays_arg(nb::handle seq, const char* fn) {
  if (nb::isinstance<NDArray>(seq) || !PySequence_Check(seq.ptr())) {
    throw nb::type_error((std::string(fn) + ": expects a sequence (list or tuple) of arrays").c_str());
  }
  NDArray first;  // the engine and device for the elements that are data, not arrays
  for (nb::handle h : nb::borrow<nb::sequence>(seq)) {
    if (nb::isinstance<NDArray>(h)) {
      first = nb::cast<NDArray>(h);
      break;
    }
  }
  std::vector<NDArray> out;
  for (nb::handle h : nb::borrow<nb::sequence>(seq)) {
    out.push_back(nb::isinstance<NDArray>(h) ? nb::cast<NDArray>(h)
                                             : as_array(h, first.defined() ? &first : nullptr, fn));
  }
  if (out.empty()) throw nb::value_error((std::string(fn) + ": need at least one array").c_str());
  return out;
}

int axis_arg(nb::handle axis, const char* fn) {
  return static_cast<int>(int_arg(axis, fn, "axis", -static_cast<long long>(kMaxNdim) - 1,
                                  static_cast<long long>(kMaxNdim)));
}

void check_no_out(nb::handle out, const char* fn) {
  if (!out.is_none()) {
    throw nb::type_error((std::string(fn) + ": out= is not supported (the result is a new "
                          "array)").c_str());
  }
}

Engine& creation_engine() {
  Engine& e = current_engine();
  register_engine(&e);
  return e;
}

enum class Div { mod, floor };

// x mod y / x // y with either operand a scalar or data.
NDArray divide_op(Div op, nb::handle x, nb::handle y) {
  float s;
  const bool xa = nb::isinstance<NDArray>(x), ya = nb::isinstance<NDArray>(y);
  if (xa && !ya && scalar_value(y, s)) {
    const NDArray& a = nb::cast<const NDArray&>(x);
    return frontend_call(a.engine(), [&] {
      return op == Div::mod ? nd::mod(a, s) : nd::floor_divide(a, s);
    });
  }
  if (ya && !xa && scalar_value(x, s)) {
    const NDArray& b = nb::cast<const NDArray&>(y);
    return frontend_call(b.engine(), [&] {
      return op == Div::mod ? nd::mod(s, b) : nd::floor_divide(s, b);
    });
  }
  const NDArray a = xa ? nb::cast<NDArray>(x) : NDArray();
  const NDArray b = ya ? nb::cast<NDArray>(y) : as_array(y, xa ? &a : nullptr, "mod");
  const NDArray a2 = xa ? a : as_array(x, &b, "mod");
  return frontend_call(a2.engine(), [&] {
    return op == Div::mod ? nd::mod(a2, b) : nd::floor_divide(a2, b);
  });
}

template <Div op, bool reflected>
nb::object divide_method(const NDArray& a, nb::handle other) {
  float s;
  if (!nb::isinstance<NDArray>(other) && !scalar_value(other, s) && !PyList_Check(other.ptr()) &&
      !PyTuple_Check(other.ptr()) && !PyObject_HasAttrString(other.ptr(), "__array_interface__")) {
    return nb::borrow(Py_NotImplemented);
  }
  nb::object self = nb::cast(a);
  return nb::cast(reflected ? divide_op(op, other, self) : divide_op(op, self, other));
}

NDArray transpose_axes(const NDArray& a, nb::handle axes) {
  if (axes.is_none()) return frontend_call(a.engine(), [&] { return nd::transpose(a); });
  std::vector<int> perm;
  for (nb::handle h : nb::borrow<nb::sequence>(axes)) perm.push_back(axis_arg(h, "transpose"));
  return frontend_call(a.engine(), [&] { return nd::transpose(a, perm); });
}

}  // namespace

void bind_np_more(nb::module_& np, nb::module_& npx) {
  np.def("concatenate",
         [](nb::handle seq, nb::handle axis, nb::handle out) {
           check_no_out(out, "concatenate");
           std::vector<NDArray> arrays = arrays_arg(seq, "concatenate");
           const NDArray& a0 = arrays[0];
           if (axis.is_none()) {  // numpy's: the arrays flattened first
             for (NDArray& a : arrays) a = a.reshape({a.size()});
             return frontend_call(a0.engine(), [&] { return nd::concatenate(arrays, 0); });
           }
           const int ax = axis_arg(axis, "concatenate");
           return frontend_call(a0.engine(), [&] { return nd::concatenate(arrays, ax); });
         },
         "seq"_a, "axis"_a.none() = 0, "out"_a.none() = nb::none());
  np.def("stack",
         [](nb::handle seq, nb::handle axis, nb::handle out) {
           check_no_out(out, "stack");
           const std::vector<NDArray> arrays = arrays_arg(seq, "stack");
           const int ax = axis_arg(axis, "stack");
           return frontend_call(arrays[0].engine(), [&] { return nd::stack(arrays, ax); });
         },
         "arrays"_a, "axis"_a = 0, "out"_a.none() = nb::none());
  np.def("zeros_like",
         [](const NDArray& a, nb::handle dtype) {
           check_dtype(dtype, "zeros_like");
           return frontend_call(a.engine(), [&] { return nd::zeros_like(a); });
         },
         "a"_a, "dtype"_a = nb::none());
  np.def("ones_like",
         [](const NDArray& a, nb::handle dtype) {
           check_dtype(dtype, "ones_like");
           return frontend_call(a.engine(), [&] { return nd::ones_like(a); });
         },
         "a"_a, "dtype"_a = nb::none());
  np.def("empty",
         [](nb::handle shape, nb::handle dtype, const std::string& order, nb::handle ctx,
            nb::handle device) {
           check_dtype(dtype, "empty");
           if (order != "C") throw nb::value_error("empty: only order='C' is supported");
           const Shape s = shape_arg(shape, "empty");
           const Device d = device_arg(ctx, device, "empty");
           return frontend_call(creation_engine(), [&] { return nd::empty(s, d); });
         },
         "shape"_a, "dtype"_a = nb::none(), "order"_a = "C", nb::kw_only(), "ctx"_a = nb::none(),
         "device"_a = nb::none());
  np.def("linspace",
         [](double start, double stop, nb::handle num, bool endpoint, bool retstep,
            nb::handle dtype, int axis, nb::handle ctx, nb::handle device) -> nb::object {
           check_dtype(dtype, "linspace");
           if (axis != 0) throw nb::value_error("linspace: only axis=0 is supported");
           const long long n = int_arg(num, "linspace", "num", 0, LLONG_MAX);
           const Device d = device_arg(ctx, device, "linspace");
           NDArray r = frontend_call(creation_engine(), [&] {
             return nd::linspace(start, stop, static_cast<std::size_t>(n), endpoint, d);
           });
           if (!retstep) return nb::cast(r);
           const double div = static_cast<double>(endpoint ? n - 1 : n);
           return nb::make_tuple(r, div > 0 ? (stop - start) / div : NAN);
         },
         "start"_a, "stop"_a, "num"_a = 50, "endpoint"_a = true, "retstep"_a = false,
         "dtype"_a = nb::none(), "axis"_a = 0, nb::kw_only(), "ctx"_a = nb::none(),
         "device"_a = nb::none());
  auto mod = [](nb::handle x1, nb::handle x2) { return divide_op(Div::mod, x1, x2); };
  np.def("mod", mod, "x1"_a, "x2"_a);
  np.def("remainder", mod, "x1"_a, "x2"_a);
  np.def("floor_divide", [](nb::handle x1, nb::handle x2) { return divide_op(Div::floor, x1, x2); },
         "x1"_a, "x2"_a);
  // Replace np.cc's 2-d forms: any permutation, and batched products.
  np.attr("transpose") = nb::cpp_function(&transpose_axes, nb::name("transpose"), "a"_a,
                                          "axes"_a = nb::none());
  np.attr("matmul") = nb::cpp_function(
      [](const NDArray& a, const NDArray& b) {
        return frontend_call(a.engine(), [&] { return nd::matmul(a, b); });
      },
      nb::name("matmul"), "a"_a, "b"_a);

  nb::object cls = np.attr("ndarray");
  auto method = [&](const char* name, auto fn, auto... extra) {
    cls.attr(name) = nb::cpp_function(fn, nb::scope(cls), nb::is_method(), nb::name(name), extra...);
  };
  method("__mod__", &divide_method<Div::mod, false>, "other"_a.none());
  method("__rmod__", &divide_method<Div::mod, true>, "other"_a.none());
  method("__floordiv__", &divide_method<Div::floor, false>, "other"_a.none());
  method("__rfloordiv__", &divide_method<Div::floor, true>, "other"_a.none());
  // a.transpose(), a.transpose(1, 0, 2), a.transpose((1, 0, 2)), as numpy's.
  method("transpose", [](const NDArray& a, nb::args axes) {
    if (axes.size() == 0 || (axes.size() == 1 && axes[0].is_none())) return transpose_axes(a, nb::none());
    if (axes.size() == 1 && PySequence_Check(axes[0].ptr())) return transpose_axes(a, axes[0]);
    return transpose_axes(a, axes);
  });

  npx.def("dropout",
          [](const NDArray& data, float p, const std::string& mode, nb::handle axes, nb::handle) {
            if (mode != "training" && mode != "always") {
              throw nb::value_error(("dropout: mode must be 'training' or 'always', not '" + mode + "'").c_str());
            }
            if (!axes.is_none() && nb::len(axes) != 0) {
              throw nb::value_error("dropout: axes= (a mask shared along axes) is not supported");
            }
            return frontend_call(data.engine(), [&] {
              // 'always' drops outside training too, as MXNet's.
              const bool was = mode == "always" ? autograd::set_training(true) : autograd::is_training();
              try {
                NDArray r = nd::dropout(data, p);
                autograd::set_training(was);
                return r;
              } catch (...) {
                autograd::set_training(was);
                throw;
              }
            });
          },
          "data"_a, "p"_a = 0.5f, "mode"_a = "training", "axes"_a.none() = nb::tuple(),
          "cudnn_off"_a.none() = nb::none(),
          "mxnet.npx.dropout: zeroes each element with probability p and scales the rest by "
          "1/(1-p), while autograd.is_training() (mode='always': always); else the data itself.");
}

}  // namespace depengine::python
