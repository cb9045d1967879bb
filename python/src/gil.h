// The GIL as engine workers see it. A worker takes the GIL only to run a Python op (or to
// drop a reference a finished op held), and never once the interpreter has begun to exit:
// the atexit hook (close_python) waits for the ops pending on every engine, then closes the
// gate; later Python ops fail with an Error instead of touching a finalizing interpreter,
// and the references they hold are leaked rather than dropped without the GIL.
#pragma once

#include <Python.h>

#include <exception>
#include <string>
#include <utility>

#include "depengine/error.h"

namespace depengine::python {

// Runs `f` holding the GIL, from any thread (the caller may hold it already). Returns false
// without running `f` once close_python() has run. `f`'s exceptions propagate.
template <class F>
bool with_gil(F&& f);

namespace detail {
bool enter_python() noexcept;
void leave_python() noexcept;
}  // namespace detail

template <class F>
bool with_gil(F&& f) {
  if (!detail::enter_python()) return false;
  struct Leave {
    ~Leave() { detail::leave_python(); }
  } leave;
  PyGILState_STATE state = PyGILState_Ensure();
  struct Release {
    PyGILState_STATE s;
    ~Release() { PyGILState_Release(s); }
  } release{state};
  std::forward<F>(f)();
  return true;
}

// Closes the gate: waits (the GIL released) until no worker is inside with_gil, and makes
// every later with_gil return false. Call with the GIL held.
void close_python();

// Marks the interpreter as exiting, before the atexit hook waits for the engines: a push
// made from Python after it raises depengine.Error (check_not_exiting), so that a daemon
// thread still pushing cannot keep that wait going (and memory growing) without end.
void begin_exit() noexcept;
// Throws Error, for a push made after begin_exit() other than by a running op.
void check_not_exiting();

// A strong reference that may be copied, moved and destroyed on any thread. A copy without
// the GIL takes it (with_gil); a drop without it is deferred to the interpreter's main
// thread (Py_AddPendingCall), never blocking. Made with the GIL held.
class PyRef {
 public:
  PyRef() = default;
  // Takes a new reference to `o` (GIL held).
  explicit PyRef(PyObject* o) : p_(o) { Py_XINCREF(o); }
  PyRef(const PyRef& o);
  PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PyRef& operator=(PyRef o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~PyRef() { reset(); }
  void reset() noexcept;
  PyObject* get() const noexcept { return p_; }

 private:
  PyObject* p_ = nullptr;
};

// A Python exception raised inside an op (or passed to `done(exc)`), carried through the
// engine to the wait that re-raises it: the same exception object, with its type, message,
// cause and the traceback it had when it failed the op. (Each raise appends the frames it
// passes through to __traceback__; re-raised as it was left, a var waited for 1,000 times
// grew a 2,001-frame traceback that kept every frame's locals alive.)
class PyOpError : public std::exception {
 public:
  // Takes the exception being raised (PyErr_Occurred(), GIL held) and clears it.
  static PyOpError fetch();
  // Wraps the exception object `exc` (GIL held).
  explicit PyOpError(PyObject* exc);
  const char* what() const noexcept override { return what_.c_str(); }
  // Raises it again in the calling thread (GIL held).
  void restore() const;

 private:
  PyRef exc_;
  PyRef tb_;  // __traceback__ when the op failed
  std::string what_;
};

// Error for a Python op that reached a worker after the interpreter began to exit.
Error python_finalizing(const std::string& name);

}  // namespace depengine::python
