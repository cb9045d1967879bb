// depengine._depengine._data: the batch gather behind gluon.data.DataLoader
// (depengine/batch.h). The Python side describes a data set's fields and their transforms;
// here they become host tables (copied once) and each batch is one op on the CPU's copy lane.
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "binding.h"
#include "depengine/batch.h"

namespace depengine::python {
namespace {

using namespace nb::literals;

// A C-contiguous buffer of `obj`, released on scope exit.
struct Buffer {
  Py_buffer view{};
  Buffer(nb::handle obj, const char* what) {
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) != 0) {
      PyErr_Clear();
      throw nb::type_error((std::string("BatchGather: ") + what +
                            " must be a C-contiguous NumPy array").c_str());
    }
  }
  ~Buffer() { PyBuffer_Release(&view); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::string format() const { return view.format ? view.format : "B"; }
  Shape shape() const {
    Shape s(static_cast<std::size_t>(view.ndim));
    for (int i = 0; i < view.ndim; ++i) s[i] = static_cast<std::size_t>(view.shape[i]);
    return s;
  }
};

// A field's values (a C-contiguous uint8 or float32 NumPy array, rows first), copied.
std::shared_ptr<const nd::HostTable> table_of(nb::handle array, std::size_t i) {
  const std::string what = "field " + std::to_string(i);
  Buffer b(array, what.c_str());
  const std::string f = b.format();
  const auto n = static_cast<std::size_t>(b.view.len);
  if ((f == "B" || f == "=B" || f == "<B") && b.view.itemsize == 1) {
    const auto* p = static_cast<const std::uint8_t*>(b.view.buf);
    return std::make_shared<const nd::HostTable>(std::vector<std::uint8_t>(p, p + n), b.shape());
  }
  if ((f == "f" || f == "=f" || f == "<f") && b.view.itemsize == 4) {
    const auto* p = static_cast<const float*>(b.view.buf);
    return std::make_shared<const nd::HostTable>(std::vector<float>(p, p + n / 4), b.shape());
  }
  throw nb::type_error(("BatchGather: " + what + " must hold uint8 or float32 values, got format '" +
                        f + "'").c_str());
}

nd::BatchGather make_gather(nb::handle fields) {
  std::vector<nd::BatchField> out;
  std::size_t i = 0;
  for (nb::handle field : fields) {
    // (array, to_chw, divisor, mean, stddev)
    if (!PyTuple_Check(field.ptr()) || nb::len(field) != 5) {
      throw nb::type_error("BatchGather: each field is (array, to_chw, divisor, mean, stddev)");
    }
    nd::Conversion c{.to_chw = nb::cast<bool>(field[1]),
                     .divisor = nb::cast<float>(field[2]),
                     .mean = nb::cast<std::vector<float>>(field[3]),
                     .stddev = nb::cast<std::vector<float>>(field[4])};
    out.push_back({table_of(field[0], i++), std::move(c)});
  }
  try {
    return nd::BatchGather(std::move(out));
  } catch (const Error& e) {
    throw nb::value_error(e.what());
  }
}

std::vector<NDArray> gather_rows(const nd::BatchGather& g, std::span<const std::int64_t> idx) {
  // As NumPy's gather: IndexError (the frontend's check would give a ValueError).
  const auto rows = static_cast<std::int64_t>(g.rows());
  for (const std::int64_t i : idx) {
    if (i < -rows || i >= rows) {
      throw nb::index_error(("index " + std::to_string(i) + " is out of bounds for a data set of " +
                             std::to_string(rows) + " samples").c_str());
    }
  }
  Engine& e = current_engine();
  register_engine(&e);
  return frontend_call(e, [&] { return g(idx); });
}

// A batch sampler's list of Python ints, read here: NumPy's conversion of the list (its
// dtype discovery) cost the Python thread more per batch than the gather's push. None for
// a list with anything else than ints (bool included) or an int beyond int64: the caller
// then converts it with NumPy, whose checks and messages apply.
nb::object gather(const nd::BatchGather& g, nb::handle indices) {
  if (PyList_CheckExact(indices.ptr())) {
    const Py_ssize_t n = PyList_GET_SIZE(indices.ptr());
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* v = PyList_GET_ITEM(indices.ptr(), i);
      if (!PyLong_CheckExact(v)) return nb::none();
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow != 0) return nb::none();
      idx[static_cast<std::size_t>(i)] = x;
    }
    return nb::cast(gather_rows(g, idx));
  }
  Buffer b(indices, "indices");
  if (b.view.ndim != 1 || b.view.itemsize != 8 || (b.format() != "q" && b.format() != "l" &&
                                                   b.format() != "<q" && b.format() != "<l")) {
    throw nb::type_error("BatchGather: indices must be a 1-d int64 NumPy array or a list of ints");
  }
  return nb::cast(gather_rows(g, std::span<const std::int64_t>(
                                     static_cast<const std::int64_t*>(b.view.buf),
                                     static_cast<std::size_t>(b.view.shape[0]))));
}

}  // namespace

void bind_data(nb::module_& m) {
  nb::module_ d = m.def_submodule("_data", "The DataLoader's batch gather (depengine/batch.h)");
  nb::class_<nd::BatchGather>(d, "BatchGather",
                              "A data set's fields on the host (copied once), gathered and "
                              "converted to float32 batches by one op per batch on the CPU's "
                              "copy lane.")
      .def("__init__",
           [](nd::BatchGather* self, nb::handle fields) { new (self) nd::BatchGather(make_gather(fields)); },
           "fields"_a,
           "fields: (array, to_chw, divisor, mean, stddev) per field; array a C-contiguous "
           "uint8 or float32 NumPy array (rows first); to_chw: samples (H, W, C) become "
           "(C, H, W); divisor > 0: values divided by it; mean, stddev: lists (one per channel "
           "or one for all; empty: none), value = (value - mean) / stddev.")
      .def("__call__", &gather, "indices"_a,
           "Pushes the batch of rows `indices` (a 1-d int64 NumPy array or a list of ints; "
           "negative counts from the end) and returns one new float32 array per field at "
           "once; None for a list holding anything else than ints (convert it with NumPy).")
      .def("sample_shape",
           [](const nd::BatchGather& g, std::size_t i) {
             const Shape& s = g.sample_shape(i);
             nb::list l;
             for (std::size_t v : s) l.append(v);
             return nb::tuple(l);
           },
           "i"_a, "The shape of field i's converted samples.");
}

}  // namespace depengine::python
