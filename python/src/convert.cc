// Argument conversion for depengine.np: scalars, dtypes, shapes, devices, NumPy arrays.
#include "binding.h"

using namespace nanobind::literals;

namespace depengine::python {
namespace {

nb::module_& numpy() {
  static nb::module_* np = new nb::module_(nb::module_::import_("numpy"));
  return *np;
}

std::string tp_name_of(nb::handle h) { return Py_TYPE(h.ptr())->tp_name; }

}  // namespace

nb::object float32_dtype() {
  static nb::object* d = new nb::object(numpy().attr("dtype")("float32"));
  return *d;
}

bool scalar_value(nb::handle h, float& out) {
  PyObject* p = h.ptr();
  if (PyFloat_CheckExact(p)) {
    out = static_cast<float>(PyFloat_AS_DOUBLE(p));
    return true;
  }
  if (PyLong_Check(p) || PyFloat_Check(p)) {
    const double v = PyFloat_Check(p) ? PyFloat_AS_DOUBLE(p) : PyLong_AsDouble(p);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    out = static_cast<float>(v);
    return true;
  }
  static PyObject* generic = numpy().attr("generic").inc_ref().ptr();
  if (PyObject_TypeCheck(p, reinterpret_cast<PyTypeObject*>(generic))) {
    const char kind = nb::cast<std::string>(h.attr("dtype").attr("kind"))[0];
    if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') return false;
    const double v = PyFloat_AsDouble(p);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    out = static_cast<float>(v);
    return true;
  }
  return false;
}

double number_arg(nb::handle h, const char* fn, const char* name) {
  float unused;
  if (PyBool_Check(h.ptr()) || !scalar_value(h, unused)) {
    throw nb::type_error((std::string(fn) + ": " + name + " must be a number, got " +
                          tp_name_of(h)).c_str());
  }
  const double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

bool bool_arg(nb::handle h, const char* fn, const char* name) {
  if (PyBool_Check(h.ptr())) return h.ptr() == Py_True;
  if (PyLong_Check(h.ptr())) return int_value(h) != 0;
  static PyObject* np_bool = numpy().attr("bool_").inc_ref().ptr();
  if (PyObject_TypeCheck(h.ptr(), reinterpret_cast<PyTypeObject*>(np_bool))) {
    return PyObject_IsTrue(h.ptr()) == 1;
  }
  throw nb::type_error((std::string(fn) + ": " + name + " must be True or False, got " +
                        tp_name_of(h)).c_str());
}

void check_dtype(nb::handle dtype, const char* fn) {
  if (dtype.is_none()) return;
  nb::object d;
  try {
    d = numpy().attr("dtype")(dtype);
  } catch (const nb::python_error&) {
    throw nb::type_error((std::string(fn) + ": dtype " + nb::cast<std::string>(nb::repr(dtype)) +
                          " is not a data type").c_str());
  }
  if (!d.equal(float32_dtype())) {
    throw nb::type_error((std::string(fn) + ": dtype " + nb::cast<std::string>(nb::str(d)) +
                          " is not supported (depengine arrays are float32)").c_str());
  }
}

long long int_value(nb::handle h) {
  const long long v = PyLong_AsLongLong(h.ptr());
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

long long int_arg(nb::handle h, const char* fn, const char* name, long long lo, long long hi) {
  const std::string what = std::string(fn) + ": " + name;
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr())) {
    throw nb::type_error((what + " must be an int, got " + tp_name_of(h)).c_str());
  }
  nb::object i = nb::steal(PyNumber_Index(h.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0 || v < lo || v > hi) {
    throw nb::value_error((what + " must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " +
                           nb::cast<std::string>(nb::str(i))).c_str());
  }
  return v;
}

Shape shape_arg(nb::handle shape, const char* fn) {
  auto dim = [&](nb::handle h) -> std::size_t {
    if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) {
      throw nb::type_error((std::string(fn) + ": shape entries must be int, got " + tp_name_of(h)).c_str());
    }
    const long long v = int_value(h);
    if (v < 0) {
      throw nb::value_error((std::string(fn) + ": negative dimensions are not allowed (" +
                             std::to_string(v) + ")").c_str());
    }
    return static_cast<std::size_t>(v);
  };
  if (PyLong_Check(shape.ptr())) return {dim(shape)};
  if (!PyTuple_Check(shape.ptr()) && !PyList_Check(shape.ptr())) {
    throw nb::type_error((std::string(fn) + ": shape must be an int or a tuple of ints, got " +
                          tp_name_of(shape)).c_str());
  }
  Shape s;
  for (nb::handle h : nb::borrow<nb::sequence>(shape)) s.push_back(dim(h));
  return s;
}

Device device_arg(nb::handle ctx, nb::handle device, const char* fn) {
  auto one = [&](nb::handle h, const char* what) -> Device {
    if (!nb::isinstance<Device>(h)) {
      throw nb::type_error((std::string(fn) + ": " + what + " must be a Device (npx.cpu(), "
                            "npx.gpu(i)), got " + tp_name_of(h)).c_str());
    }
    return nb::cast<Device>(h);
  };
  if (!ctx.is_none() && !device.is_none()) {
    const Device a = one(ctx, "ctx"), b = one(device, "device");
    if (a != b) {
      throw nb::value_error((std::string(fn) + ": ctx=" + a.str() + " and device=" + b.str() +
                             " disagree").c_str());
    }
    return a;
  }
  if (!ctx.is_none()) return one(ctx, "ctx");
  if (!device.is_none()) return one(device, "device");
  return Device::cpu();
}

NDArray array_from(nb::handle obj, Device device, const char* fn) {
  if (nb::isinstance<NDArray>(obj)) {
    const NDArray& a = nb::cast<const NDArray&>(obj);
    return frontend_call(a.engine(), [&] { return a.copy_to(device); });
  }
  nb::object arr = numpy().attr("asarray")(obj);
  const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
  if (kind != "f" && kind != "i" && kind != "u" && kind != "b") {
    throw nb::type_error((std::string(fn) + ": object must be a number, a (nested) list of "
                          "numbers or an array, got " + tp_name_of(obj) +
                          " (a float32 array cannot be made from data of dtype " +
                          nb::cast<std::string>(nb::str(nb::object(arr.attr("dtype")))) + ")")
                             .c_str());
  }
  // asarray, not ascontiguousarray, which makes a 0-d array 1-d.
  arr = numpy().attr("asarray")(arr, "dtype"_a = float32_dtype(), "order"_a = "C");
  Py_buffer view;
  if (PyObject_GetBuffer(arr.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_ND) != 0) throw nb::python_error();
  struct Release {
    Py_buffer* v;
    ~Release() { PyBuffer_Release(v); }
  } release{&view};
  Shape shape(static_cast<std::size_t>(view.ndim));
  for (int i = 0; i < view.ndim; ++i) shape[i] = static_cast<std::size_t>(view.shape[i]);
  const std::span<const float> values(static_cast<const float*>(view.buf),
                                      static_cast<std::size_t>(view.len) / sizeof(float));
  Engine& e = current_engine();
  register_engine(&e);
  return frontend_call(e, [&] { return nd::array(values, shape, device); });
}

NDArray as_array(nb::handle h, const NDArray* like, const char* fn) {
  if (nb::isinstance<NDArray>(h)) return nb::cast<const NDArray&>(h);
  const Device d = like ? like->device() : Device::cpu();
  if (like) {
    EngineScope scope(like->engine());  // made on the engine of the array it meets
    return array_from(h, d, fn);
  }
  return array_from(h, d, fn);
}

}  // namespace depengine::python
