// npx.CachedOp (depengine/cached_op.h): what a hybridized gluon block records and replays
// while autograd records.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "binding.h"
#include "depengine/autograd.h"
#include "depengine/cached_op.h"
#include "wait.h"

namespace depengine::python {
namespace {

std::vector<NDArray> array_list(nb::handle seq, const char* fn, const char* what) {
  if (!nb::isinstance<nb::list>(seq) && !nb::isinstance<nb::tuple>(seq)) {
    throw nb::type_error((std::string(fn) + ": " + what + " must be a list of ndarrays, got " +
                          Py_TYPE(seq.ptr())->tp_name).c_str());
  }
  std::vector<NDArray> out;
  for (nb::handle h : seq) {
    if (!nb::isinstance<NDArray>(h)) {
      throw nb::type_error((std::string(fn) + ": " + what + " must be ndarrays, got " +
                            Py_TYPE(h.ptr())->tp_name).c_str());
    }
    out.push_back(nb::cast<const NDArray&>(h));
  }
  return out;
}

nd::CachedOp record(const std::string& name, nb::handle fn, nb::handle inputs,
                    const std::vector<bool>& with_grad, nb::handle params) {
  if (!PyCallable_Check(fn.ptr())) {
    throw nb::type_error(("CachedOp.record: fn must be callable, not " +
                          std::string(Py_TYPE(fn.ptr())->tp_name)).c_str());
  }
  std::vector<NDArray> in = array_list(inputs, "CachedOp.record", "inputs");
  std::vector<NDArray> ps = array_list(params, "CachedOp.record", "params");
  check_not_exiting();
  register_engine(&current_engine());
  // The forward is Python: it runs here, holding the GIL, inside a record region (a Python
  // op it pushes is kept for the replays).
  return nd::CachedOp::record(name, std::move(in), with_grad, std::move(ps),
                              [&](const std::vector<NDArray>& marked) {
                                enter_record_region();
                                struct Leave {
                                  ~Leave() { leave_record_region(); }
                                } leave;
                                nb::list args;
                                for (const NDArray& a : marked) args.append(nb::cast(a));
                                nb::object out = nb::borrow(fn)(*args);
                                return array_list(out, "CachedOp.record", "the forward's outputs");
                              });
}

std::vector<NDArray> call(nd::CachedOp& op, nb::handle inputs, nb::handle params,
                          bool copy_outputs) {
  const std::vector<NDArray> in = array_list(inputs, "CachedOp", "inputs");
  const std::vector<NDArray> ps = array_list(params, "CachedOp", "params");
  // A wrong count or shape (found before anything is pushed) is a ValueError.
  return frontend_call(current_engine(), [&] { return op(in, ps, copy_outputs); });
}

}  // namespace

void bind_cached_op(nb::module_& npx) {
  nb::class_<nd::CachedOp>(npx, "CachedOp",
                           "A forward recorded once with autograd's tape on and replayed "
                           "(MXNet's CachedOp): what a hybridized gluon block runs while "
                           "autograd records.")
      .def_static("record", &record, nb::arg("name"), nb::arg("fn"), nb::arg("inputs"),
                  nb::arg("with_grad"), nb::arg("params"),
                  "Runs fn(*inputs) once with autograd recording, keeping its ops as a segment "
                  "and its tape nodes as the gradient plan. with_grad[i]: whether input i "
                  "gets a gradient; params: the arrays the forward reads in place.")
      .def("__call__", &call, nb::arg("inputs"), nb::arg("params"),
           nb::arg("copy_outputs") = true,
           "Replays the forward with inputs (the first call returns the recording's "
           "results); while autograd records, the outputs share one tape node. "
           "copy_outputs=False returns the segment's own output arrays (no copy; the op is "
           "then held while any of them lives).")
      .def_prop_ro("busy", &nd::CachedOp::busy,
                   "Whether the latest call's gradient still needs the segment's arrays.")
      .def_prop_ro("held", &nd::CachedOp::held,
                   "Whether an output the latest call returned without a copy is still alive "
                   "(a replay would overwrite it).")
      .def("_release",
           [](nd::CachedOp& op, nb::handle arrays) {
             if (!nb::isinstance<nb::list>(arrays)) {
               throw nb::type_error("CachedOp._release: arrays must be a list of ndarrays");
             }
             std::vector<NDArray*> ptrs;
             for (nb::handle h : arrays) {
               if (!nb::isinstance<NDArray>(h)) {
                 throw nb::type_error("CachedOp._release: arrays must be ndarrays");
               }
               ptrs.push_back(nb::inst_ptr<NDArray>(h));
             }
             return frontend_call(current_engine(), [&] { return op.release(ptrs); });
           },
           nb::arg("arrays"),
           "Gives these ndarrays (the outputs the latest call returned without a copy, when "
           "nothing else holds them) storage of their own, a copy, so that the op is no "
           "longer held; returns whether it is not.")
      .def_prop_ro("replays", &nd::CachedOp::replays, "Calls that replayed the segment.")
      .def_prop_ro("plan_size", &nd::CachedOp::plan_size,
                   "The forward's tape nodes the gradient plan holds.");
  npx.def("_in_record_region", &in_record_region,
          "Whether this thread is inside an npx.record / Engine.record region (where a "
          "hybridized block runs eagerly: its ops are recorded into that region).");
  npx.def("_has_history", &autograd::has_history,
          "Whether an array has an autograd history (a variable or a recorded output).");
}

}  // namespace depengine::python
