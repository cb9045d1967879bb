// Shared by the binding's sources: what each binds, and the helpers they have in common.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "depengine/engine.h"
#include "depengine/ndarray.h"
#include "gil.h"
#include "wait.h"

namespace depengine::python {

namespace nb = nanobind;

void bind_engine(nb::module_& m);
void bind_graph(nb::module_& m);
void bind_array(nb::module_& np);
void bind_np(nb::module_& np, nb::module_& npx);
// depengine.autograd, and the ndarray's attach_grad / grad / backward / detach (autograd.cc).
void bind_autograd(nb::module_& m, nb::module_& np);
// np.concatenate, stack, mod, linspace, ..., npx.dropout and their ndarray methods (np_more.cc).
void bind_np_more(nb::module_& np, nb::module_& npx);
// ndarray.__getitem__ / __setitem__ (indexing.cc).
NDArray getitem(const NDArray& a, nb::handle key);
void setitem(NDArray& a, nb::handle key, nb::handle value);
// npx.record / npx.replay / npx.Segment (engine.cc).
void bind_array_segments(nb::module_& npx);
// npx.CachedOp: the forward a hybridized block records and replays under autograd.
void bind_cached_op(nb::module_& npx);
// npx.convolution, pooling, softmax, log_softmax, batch_norm (np_nn.cc).
void bind_np_nn(nb::module_& npx);
// _depengine._optim: the fused optimizer updates (optim.cc).
void bind_optim(nb::module_& m);
// _depengine._gluon: the fused layer ops (gluon_ops.cc).
void bind_gluon_ops(nb::module_& m);
// _depengine._data: the DataLoader's batch gather (data.cc).
void bind_data(nb::module_& m);
// npx.memory_stats / pool_cap / set_pool_cap (memory.cc).
void bind_memory(nb::module_& npx);

// The engines Python has used: every Engine made from Python and the process default.
// Engines made from Python live until the process exits (arrays made on one may outlive
// its Python object); at exit each is waited for before the interpreter finalizes.
void register_engine(Engine* e);
void wait_registered_engines();
// In a child of fork(): whether `e` was made in the parent (every call on it then raises
// depengine.Error naming fork()).
bool made_before_fork(const Engine& e);

// Whether a push to `e` may block (the naive engine runs ops inline; a bounded engine
// applies back-pressure), so the GIL must be released around it.
inline bool push_may_block(const Engine& e) noexcept {
  return e.max_inflight() != 0 || e.kind() == "naive";
}

// Runs `f` with the GIL released when `release`, else holding it.
template <class F>
decltype(auto) maybe_released(bool release, F&& f) {
  if (release) {
    nb::gil_scoped_release unlocked;
    return f();
  }
  return f();
}

// Vars from a Python sequence of Var or ndarray objects (or one of them alone).
std::vector<Var> to_vars(nb::handle seq, const char* what);

// The process default engine, registered.
Engine& default_engine();

}  // namespace depengine::python

namespace depengine::python {

// The engine an `engine=` argument names (an Engine object), or the current one for None.
Engine& engine_arg(nb::handle engine);

// Argument conversion for depengine.np (convert.cc). Each throws TypeError or ValueError
// naming the function, the argument and what it got.

// True and the value for a Python float, int or bool, or a NumPy scalar.
bool scalar_value(nb::handle h, float& out);
// None or anything numpy.dtype() reads as float32; else TypeError naming it.
void check_dtype(nb::handle dtype, const char* fn);
// An int or a sequence of ints (>= 0).
Shape shape_arg(nb::handle shape, const char* fn);
// A Python int (checked by the caller) as a C++ long long; one beyond its range raises
// Python's OverflowError instead of leaving the error set behind a wrong value.
long long int_value(nb::handle h);
// An integer argument `name` of `fn` (a Python int, or anything with __index__ such as a
// NumPy integer; not a bool) within [lo, hi]: TypeError for another type, ValueError naming
// the range for a value outside it (however large).
long long int_arg(nb::handle h, const char* fn, const char* name, long long lo, long long hi);
// A number argument `name` of `fn` (int, float, a NumPy scalar; not a bool): TypeError
// naming it otherwise.
double number_arg(nb::handle h, const char* fn, const char* name);
// A bool argument (a bool, a NumPy bool or an int): TypeError naming it otherwise.
bool bool_arg(nb::handle h, const char* fn, const char* name);
// ctx= / device=: None (the CPU), or a Device.
Device device_arg(nb::handle ctx, nb::handle device, const char* fn);
// A new array on `device` holding the elements of a NumPy array, a (nested) list or a scalar.
NDArray array_from(nb::handle obj, Device device, const char* fn);
// `h` as an array: an ndarray itself, else array_from (a scalar becomes a 0-d array).
NDArray as_array(nb::handle h, const NDArray* like, const char* fn);

// Runs a frontend call: its Error (a bad shape or device, found before anything is pushed)
// becomes ValueError; the GIL is released when the push may block, and on a bounded engine
// the call first waits for a place (interruptibly, wait.h). Once the interpreter exits, and
// in a child of fork() on an engine of the parent, depengine.Error.
template <class F>
decltype(auto) frontend_call(const Engine& e, F&& f) {
  check_not_exiting();
  wait_for_place(e);
  try {
    return maybe_released(push_may_block(e), std::forward<F>(f));
  } catch (const Error& err) {
    if (made_before_fork(e)) throw;
    throw nb::value_error(err.what());
  }
}

// The numpy.float32 dtype object (cached).
nb::object float32_dtype();

}  // namespace depengine::python
