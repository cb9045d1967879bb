// Graphs from Python: record a region of pushes, dump and analyze the graph, profile, and
// load and run graph files (workloads/).
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <unordered_map>

#include "binding.h"
#include "depengine/graph.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"
#include "graphfile.h"

namespace depengine::python {
namespace {

// The recordings active on each engine, outermost first (GIL held): the engine's observer
// fans out to all of them, so a `record` nested in another on the same engine keeps both
// (replacing the observer, and clearing it at the inner exit, dropped the inner ops and
// every later one from the outer graph).
std::unordered_map<Engine*, std::vector<std::shared_ptr<Observer>>>& active_recordings() {
  static auto* m = new std::unordered_map<Engine*, std::vector<std::shared_ptr<Observer>>>;
  return *m;
}

void observe(Engine& e, const std::vector<std::shared_ptr<Observer>>& active) {
  if (active.empty()) {
    e.set_observer(nullptr);
  } else if (active.size() == 1) {
    e.set_observer(active.front());
  } else {
    e.set_observer(std::make_shared<ObserverFanout>(active));
  }
}

// A region of pushes observed by a recorder and/or a profiler: `with de.record(e) as rec:`.
struct Recording {
  Engine* engine;
  std::shared_ptr<GraphRecorder> recorder;
  std::shared_ptr<Profiler> profiler;
  std::shared_ptr<Observer> observer = nullptr;  // while active

  void enter() {
    if (observer) throw nb::value_error("record: this region is already being recorded");
    std::shared_ptr<Observer> o;
    if (recorder && profiler) {
      o = std::make_shared<ObserverFanout>(
          std::vector<std::shared_ptr<Observer>>{recorder, profiler});
    } else if (recorder) {
      o = recorder;
    } else {
      o = profiler;
    }
    auto& active = active_recordings()[engine];
    active.push_back(o);
    try {
      observe(*engine, active);
    } catch (...) {
      active.pop_back();
      throw;
    }
    observer = std::move(o);
  }
  void exit() {
    if (!observer) return;
    auto& active = active_recordings()[engine];
    std::erase(active, observer);
    observer = nullptr;
    observe(*engine, active);
  }
};

std::string analysis_repr(const GraphAnalysis& a) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "GraphAnalysis(ops=%zu, edges=%zu, work=%.6g, span=%.6g, parallelism=%.4g, "
                "max_width=%zu)",
                a.ops, a.edges, a.work, a.span, a.parallelism, a.max_width);
  return buf;
}

template <class F>
auto value_errors(F&& f) {
  try {
    return f();
  } catch (const graphfile::FileError& e) {
    throw nb::value_error(e.what());
  } catch (const graphfile::ReadError& e) {
    throw nb::value_error(e.what());
  } catch (const std::invalid_argument& e) {
    throw nb::value_error(e.what());
  }
}

}  // namespace

void bind_graph(nb::module_& m) {
  nb::class_<GraphAnalysis>(m, "GraphAnalysis",
                            "Work, span (critical path), parallelism = work / span and the "
                            "width per topological level of a graph, as `depengine analyze`.")
      .def_ro("ops", &GraphAnalysis::ops)
      .def_ro("edges", &GraphAnalysis::edges)
      .def_ro("work", &GraphAnalysis::work)
      .def_ro("span", &GraphAnalysis::span)
      .def_ro("parallelism", &GraphAnalysis::parallelism)
      .def_ro("critical_path", &GraphAnalysis::critical_path)
      .def_ro("critical_path_names", &GraphAnalysis::critical_path_names)
      .def_ro("level_width", &GraphAnalysis::level_width)
      .def_ro("max_width", &GraphAnalysis::max_width)
      .def("__repr__", &analysis_repr);

  nb::class_<Graph>(m, "Graph", "A dependency DAG: ops and their RAW/WAR/WAW edges.")
      .def_prop_ro("node_count", &Graph::node_count)
      .def_prop_ro("edge_count", &Graph::edge_count)
      .def("node_names",
           [](const Graph& g) {
             std::vector<std::string> names;
             for (std::size_t i = 0; i < g.node_count(); ++i) names.push_back(g.node(i).name);
             return names;
           })
      .def("edges",
           [](const Graph& g) {
             std::vector<std::tuple<std::size_t, std::size_t, std::string>> out;
             for (const GraphEdge& e : g.edges()) out.emplace_back(e.from, e.to, dep_kind_name(e.kind));
             return out;
           },
           "(from, to, 'RAW' | 'WAR' | 'WAW') for every edge; nodes by index.")
      .def("to_dot",
           [](const Graph& g, bool reduce) { return g.to_dot({.transitive_reduction = reduce}); },
           nb::arg("transitive_reduction") = false)
      .def("to_json",
           [](const Graph& g, bool reduce) { return g.to_json({.transitive_reduction = reduce}); },
           nb::arg("transitive_reduction") = false)
      .def("analyze",
           [](const Graph& g, bool unit) {
             try {
               return analyze(g, {.unit_costs = unit});
             } catch (const Error& e) {
               throw nb::value_error(e.what());
             }
           },
           nb::arg("unit_costs") = false)
      .def_static("from_json",
                  [](const std::string& t) {
                    try {
                      return Graph::from_json(t);
                    } catch (const Error& e) {
                      throw nb::value_error(e.what());
                    }
                  })
      .def_static("from_dot", [](const std::string& t) {
        try {
          return Graph::from_dot(t);
        } catch (const Error& e) {
          throw nb::value_error(e.what());
        }
      });

  nb::class_<Recording>(m, "Recording",
                        "A recorded region: `with de.record(engine) as rec:` ... `rec.graph()`.")
      .def("__enter__", [](Recording& r) -> Recording& { r.enter(); return r; },
           nb::rv_policy::reference)
      .def("__exit__", [](Recording& r, nb::args) { r.exit(); })
      .def("graph",
           [](const Recording& r) {
             if (!r.recorder) throw nb::value_error("graph: this region records no graph");
             return r.recorder->graph();
           },
           "A copy of the graph recorded so far (wait for the ops first to have their costs).")
      .def("set_var_name",
           [](Recording& r, nb::handle v, std::string name) {
             if (!r.recorder) throw nb::value_error("set_var_name: this region records no graph");
             std::vector<Var> vars = to_vars(v, "set_var_name");
             for (const Var& x : vars) r.recorder->set_var_name(x.id(), name);
           },
           nb::arg("var"), nb::arg("name"))
      .def("chrome_trace",
           [](const Recording& r) {
             if (!r.profiler) throw nb::value_error("chrome_trace: this region is not profiled");
             return r.profiler->chrome_trace();
           })
      .def("write_chrome_trace",
           [](const Recording& r, const std::string& path) {
             if (!r.profiler) throw nb::value_error("write_chrome_trace: this region is not profiled");
             try {
               r.profiler->write_chrome_trace(path);
             } catch (const Error& e) {
               throw nb::value_error(e.what());
             }
           },
           nb::arg("path"))
      .def("summary", [](const Recording& r) {
        if (!r.profiler) throw nb::value_error("summary: this region is not profiled");
        return r.profiler->summary().table();
      });

  m.def("record",
        [](nb::handle engine, bool graph, bool profile) {
          if (!graph && !profile) throw nb::value_error("record: nothing to record (graph=False, profile=False)");
          Recording r{&engine_arg(engine), nullptr, nullptr};
          if (graph) r.recorder = std::make_shared<GraphRecorder>();
          if (profile) r.profiler = std::make_shared<Profiler>();
          return r;
        },
        nb::arg("engine") = nb::none(), nb::kw_only(), nb::arg("graph") = true,
        nb::arg("profile") = false,
        "Records the pushes to `engine` (default: the current engine) inside a `with` block "
        "into a graph (graph=True) and/or a profile (profile=True).");
  m.def("profile",
        [](nb::handle engine) {
          Recording r{&engine_arg(engine), nullptr, std::make_shared<Profiler>()};
          return r;
        },
        nb::arg("engine") = nb::none(), "record(engine, graph=False, profile=True).");

  nb::class_<graphfile::Program>(m, "Program",
                                 "A graph file: ops named by the vars they read and write, "
                                 "each busy for its cost_us when run.")
      .def_prop_ro("op_count", [](const graphfile::Program& p) { return p.ops.size(); })
      .def_prop_ro("var_names", [](const graphfile::Program& p) { return p.vars; })
      .def("graph", [](const graphfile::Program& p) { return graphfile::to_graph(p); })
      .def("to_json", [](const graphfile::Program& p) { return graphfile::to_json(p); })
      .def("run",
           [](const graphfile::Program& p, nb::handle engine) {
             Engine& e = engine_arg(engine);
             value_errors([&] {
               graphfile::check_devices(p, e.sim_gpus() > 0 ? e.sim_gpus() : Device::gpu_count());
               return 0;
             });
             nb::gil_scoped_release unlocked;
             return graphfile::run(e, p);
           },
           nb::arg("engine") = nb::none(),
           "Runs it on `engine` (default: the current one); returns the wall time in seconds.");
  m.def("load_program",
        [](nb::handle path_arg) {
          // A str or an os.PathLike ("-": standard input).
          nb::object path = nb::steal(PyOS_FSPath(path_arg.ptr()));
          if (!path.is_valid() || !PyUnicode_Check(path.ptr())) {
            PyErr_Clear();
            throw nb::type_error(("load_program: path must be a str or an os.PathLike, got " +
                                  std::string(Py_TYPE(path_arg.ptr())->tp_name)).c_str());
          }
          const std::string p = nb::cast<std::string>(path);
          return value_errors([&] { return graphfile::load_program(p); });
        },
        nb::arg("path").none(), "Reads a graph file or a graph JSON dump.");
  m.def("parse_program",
        [](nb::handle text_arg) {
          if (!PyUnicode_Check(text_arg.ptr())) {
            throw nb::type_error(("parse_program: text must be a str (a graph file or a graph "
                                  "JSON dump), got " + std::string(Py_TYPE(text_arg.ptr())->tp_name))
                                     .c_str());
          }
          const std::string text = nb::cast<std::string>(text_arg);
          return value_errors([&] { return graphfile::parse_program(text); });
        },
        nb::arg("text").none(), "Reads a graph file or a graph JSON dump from a str.");
}

}  // namespace depengine::python
