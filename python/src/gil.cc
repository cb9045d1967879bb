#include "gil.h"

#include <depengine/running_op.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace depengine::python {
namespace {

struct Gate {
  std::mutex mu;
  std::condition_variable idle;
  int inside = 0;
  bool closed = false;
};

// Never destroyed: workers may still ask after static destruction began.
Gate& gate() {
  static Gate* g = new Gate;
  return *g;
}

std::string describe(PyObject* exc) {
  std::string s = Py_TYPE(exc)->tp_name;
  if (PyObject* str = PyObject_Str(exc)) {
    if (const char* c = PyUnicode_AsUTF8(str); c && *c) s += std::string(": ") + c;
    Py_DECREF(str);
  }
  PyErr_Clear();
  return s;
}

}  // namespace

namespace detail {
bool enter_python() noexcept {
  Gate& g = gate();
  std::lock_guard lk(g.mu);
  if (g.closed) return false;
  ++g.inside;
  return true;
}

void leave_python() noexcept {
  Gate& g = gate();
  std::lock_guard lk(g.mu);
  if (--g.inside == 0) g.idle.notify_all();
}
}  // namespace detail

namespace {
std::atomic<bool> g_exiting{false};
}  // namespace

void begin_exit() noexcept { g_exiting.store(true); }

void check_not_exiting() {
  // A push made by a running op belongs to that op's wait_all epoch, which the exit hook's
  // wait covers: it goes through.
  if (g_exiting.load(std::memory_order_relaxed) && !in_running_op()) {
    throw Error("the interpreter is exiting: depengine takes no more work (a daemon thread "
                "pushed after the main thread ended)");
  }
}

void close_python() {
  Gate& g = gate();
  Py_BEGIN_ALLOW_THREADS
  {
    std::unique_lock lk(g.mu);
    g.closed = true;
    g.idle.wait(lk, [&] { return g.inside == 0; });
  }
  Py_END_ALLOW_THREADS
}

// References dropped on threads without the GIL wait here until the interpreter's main
// thread runs drain_deferred (Py_AddPendingCall): a worker never blocks on the GIL from a
// destructor, which may run under an engine lock that a thread holding the GIL waits for.
static std::mutex g_deferred_mu;
static std::vector<PyObject*>* g_deferred = new std::vector<PyObject*>;

static int drain_deferred(void*) {
  std::vector<PyObject*> drop;
  {
    std::lock_guard lk(g_deferred_mu);
    drop.swap(*g_deferred);
  }
  for (PyObject* p : drop) Py_DECREF(p);
  return 0;
}

void PyRef::reset() noexcept {
  PyObject* p = std::exchange(p_, nullptr);
  if (!p) return;
  // Once Python is exiting the reference is leaked: the object dies with the process. (The
  // gate first: PyGILState_Check says yes to every thread once finalization disabled it.)
  if (!detail::enter_python()) return;
  if (PyGILState_Check()) {
    Py_DECREF(p);
    detail::leave_python();
    return;
  }
  bool first = false;
  {
    std::lock_guard lk(g_deferred_mu);
    try {
      first = g_deferred->empty();
      g_deferred->push_back(p);
    } catch (...) {  // no memory: leak the reference rather than block
    }
  }
  if (first) Py_AddPendingCall(drain_deferred, nullptr);
  detail::leave_python();
}

PyRef::PyRef(const PyRef& o) {
  if (o.p_ && with_gil([&] { Py_INCREF(o.p_); })) p_ = o.p_;
}

PyOpError PyOpError::fetch() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb && value) PyException_SetTraceback(value, tb);
  PyOpError e(value ? value : Py_None);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return e;
}

PyOpError::PyOpError(PyObject* exc) : exc_(exc), what_(describe(exc)) {
  if (PyExceptionInstance_Check(exc)) {
    PyObject* tb = PyException_GetTraceback(exc);
    tb_ = PyRef(tb);
    Py_XDECREF(tb);
  }
}

void PyOpError::restore() const {
  PyObject* e = exc_.get();
  if (e && PyExceptionInstance_Check(e)) {
    // The exception object itself, with the traceback of the op that raised it (not the
    // frames earlier raises added).
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(e));
    PyException_SetTraceback(e, tb_.get() ? tb_.get() : Py_None);
    Py_INCREF(type);
    Py_INCREF(e);
    Py_XINCREF(tb_.get());
    PyErr_Restore(type, e, tb_.get());
  } else {
    PyErr_SetString(PyExc_RuntimeError, what_.c_str());
  }
}

Error python_finalizing(const std::string& name) {
  return Error("Python op '" + name +
               "': the interpreter is exiting, so the op did not run (wait for Python ops "
               "before the program ends)");
}

}  // namespace depengine::python
