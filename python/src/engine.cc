// depengine.Engine, Var, Completion and the Python ops pushed to them.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/unique_ptr.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <mutex>

#include "binding.h"
#include "depengine/record.h"
#include "gil.h"
#include "wait.h"

namespace depengine::python {
namespace {

// Each engine with the process that registered it (the one it was made in: engines are
// registered as they are made, the default one at import).
struct Registered {
  Engine* e;
  pid_t pid;
};
std::mutex g_engines_mu;
std::vector<Registered>& engines() {
  static auto* v = new std::vector<Registered>;  // never destroyed: see register_engine
  return *v;
}

// A Python handle to an engine (owned by the registry, never destroyed before exit).
struct EngineRef {
  Engine* e;
};

// `with engine:` makes it the current engine of the thread (np creation functions push to
// it); scopes are kept per thread and must close in reverse order.
thread_local std::vector<std::pair<Engine*, std::unique_ptr<EngineScope>>> t_scopes;

// Calls the Python callable `f` (with the result of `arg()` when given) on the calling
// thread, taking the GIL, and drops `f` while it holds it unless `keep` (a recorded op, run
// again by replays); a Python exception becomes a PyOpError.
template <class Arg>
void call_python(PyRef& f, const std::string& name, Arg&& arg, bool keep = false) {
  const bool ran = with_gil([&] {
    InOp in_op;
    nb::object a = arg();
    PyObject* r = a.is_valid() ? PyObject_CallOneArg(f.get(), a.ptr())
                               : PyObject_CallNoArgs(f.get());
    if (!r) {
      PyOpError e = PyOpError::fetch();
      if (!keep) f.reset();
      throw e;
    }
    Py_DECREF(r);
    if (!keep) f.reset();
  });
  if (!ran) throw python_finalizing(name);
}

// The `done` given to a push_async function: done() or done(exc).
struct Done {
  std::shared_ptr<DoneSlot> slot;
  void call(nb::handle exc) {
    if (exc.is_none()) {
      nb::gil_scoped_release unlocked;
      call_done(*slot, nullptr);
      return;
    }
    if (!PyExceptionInstance_Check(exc.ptr())) {
      throw nb::type_error(("done(exc): exc must be an exception instance (or None), not " +
                            std::string(Py_TYPE(exc.ptr())->tp_name)).c_str());
    }
    std::exception_ptr e = std::make_exception_ptr(PyOpError(exc.ptr()));
    nb::gil_scoped_release unlocked;
    call_done(*slot, std::move(e));
  }
};

std::string name_of(nb::handle h, const char* fn) {
  if (!PyUnicode_Check(h.ptr())) {
    throw nb::type_error((std::string(fn) + ": name must be a str, not " +
                          Py_TYPE(h.ptr())->tp_name).c_str());
  }
  return nb::cast<std::string>(h);
}

int priority_of(nb::handle h, const char* fn) {
  return static_cast<int>(int_arg(h, fn, "priority", INT_MIN, INT_MAX));
}

PushOptions push_options(std::string name, int priority) {
  return PushOptions{.device = Device::cpu(), .lane = Lane::compute, .priority = priority,
                     .name = std::move(name)};
}

PyRef callable(nb::handle fn, const char* what) {
  if (!PyCallable_Check(fn.ptr())) {
    throw nb::type_error((std::string(what) + ": fn must be callable, not " +
                          Py_TYPE(fn.ptr())->tp_name).c_str());
  }
  return PyRef(fn.ptr());
}

void push(EngineRef& self, nb::handle fn, nb::handle reads, nb::handle writes,
          nb::handle name_arg, nb::handle priority_arg) {
  const std::string name = name_of(name_arg, "push");
  const int priority = priority_of(priority_arg, "push");
  check_not_exiting();
  PyRef f = callable(fn, "push");
  const std::vector<Var> r = to_vars(reads, "reads"), w = to_vars(writes, "writes");
  auto body = [f = std::move(f), name, keep = in_record_region()]() mutable {
    call_python(f, name, [] { return nb::object(); }, keep);
  };
  Engine& e = *self.e;
  wait_for_place(e);
  maybe_released(push_may_block(e), [&] { e.push(std::move(body), r, w, push_options(name, priority)); });
}

void push_async(EngineRef& self, nb::handle fn, nb::handle reads, nb::handle writes,
                nb::handle name_arg, nb::handle priority_arg) {
  const std::string name = name_of(name_arg, "push_async");
  const int priority = priority_of(priority_arg, "push_async");
  check_not_exiting();
  PyRef f = callable(fn, "push_async");
  const std::vector<Var> r = to_vars(reads, "reads"), w = to_vars(writes, "writes");
  Engine& e = *self.e;
  auto body = [f = std::move(f), name, keep = in_record_region(), e = &e](Completion done) mutable {
    call_python(f, name, [&] { return nb::cast(Done{make_done_slot(e, name, std::move(done))}); },
                keep);
  };
  wait_for_place(e);
  maybe_released(push_may_block(e),
                 [&] { e.push_async(std::move(body), r, w, push_options(name, priority)); });
}

// Calls the Python callable `fn` with no arguments (GIL held) inside a record region; its
// exception propagates as it is.
void call_in_region(nb::handle fn) {
  enter_record_region();
  struct Leave {
    ~Leave() { leave_record_region(); }
  } leave;
  nb::object r = nb::borrow(fn)();
}

Segment record(EngineRef& self, nb::handle fn) {
  PyRef f = callable(fn, "record");
  return self.e->record([&] { call_in_region(fn); });
}

void replay(EngineRef& self, const Segment& seg) {
  Engine& e = *self.e;
  wait_for_place(e);
  maybe_released(push_may_block(e), [&] { e.replay(seg); });
}

nd::Segment record_arrays(nb::handle fn, nb::handle inputs) {
  PyRef f = callable(fn, "record");
  std::vector<NDArray> in;
  if (!inputs.is_none()) {
    for (nb::handle h : nb::borrow<nb::sequence>(inputs)) {
      if (!nb::isinstance<NDArray>(h)) {
        throw nb::type_error(("record: inputs must be ndarrays, got " +
                              std::string(Py_TYPE(h.ptr())->tp_name)).c_str());
      }
      in.push_back(nb::cast<const NDArray&>(h));
    }
  }
  register_engine(&current_engine());
  return nd::record(std::move(in), [&] { call_in_region(fn); });
}

void replay_arrays(const nd::Segment& seg, nb::handle inputs) {
  if (!seg) throw Error("replay: the segment was not recorded");
  const Engine& e = current_engine();
  wait_for_place(e);
  if (inputs.is_none()) {
    maybe_released(push_may_block(e), [&] { nd::replay(seg); });
    return;
  }
  std::vector<NDArray> in;
  for (nb::handle h : nb::borrow<nb::sequence>(inputs)) {
    if (!nb::isinstance<NDArray>(h)) {
      throw nb::type_error(("replay: inputs must be ndarrays, got " +
                            std::string(Py_TYPE(h.ptr())->tp_name)).c_str());
    }
    in.push_back(nb::cast<const NDArray&>(h));
  }
  maybe_released(push_may_block(e), [&] { nd::replay(seg, in); });
}

Var one_var(nb::handle v, const char* what) {
  std::vector<Var> vars = to_vars(v, what);
  if (vars.size() != 1) throw nb::type_error((std::string(what) + ": expects one Var or ndarray").c_str());
  return vars[0];
}

}  // namespace

void register_engine(Engine* e) {
  std::lock_guard lk(g_engines_mu);
  auto& v = engines();
  if (std::none_of(v.begin(), v.end(), [&](const Registered& r) { return r.e == e; })) {
    v.push_back({e, getpid()});
  }
}

bool made_before_fork(const Engine& e) {
  if (!forked_child()) return false;
  std::lock_guard lk(g_engines_mu);
  for (const Registered& r : engines()) {
    if (r.e == &e) return r.pid != getpid();
  }
  return false;
}

void wait_registered_engines() {
  std::vector<Engine*> mine;  // a child of fork() has none of its parent's engines' threads
  {
    std::lock_guard lk(g_engines_mu);
    for (const Registered& r : engines()) {
      if (r.pid == getpid()) mine.push_back(r.e);
    }
  }
  // A failure no wait reported is said on stderr rather than lost (as Python does for an
  // exception that ends a thread, or asyncio for one never retrieved); the exit goes on.
  wait_at_exit(mine);
}

Engine& engine_arg(nb::handle engine) {
  if (engine.is_none()) {
    Engine& e = current_engine();
    register_engine(&e);
    return e;
  }
  if (!nb::isinstance<EngineRef>(engine)) {
    throw nb::type_error(("engine: expected a depengine.Engine, got " +
                          std::string(Py_TYPE(engine.ptr())->tp_name)).c_str());
  }
  return *nb::cast<EngineRef&>(engine).e;
}

Engine& default_engine() {
  Engine& e = Engine::get();
  register_engine(&e);
  return e;
}

std::vector<Var> to_vars(nb::handle seq, const char* what) {
  std::vector<Var> out;
  auto add = [&](nb::handle h) {
    if (nb::isinstance<Var>(h)) {
      out.push_back(nb::cast<const Var&>(h));
    } else if (nb::isinstance<NDArray>(h)) {
      out.push_back(nb::cast<const NDArray&>(h).var());
    } else {
      throw nb::type_error((std::string(what) + ": expected Var or ndarray, got " +
                            Py_TYPE(h.ptr())->tp_name).c_str());
    }
  };
  if (seq.is_none()) return out;
  if (nb::isinstance<Var>(seq) || nb::isinstance<NDArray>(seq)) {
    add(seq);
    return out;
  }
  if (!PySequence_Check(seq.ptr())) {
    throw nb::type_error((std::string(what) + ": expected a list of Var or ndarray, got " +
                          Py_TYPE(seq.ptr())->tp_name).c_str());
  }
  for (nb::handle h : nb::borrow<nb::sequence>(seq)) add(h);
  return out;
}

void bind_engine(nb::module_& m) {
  nb::class_<Var>(m, "Var", "A handle to a piece of state whose accesses the engine orders.")
      .def_prop_ro("id", &Var::id)
      .def("__eq__", [](const Var& a, nb::handle b) {
        return nb::isinstance<Var>(b) && a == nb::cast<const Var&>(b);
      })
      .def("__hash__", [](const Var& v) { return v.id(); })
      .def("__repr__", [](const Var& v) { return "Var(" + std::to_string(v.id()) + ")"; });

  nb::class_<Done>(m, "Completion",
                   "Given to a push_async function: call done() when its work is finished, "
                   "or done(exc) with the exception that failed it. Callable from any thread.")
      .def("__call__", &Done::call, nb::arg("exc") = nb::none());

  nb::class_<Segment>(m, "Segment",
                      "The ops one thread pushed inside Engine.record(fn); Engine.replay "
                      "pushes them again, as if pushed at that point.")
      .def("__len__", &Segment::size)
      .def_prop_ro("names", &Segment::names)
      .def_prop_ro("input_count", &Segment::input_count)
      .def_prop_ro("output_count", &Segment::output_count)
      .def("__repr__", [](const Segment& s) { return "Segment(" + std::to_string(s.size()) + " ops)"; });

  nb::class_<EngineRef>(m, "Engine",
                        "A dependency engine: Engine('threaded' | 'naive', cpu_threads=0, "
                        "max_inflight=0, sim_gpus=0). 0 takes the environment's value or the "
                        "default. `with engine:` makes it the current engine of this thread.")
      .def("__init__",
           [](EngineRef* self, nb::handle kind_arg, nb::handle cpu_threads,
              nb::handle max_inflight, nb::handle sim_gpus) {
             if (!PyUnicode_Check(kind_arg.ptr())) {
               throw nb::type_error(("Engine: kind must be 'threaded' or 'naive', got " +
                                     std::string(Py_TYPE(kind_arg.ptr())->tp_name)).c_str());
             }
             const std::string kind = nb::cast<std::string>(kind_arg);
             const EngineOptions options{
                 .cpu_threads = static_cast<int>(int_arg(cpu_threads, "Engine", "cpu_threads", 0, INT_MAX)),
                 .max_inflight = static_cast<long>(
                     int_arg(max_inflight, "Engine", "max_inflight", -1, LONG_MAX)),
                 .sim_gpus = static_cast<int>(int_arg(sim_gpus, "Engine", "sim_gpus", 0, INT_MAX))};
             std::unique_ptr<Engine> e;
             try {
               e = Engine::create(kind, options);
             } catch (const Error& err) {
               if (forked_child()) throw;  // depengine.Error, as for every engine call there
               throw nb::value_error(err.what());
             }
             Engine* raw = e.release();
             register_engine(raw);
             new (self) EngineRef{raw};
           },
           nb::arg("kind").none() = "threaded", nb::kw_only(), nb::arg("cpu_threads").none() = 0,
           nb::arg("max_inflight").none() = 0, nb::arg("sim_gpus").none() = 0)
      .def_prop_ro("kind", [](const EngineRef& s) { return std::string(s.e->kind()); })
      .def_prop_ro("cpu_threads", [](const EngineRef& s) { return s.e->cpu_threads(); })
      .def_prop_ro("max_inflight", [](const EngineRef& s) { return s.e->max_inflight(); })
      .def_prop_ro("sim_gpus", [](const EngineRef& s) { return s.e->sim_gpus(); })
      .def_prop_ro("pending", [](const EngineRef& s) { return s.e->pending(); })
      .def("new_var", [](EngineRef& s) { return s.e->new_var(); })
      .def("push", &push, nb::arg("fn").none(), nb::arg("reads").none() = nb::tuple(),
           nb::arg("writes").none() = nb::tuple(), nb::kw_only(), nb::arg("name").none() = "python",
           nb::arg("priority").none() = 0,
           "Pushes fn() to run on a worker once its reads and writes allow; returns at once.")
      .def("push_async", &push_async, nb::arg("fn").none(), nb::arg("reads").none() = nb::tuple(),
           nb::arg("writes").none() = nb::tuple(), nb::kw_only(), nb::arg("name").none() = "python",
           nb::arg("priority").none() = 0,
           "Pushes fn(done); the op ends when done() or done(exc) is called, from any thread.")
      .def("record", &record, nb::arg("fn").none(),
           "Runs fn() now and returns the ops it pushed to this engine as a Segment; a wait "
           "or delete_var inside fn is an Error.")
      .def("replay", &replay, nb::arg("segment"),
           "Pushes the ops of a Segment recorded on this engine again.")
      .def("wait_to_read",
           [](EngineRef& s, nb::handle v) {
             python::wait_to_read(*s.e, one_var(v, "wait_to_read"));
           },
           nb::arg("var"))
      .def("wait_all",
           [](EngineRef& s) { python::wait_all(*s.e); })
      .def("delete_var", [](EngineRef& s, nb::handle v) { s.e->delete_var(one_var(v, "delete_var")); },
           nb::arg("var"))
      .def("__enter__",
           [](EngineRef& s) -> EngineRef& {
             t_scopes.emplace_back(s.e, std::make_unique<EngineScope>(*s.e));
             return s;
           },
           nb::rv_policy::reference)
      .def("__exit__",
           [](EngineRef& s, nb::args) {
             if (t_scopes.empty() || t_scopes.back().first != s.e) {
               throw nb::value_error("Engine.__exit__: this engine is not the innermost "
                                     "`with` engine of this thread");
             }
             // Its RNG state's var is deleted now, a push that back-pressure may hold until
             // a running Python op, which needs the GIL, returns.
             auto scope = std::move(t_scopes.back());
             t_scopes.pop_back();
             nb::gil_scoped_release unlocked;
             scope.second.reset();
           })
      .def("__repr__", [](const EngineRef& s) {
        return "Engine('" + std::string(s.e->kind()) + "', cpu_threads=" +
               std::to_string(s.e->cpu_threads()) + ")";
      });

  m.def("engine", [] { return EngineRef{&default_engine()}; },
        "The process default engine (DEPENGINE_TYPE, default 'threaded').");
  m.def("current_engine",
        [] {
          Engine& e = current_engine();
          register_engine(&e);
          return EngineRef{&e};
        },
        "The engine np creation functions push to on this thread.");
}

void bind_array_segments(nb::module_& npx) {
  nb::class_<nd::Segment>(npx, "Segment",
                          "Array ops recorded by npx.record(fn, inputs); npx.replay(seg, "
                          "inputs) runs them again.")
      .def("__len__", [](const nd::Segment& s) { return s.ops().size(); })
      .def_prop_ro("inputs", [](const nd::Segment& s) { return s.inputs(); });
  npx.def("record", &record_arrays, nb::arg("fn").none(), nb::arg("inputs").none() = nb::none(),
          "Runs fn() once, recording the array ops it pushes to the current engine; `inputs` "
          "are the arrays a replay may rebind. Blocking inside fn is an Error.");
  npx.def("replay", &replay_arrays, nb::arg("segment"), nb::arg("inputs") = nb::none(),
          "Replays a recorded npx.Segment; new inputs (same shapes) are copied into the "
          "recorded ones first.");
}

}  // namespace depengine::python
