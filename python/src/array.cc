// depengine.np.ndarray: the bound C++ NDArray. Every operator is one bound C++ function
// that dispatches on its operand (array, scalar, NumPy data) and pushes one op.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <sstream>

#include "binding.h"
#include "depengine/ndarray_ops.h"

using namespace nanobind::literals;

namespace depengine::python {
namespace {

enum class Op { add, sub, mul, div, pow, matmul, eq, ne, lt, le, gt, ge };

const char* op_name(Op op) {
  constexpr const char* names[] = {"add", "subtract", "multiply", "divide", "power", "matmul",
                                   "equal", "not_equal", "less", "less_equal", "greater",
                                   "greater_equal"};
  return names[static_cast<int>(op)];
}

nd::Compare compare_of(Op op, bool reflected) {
  switch (op) {
    case Op::eq: return nd::Compare::equal;
    case Op::ne: return nd::Compare::not_equal;
    case Op::lt: return reflected ? nd::Compare::greater : nd::Compare::less;
    case Op::le: return reflected ? nd::Compare::greater_equal : nd::Compare::less_equal;
    case Op::gt: return reflected ? nd::Compare::less : nd::Compare::greater;
    default: return reflected ? nd::Compare::less_equal : nd::Compare::greater_equal;
  }
}

// a op s (or s op a when reflected).
NDArray with_scalar(Op op, const NDArray& a, float s, bool reflected) {
  switch (op) {
    case Op::add: return a + s;
    case Op::sub: return reflected ? s - a : a - s;
    case Op::mul: return a * s;
    case Op::div: return reflected ? s / a : a / s;
    case Op::pow:
      if (!reflected) return nd::pow(a, s);
      return nd::pow(nd::full({}, s, a.device()), a);
    case Op::matmul: throw Error("matmul: an operand is a scalar, not an array");
    default: return nd::compare(a, s, compare_of(op, reflected));
  }
}

// x op y for arrays.
NDArray with_array(Op op, const NDArray& x, const NDArray& y) {
  switch (op) {
    case Op::add: return nd::add(x, y);
    case Op::sub: return nd::subtract(x, y);
    case Op::mul: return nd::multiply(x, y);
    case Op::div: return nd::divide(x, y);
    case Op::pow: return nd::pow(x, y);
    case Op::matmul: return nd::matmul(x, y);
    default: return nd::compare(x, y, compare_of(op, false));
  }
}

template <Op op, bool reflected>
nb::object binary(const NDArray& a, nb::handle other) {
  float s;
  if (nb::isinstance<NDArray>(other)) {
    const NDArray& b = nb::cast<const NDArray&>(other);
    return nb::cast(frontend_call(a.engine(), [&] {
      return reflected ? with_array(op, b, a) : with_array(op, a, b);
    }));
  }
  if (scalar_value(other, s)) {
    return nb::cast(frontend_call(a.engine(), [&] { return with_scalar(op, a, s, reflected); }));
  }
  if (PyList_Check(other.ptr()) || PyTuple_Check(other.ptr()) ||
      PyObject_HasAttrString(other.ptr(), "__array_interface__")) {
    const NDArray b = as_array(other, &a, op_name(op));
    return nb::cast(frontend_call(a.engine(), [&] {
      return reflected ? with_array(op, b, a) : with_array(op, a, b);
    }));
  }
  return nb::borrow(Py_NotImplemented);
}

template <Op op>
nb::object inplace(nb::handle self, nb::handle other) {
  NDArray& a = nb::cast<NDArray&>(self);
  // `other` is read here, with the GIL held: frontend_call releases it where a push may
  // block (the naive engine, a back-pressure bound), and reading a Python object without it
  // crashed `x += y` there (scalar_value's first call imports numpy).
  float s;
  const bool scalar = !nb::isinstance<NDArray>(other) && scalar_value(other, s);
  NDArray b;
  if (!scalar) b = as_array(other, &a, op_name(op));
  frontend_call(a.engine(), [&] {
    if (scalar) {
      switch (op) {
        case Op::add: a += s; break;
        case Op::sub: a -= s; break;
        case Op::mul: a *= s; break;
        default: a /= s; break;
      }
      return 0;
    }
    switch (op) {
      case Op::add: a += b; break;
      case Op::sub: a -= b; break;
      case Op::mul: a *= b; break;
      default: a /= b; break;
    }
    return 0;
  });
  return nb::borrow(self);
}

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (std::size_t d : s) l.append(d);
  return nb::tuple(l);
}

// Blocks with the GIL released, Ctrl-C ending the wait (wait.h); an op failure propagates
// as it is.
void wait(const NDArray& a) { python::wait_to_read(a.engine(), a.var()); }

// The single element, waited for as wait() does (item(), float(), int(), bool(), format(),
// `in`).
float item_released(const NDArray& a) {
  wait(a);
  nb::gil_scoped_release unlocked;
  return a.item();
}

nb::object asnumpy(const NDArray& a) {
  // A copy, as MXNet's asnumpy: made by an op ordered after the array's earlier writes and
  // before its later ones, into storage that only the NumPy array holds. (A view of the
  // array's own storage changed under the caller when a later op wrote the array, and could
  // be read half-written.)
  NDArray host = frontend_call(a.engine(), [&] { return a.copy_to(Device::cpu()); });
  wait(host);
  auto* keep = new NDArray(host);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<NDArray*>(p); });
  std::vector<std::size_t> shape(host.shape().begin(), host.shape().end());
  float* data = host.size() ? host.data() : nullptr;
  nb::ndarray<nb::numpy, float> copy(data, shape.size(), shape.data(), owner);
  return copy.cast();
}

// a.reshape(*shape) / a.reshape(shape), and as NumPy's and MXNet's, reshape(shape=...) and
// order='C'.
NDArray reshape(const NDArray& a, nb::args args, nb::kwargs kwargs) {
  nb::handle spec = args.size() == 1 ? args[0] : nb::handle(args);
  for (auto [key, value] : kwargs) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (k == "shape") {
      if (args.size() != 0) throw nb::type_error("reshape: the shape is given twice (positionally and as shape=)");
      spec = value;
    } else if (k == "order") {
      if (!PyUnicode_Check(value.ptr()) || nb::cast<std::string>(value) != "C") {
        throw nb::value_error("reshape: only order='C' is supported");
      }
    } else {
      throw nb::type_error(("reshape: unexpected keyword argument '" + k +
                            "' (it takes shape= and order=)").c_str());
    }
  }
  if (args.size() == 0 && !kwargs.contains("shape")) {
    throw nb::type_error("reshape: the new shape is missing (reshape(2, 3), reshape((2, 3)) or "
                         "reshape(shape=(2, 3)))");
  }
  std::vector<long long> want;
  auto add = [&](nb::handle h) {
    if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr())) {
      throw nb::type_error(("reshape: the shape must be ints or a tuple of ints, got " +
                            std::string(Py_TYPE(h.ptr())->tp_name)).c_str());
    }
    nb::object i = nb::steal(PyNumber_Index(h.ptr()));
    if (!i.is_valid()) throw nb::python_error();
    want.push_back(int_value(i));
  };
  if (PyTuple_Check(spec.ptr()) || PyList_Check(spec.ptr())) {
    for (nb::handle h : nb::borrow<nb::sequence>(spec)) add(h);
  } else {
    add(spec);
  }
  Shape shape;
  long infer = -1;
  std::size_t known = 1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i] == -1) {
      if (infer >= 0) throw nb::value_error("reshape: can only specify one unknown dimension");
      infer = static_cast<long>(i);
      shape.push_back(0);
    } else if (want[i] < 0) {
      throw nb::value_error("reshape: negative dimensions are not allowed");
    } else {
      shape.push_back(static_cast<std::size_t>(want[i]));
      known *= shape.back();
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.size() % known != 0) {
      throw nb::value_error(("cannot reshape array of shape " + shape_str(a.shape()) +
                             " with an unknown dimension").c_str());
    }
    shape[infer] = a.size() / known;
  }
  return frontend_call(a.engine(), [&] { return a.reshape(shape); });
}

// numpy.asarray(x) / numpy.array(x, dtype=, copy=): always a copy (the storage is the
// engine's, written by ops in flight), so copy=False is NumPy 2's ValueError.
nb::object to_numpy(const NDArray& a, nb::handle dtype, nb::handle copy) {
  if (copy.ptr() == Py_False) {
    throw nb::value_error("Unable to avoid copy while creating an array as requested: a "
                          "depengine array's storage belongs to the engine, so NumPy gets a "
                          "copy (made after a wait); pass copy=None or call asnumpy()");
  }
  nb::object out = asnumpy(a);
  if (dtype.is_none()) return out;
  return out.attr("astype")(dtype, "copy"_a = false);
}

std::string repr(const NDArray& a) {
  std::ostringstream os;
  wait(a);
  {
    nb::gil_scoped_release unlocked;
    os << a;
  }
  std::string s = os.str();
  if (!a.device().is_cpu()) s.insert(s.size() - 1, ", ctx=" + a.device().str());
  return s;
}

}  // namespace

void bind_array(nb::module_& np) {
  // Weak-referenceable: a hybridized block keeps weak references to the outputs it hands
  // out without a copy, to give them storage of their own before a replay overwrites them.
  nb::class_<NDArray> cls(np, "ndarray", nb::is_weak_referenceable(),
                          "A float32 array whose ops are pushed to the dependency engine and "
                          "return at once; asnumpy(), item(), printing and wait_to_read() wait.");
  cls.def_prop_ro("shape", [](const NDArray& a) { return shape_tuple(a.shape()); })
      .def_prop_ro("dtype", [](const NDArray&) { return float32_dtype(); })
      .def_prop_ro("size", &NDArray::size)
      .def_prop_ro("ndim", &NDArray::ndim)
      .def_prop_ro("ctx", &NDArray::device)
      .def_prop_ro("device", &NDArray::device)
      .def_prop_ro("T", [](const NDArray& a) { return frontend_call(a.engine(), [&] { return a.T(); }); })
      .def_prop_ro("var", &NDArray::var, "The engine var that orders accesses to the storage.")
      .def("wait_to_read", &wait)
      .def("asnumpy", &asnumpy)
      .def("__array__", &to_numpy, nb::arg("dtype").none() = nb::none(),
           nb::arg("copy").none() = nb::none())
      // By value: pickling waits for the array (as asnumpy()) and unpickling makes a new one
      // on the current engine, on the same device.
      .def("__reduce__", [](const NDArray& a) {
        nb::object rebuild = nb::module_::import_("depengine._reduce").attr("ndarray");
        return nb::make_tuple(rebuild, nb::make_tuple(asnumpy(a), a.device().is_cpu() ? "cpu" : "gpu",
                                                      a.device().id));
      })
      // A pushed copy (no wait), as ndarray.copy().
      .def("__copy__", [](const NDArray& a) { return frontend_call(a.engine(), [&] { return a.copy(); }); })
      .def("__deepcopy__", [](const NDArray& a, nb::handle) {
        return frontend_call(a.engine(), [&] { return a.copy(); });
      }, nb::arg("memo").none())
      .def("tolist", [](const NDArray& a) { return asnumpy(a).attr("tolist")(); },
           "The elements as (nested) Python floats; waits, as asnumpy().")
      .def("astype", [](nb::handle self, nb::handle dtype, bool copy) -> nb::object {
        check_dtype(dtype, "astype");
        if (!copy) return nb::borrow(self);
        const NDArray& a = nb::cast<const NDArray&>(self);
        return nb::cast(frontend_call(a.engine(), [&] { return a.copy(); }));
      }, nb::arg("dtype"), nb::arg("copy") = true,
         "float32 only (depengine arrays are float32): a copy, or the array itself with copy=False.")
      // As NumPy's: a 0-d array formats as its value; others only with an empty spec.
      .def("__format__", [](nb::handle self, const std::string& spec) -> nb::object {
        const NDArray& a = nb::cast<const NDArray&>(self);
        if (a.ndim() == 0) {
          nb::object value = nb::steal(PyFloat_FromDouble(static_cast<double>(item_released(a))));
          nb::object out = nb::steal(PyObject_Format(value.ptr(), nb::str(spec.c_str()).ptr()));
          if (!out.is_valid()) throw nb::python_error();
          return out;
        }
        if (spec.empty()) return nb::str(self);
        throw nb::type_error("unsupported format string passed to ndarray.__format__");
      }, nb::arg("format_spec"))
      .def("item", [](const NDArray& a) {
        if (a.size() != 1) {
          throw nb::value_error(("can only convert an array of size 1 to a Python scalar (shape " +
                                 shape_str(a.shape()) + ")").c_str());
        }
        return static_cast<double>(item_released(a));
      })
      .def("__float__", [](const NDArray& a) {
        if (a.size() != 1) throw nb::type_error("only size-1 arrays can be converted to Python scalars");
        return static_cast<double>(item_released(a));
      })
      .def("__int__", [](const NDArray& a) {
        if (a.size() != 1) throw nb::type_error("only size-1 arrays can be converted to Python scalars");
        // A NaN raises ValueError and an infinity OverflowError, as with NumPy.
        PyObject* i = PyLong_FromDouble(static_cast<double>(item_released(a)));
        if (!i) throw nb::python_error();
        return nb::steal(i);
      })
      .def("__bool__", [](const NDArray& a) {
        if (a.size() == 0) {  // NumPy 2's message
          throw nb::value_error("The truth value of an empty array is ambiguous. Use "
                                "`array.size > 0` to check that an array is not empty.");
        }
        if (a.size() != 1) {
          throw nb::value_error("The truth value of an array with more than one element is ambiguous.");
        }
        return item_released(a) != 0.0f;
      })
      // As NumPy's: `x in a` is (a == x).any(), not a search through the rows.
      .def("__contains__", [](nb::handle self, nb::handle value) {
        nb::object eq = self.attr("__eq__")(value);
        if (!nb::isinstance<NDArray>(eq)) return false;
        const NDArray& e = nb::cast<const NDArray&>(eq);
        if (e.size() == 0) return false;
        const NDArray any = frontend_call(e.engine(), [&] { return nd::max(e); });
        return item_released(any) != 0.0f;
      }, nb::arg("value").none())
      .def("__len__", [](const NDArray& a) {
        if (a.ndim() == 0) throw nb::type_error("len() of unsized object");
        return a.shape()[0];
      })
      .def("__repr__", &repr)
      .def("__str__", &repr)
      .def("__getitem__", &getitem)
      .def("__setitem__", &setitem, nb::arg("key"), nb::arg("value").none())
      // As NumPy's: rows along the first axis, one at a time; a 0-d array is not iterable
      // (without this, Python's fallback through __getitem__ gave an empty list).
      .def("__iter__", [](nb::handle self) {
        const NDArray& a = nb::cast<const NDArray&>(self);
        if (a.ndim() == 0) throw nb::type_error("iteration over a 0-d array");
        nb::module_ builtins = nb::module_::import_("builtins");
        return builtins.attr("map")(self.attr("__getitem__"), builtins.attr("range")(a.shape()[0]));
      })
      .def("reshape", &reshape,
           "reshape(2, 3), reshape((2, 3)) or reshape(shape=(2, 3)); -1 infers one dimension; "
           "order='C' only. A view: no copy.")
      .def("copy", [](const NDArray& a) { return frontend_call(a.engine(), [&] { return a.copy(); }); })
      .def("copyto", [](const NDArray& a, Device d) { return frontend_call(a.engine(), [&] { return a.copy_to(d); }); },
           nb::arg("ctx"))
      .def("as_in_ctx", [](const NDArray& a, Device d) {
        return d == a.device() ? a : frontend_call(a.engine(), [&] { return a.copy_to(d); });
      }, nb::arg("ctx"))
      .def("to_device", [](const NDArray& a, Device d) {
        return d == a.device() ? a : frontend_call(a.engine(), [&] { return a.copy_to(d); });
      }, nb::arg("device"))
      .def("__neg__", [](const NDArray& a) { return frontend_call(a.engine(), [&] { return -a; }); })
      .def("__pos__", [](const NDArray& a) { return a; })
      .def("__abs__", [](const NDArray& a) { return frontend_call(a.engine(), [&] { return nd::abs(a); }); })
      .def("__add__", &binary<Op::add, false>, nb::arg("other").none())
      .def("__radd__", &binary<Op::add, true>, nb::arg("other").none())
      .def("__sub__", &binary<Op::sub, false>, nb::arg("other").none())
      .def("__rsub__", &binary<Op::sub, true>, nb::arg("other").none())
      .def("__mul__", &binary<Op::mul, false>, nb::arg("other").none())
      .def("__rmul__", &binary<Op::mul, true>, nb::arg("other").none())
      .def("__truediv__", &binary<Op::div, false>, nb::arg("other").none())
      .def("__rtruediv__", &binary<Op::div, true>, nb::arg("other").none())
      .def("__pow__", &binary<Op::pow, false>, nb::arg("other").none())
      .def("__rpow__", &binary<Op::pow, true>, nb::arg("other").none())
      .def("__matmul__", &binary<Op::matmul, false>, nb::arg("other").none())
      .def("__rmatmul__", &binary<Op::matmul, true>, nb::arg("other").none())
      .def("__eq__", &binary<Op::eq, false>, nb::arg("other").none())
      .def("__ne__", &binary<Op::ne, false>, nb::arg("other").none())
      .def("__lt__", &binary<Op::lt, false>, nb::arg("other").none())
      .def("__le__", &binary<Op::le, false>, nb::arg("other").none())
      .def("__gt__", &binary<Op::gt, false>, nb::arg("other").none())
      .def("__ge__", &binary<Op::ge, false>, nb::arg("other").none())
      .def("__iadd__", &inplace<Op::add>, nb::arg("other").none())
      .def("__isub__", &inplace<Op::sub>, nb::arg("other").none())
      .def("__imul__", &inplace<Op::mul>, nb::arg("other").none())
      .def("__itruediv__", &inplace<Op::div>, nb::arg("other").none());
  // numpy defers to these operators (numpy_array + ndarray calls ndarray.__radd__).
  cls.attr("__array_ufunc__") = nb::none();
  cls.attr("__hash__") = nb::none();
}

}  // namespace depengine::python
