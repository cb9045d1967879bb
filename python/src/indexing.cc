// ndarray.__getitem__ / __setitem__: numpy's indexing on the frontend's ops. Integers and
// slices select (nd::slice, written by nd::slice_assign); None adds an axis; ... fills the
// rest; integer arrays (lists, ranges, NumPy integer arrays, depengine arrays) and boolean
// masks (lists of bools, NumPy bool arrays) on consecutive axes gather (nd::take).
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "depengine/ndarray_ops.h"

namespace depengine::python {
namespace {

// numpy-style normalized index of `i` into a dimension of `n`.
long norm_index(long long i, std::size_t n, std::size_t dim) {
  const long long len = static_cast<long long>(n);
  if (i < -len || i >= len) {
    throw nb::index_error(("index " + std::to_string(i) + " is out of bounds for axis " +
                           std::to_string(dim) + " with size " + std::to_string(n)).c_str());
  }
  return static_cast<long>(i < 0 ? i + len : i);
}

// An int, or an integer with __index__ (a NumPy integer); a bool is not an index here, and an
// array (a sequence) indexes by its elements.
bool is_int(nb::handle k) {
  return !PyBool_Check(k.ptr()) && PyIndex_Check(k.ptr()) && !nb::isinstance<NDArray>(k) &&
         !PySequence_Check(k.ptr());
}

// A key element that indexes by an array: its NumPy view (bool or integer), or a depengine
// array (floats holding integers).
struct Advanced {
  NDArray array;        // a depengine array, when given one
  nb::object numpy;     // else the key as a NumPy array
  bool mask = false;    // a boolean mask: it covers numpy.ndim axes
};

std::optional<Advanced> advanced(nb::handle k) {
  if (nb::isinstance<NDArray>(k)) return Advanced{nb::cast<NDArray>(k), nb::object(), false};
  const bool seq = PyList_Check(k.ptr()) || PyObject_TypeCheck(k.ptr(), &PyRange_Type) ||
                   PyObject_HasAttrString(k.ptr(), "__array_interface__");
  if (!seq) return std::nullopt;
  nb::module_ numpy = nb::module_::import_("numpy");
  nb::object a = numpy.attr("asarray")(PyObject_TypeCheck(k.ptr(), &PyRange_Type)
                                           ? nb::object(numpy.attr("arange")(
                                                 k.attr("start"), k.attr("stop"), k.attr("step")))
                                           : nb::borrow(k));
  const std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
  if (kind == "b") return Advanced{NDArray(), a, true};
  if (kind == "i" || kind == "u" || (kind == "f" && nb::cast<std::size_t>(a.attr("size")) == 0)) {
    return Advanced{NDArray(), a, false};
  }
  throw nb::index_error(("arrays used as indices must be of integer (or boolean) type, not " +
                         nb::cast<std::string>(nb::str(a.attr("dtype")))).c_str());
}

// The parsed key: the basic selection (one SliceDim per axis of the array), the positions of
// new axes in the basic result, and the integer arrays with the result axis they start at.
struct Plan {
  std::vector<nd::SliceDim> dims;
  bool trivial = true;                 // every dimension taken whole
  std::vector<std::size_t> new_axes;   // positions in the result of basic indexing
  std::vector<NDArray> indices;        // on consecutive axes of the basic result
  std::size_t first_index_axis = 0;
};

// A comparison's result (NDArray::is_mask: float32 0/1 standing in for bool) as a NumPy bool
// mask, so x[x > 0] masks as in MXNet; it waits for the key, since the result's shape depends
// on its values. Any other key: nothing.
nb::object depengine_mask(nb::handle key) {
  if (!nb::isinstance<NDArray>(key) || !nb::cast<const NDArray&>(key).is_mask()) {
    return nb::object();
  }
  return key.attr("asnumpy")().attr("astype")(nb::module_::import_("numpy").attr("bool_"));
}

Plan parse(const NDArray& a, nb::handle key) {
  const nb::object mask = depengine_mask(key);
  if (mask.is_valid()) key = mask;
  std::vector<nb::handle> keys;
  if (PyTuple_Check(key.ptr())) {
    for (nb::handle h : nb::borrow<nb::tuple>(key)) keys.push_back(h);
  } else {
    keys.push_back(key);
  }
  struct Entry {
    enum { integer, slice, none, array } kind;
    nb::handle key;
    std::optional<Advanced> adv;
  };
  std::vector<Entry> entries;
  std::size_t consumed = 0;
  bool ellipsis = false;
  std::size_t ellipsis_at = 0;
  for (nb::handle k : keys) {
    if (k.ptr() == Py_Ellipsis) {
      if (ellipsis) throw nb::index_error("an index can only have a single ellipsis ('...')");
      ellipsis = true;
      ellipsis_at = entries.size();
    } else if (k.is_none()) {
      entries.push_back({Entry::none, k, std::nullopt});
    } else if (PySlice_Check(k.ptr())) {
      entries.push_back({Entry::slice, k, std::nullopt});
      ++consumed;
    } else if (is_int(k)) {
      entries.push_back({Entry::integer, k, std::nullopt});
      ++consumed;
    } else if (std::optional<Advanced> adv = advanced(k)) {
      consumed += adv->mask ? nb::cast<std::size_t>(adv->numpy.attr("ndim")) : 1;
      entries.push_back({Entry::array, k, std::move(adv)});
    } else {
      throw nb::type_error(("only integers, slices (`:`), ellipsis (`...`), None and integer "
                             "or boolean arrays are valid indices, not " +
                             std::string(Py_TYPE(k.ptr())->tp_name)).c_str());
    }
  }
  if (consumed > a.ndim()) {
    throw nb::index_error(("too many indices for array: array is " + std::to_string(a.ndim()) +
                           "-dimensional, but " + std::to_string(consumed) + " were indexed").c_str());
  }
  // The axes that neither the key nor its ellipsis name are taken whole (an ellipsis stands
  // for them where it is, else they come last).
  const std::size_t rest = a.ndim() - consumed;
  std::vector<Entry> full;
  for (std::size_t i = 0; i <= entries.size(); ++i) {
    if (ellipsis && i == ellipsis_at) {
      for (std::size_t j = 0; j < rest; ++j) full.push_back({Entry::slice, nb::handle(), std::nullopt});
    }
    if (i < entries.size()) full.push_back(entries[i]);
  }
  if (!ellipsis) {
    for (std::size_t j = 0; j < rest; ++j) full.push_back({Entry::slice, nb::handle(), std::nullopt});
  }
  Plan p;
  std::size_t d = 0, out_axis = 0;
  std::optional<std::size_t> last_index_axis;
  for (const Entry& e : full) {
    if (e.kind == Entry::none) {
      p.new_axes.push_back(out_axis++);
      continue;
    }
    if (e.kind == Entry::array) {
      std::vector<NDArray> idx;
      std::size_t covers = 1;
      if (e.adv->array.defined()) {
        idx.push_back(e.adv->array);
      } else if (e.adv->mask) {
        covers = nb::cast<std::size_t>(e.adv->numpy.attr("ndim"));
        nb::object shape = e.adv->numpy.attr("shape");
        for (std::size_t j = 0; j < covers; ++j) {
          if (nb::cast<std::size_t>(shape[j]) != a.shape()[d + j]) {
            throw nb::index_error(("boolean index did not match indexed array along axis " +
                                   std::to_string(d + j) + "; size of axis is " +
                                   std::to_string(a.shape()[d + j]) + " but size of corresponding "
                                   "boolean axis is " + nb::cast<std::string>(nb::str(shape[j]))).c_str());
          }
        }
        nb::tuple nz = nb::borrow<nb::tuple>(e.adv->numpy.attr("nonzero")());
        for (nb::handle h : nz) idx.push_back(array_from(h, a.device(), "getitem"));
      } else {
        idx.push_back(array_from(e.adv->numpy, a.device(), "getitem"));
      }
      if (!p.indices.empty() && last_index_axis && *last_index_axis != out_axis) {
        throw nb::index_error("indexing by arrays that are not next to each other (separated "
                              "by a slice or an integer) is not supported");
      }
      if (p.indices.empty()) p.first_index_axis = out_axis;
      for (std::size_t j = 0; j < covers; ++j) {
        p.dims.push_back({0, 1, a.shape()[d], true});
        p.indices.push_back(idx[j]);
        ++d;
        ++out_axis;
      }
      last_index_axis = out_axis;
      continue;
    }
    const std::size_t n = a.shape()[d];
    if (e.kind == Entry::integer) {
      nb::object i = nb::steal(PyNumber_Index(e.key.ptr()));
      if (!i.is_valid()) throw nb::python_error();
      p.dims.push_back({norm_index(int_value(i), n, d), 1, 1, false});
      p.trivial = false;
    } else if (!e.key.is_valid()) {
      p.dims.push_back({0, 1, n, true});
      ++out_axis;
    } else {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(e.key.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      const Py_ssize_t count = PySlice_AdjustIndices(static_cast<Py_ssize_t>(n), &start, &stop, step);
      p.dims.push_back({static_cast<long>(start), static_cast<long>(step),
                        static_cast<std::size_t>(count), true});
      if (!(start == 0 && step == 1 && static_cast<std::size_t>(count) == n)) p.trivial = false;
      ++out_axis;
    }
    ++d;
  }
  if (!p.indices.empty() && !p.new_axes.empty()) {
    throw nb::index_error("None (numpy.newaxis) together with array indices is not supported");
  }
  return p;
}

}  // namespace

NDArray getitem(const NDArray& a, nb::handle key) {
  Plan p = parse(a, key);
  return frontend_call(a.engine(), [&] {
    NDArray r = p.trivial ? a : nd::slice(a, p.dims);
    if (!p.indices.empty()) {
      r = nd::take(r, p.indices, static_cast<int>(p.first_index_axis));
    } else if (!p.new_axes.empty()) {
      Shape s = r.shape();
      for (std::size_t at : p.new_axes) s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), 1);
      r = r.reshape(s);
    } else if (p.trivial) {
      r = a.copy();  // a[:] and a[...] are new arrays, as every basic selection here
    }
    return r;
  });
}

void setitem(NDArray& a, nb::handle key, nb::handle value) {
  Plan p = parse(a, key);
  if (!p.indices.empty()) {
    throw nb::index_error("assignment through integer or boolean array indices is not supported; "
                          "index with integers and slices");
  }
  float s;
  if (scalar_value(value, s)) {
    frontend_call(a.engine(), [&] {
      nd::slice_assign(a, p.dims, s);
      return 0;
    });
    return;
  }
  const NDArray v = as_array(value, &a, "setitem");
  frontend_call(a.engine(), [&] {
    nd::slice_assign(a, p.dims, v);
    return 0;
  });
}

}  // namespace depengine::python
