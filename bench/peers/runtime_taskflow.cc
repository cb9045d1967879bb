// Taskflow (built only with -DDEPENGINE_TASKFLOW_DIR=<the folder holding taskflow/>): an
// executor of `threads` workers, the submitting thread waiting beside them.
//
// - taskflow-async: one silent_dependent_async per task, its predecessors found while
//   submitting from the tasks' read and write sets (per var: the last writer, and the
//   readers since it), on the submitting thread, inside the clock: depengine infers the
//   same edges inside push, so both pay for them.
// - taskflow-graph: a static tf::Taskflow, one task per task and one precede per edge of
//   Graph::predecessors (computed once, before the clock, as the oneTBB flow graph's);
//   building the graph and running it are timed.
#include <string>
#include <vector>

#include <taskflow/taskflow.hpp>

#include "runtime.h"

namespace depengine::peers {
namespace {

class TaskflowAsyncRuntime final : public Runtime {
 public:
  explicit TaskflowAsyncRuntime(int threads) : executor_(static_cast<std::size_t>(threads)) {}

  void prepare(const Graph& graph, Slot*, std::uint64_t) override {
    vars_.assign(graph.num_vars(), VarDeps{});
  }

  void run(const Graph& graph, Slot* values, std::uint64_t iters) override {
    const std::vector<Task>& tasks = graph.tasks();
    std::vector<tf::AsyncTask> deps;
    for (std::size_t k = 0; k < tasks.size(); ++k) {
      const Task* t = &tasks[k];
      deps.clear();
      for (std::uint32_t v : t->read_only()) {
        if (!vars_[v].writer.empty()) deps.push_back(vars_[v].writer);
      }
      for (std::uint32_t v : t->writes()) {
        VarDeps& d = vars_[v];
        if (d.readers.empty()) {
          if (!d.writer.empty()) deps.push_back(d.writer);
        } else {
          deps.insert(deps.end(), d.readers.begin(), d.readers.end());
        }
      }
      tf::AsyncTask task = executor_.silent_dependent_async(
          [t, k, values, iters] { run_task(*t, k, values, iters); }, deps.begin(), deps.end());
      for (std::uint32_t v : t->read_only()) vars_[v].readers.push_back(task);
      for (std::uint32_t v : t->writes()) {
        vars_[v].readers.clear();
        vars_[v].writer = task;
      }
    }
    executor_.wait_for_all();
  }

  void release() override { vars_.clear(); }

 private:
  // Where a var's next accesses find their predecessors. A write depends on the readers
  // since the last write when there are any (each of them came after that write), else on
  // the last write.
  struct VarDeps {
    tf::AsyncTask writer;
    std::vector<tf::AsyncTask> readers;
  };
  tf::Executor executor_;
  std::vector<VarDeps> vars_;
};

class TaskflowGraphRuntime final : public Runtime {
 public:
  explicit TaskflowGraphRuntime(int threads) : executor_(static_cast<std::size_t>(threads)) {}

  void prepare(const Graph& graph, Slot*, std::uint64_t) override { graph.predecessors(); }

  void run(const Graph& graph, Slot* values, std::uint64_t iters) override {
    const std::vector<Task>& tasks = graph.tasks();
    const auto& preds = graph.predecessors();
    tf::Taskflow flow;
    std::vector<tf::Task> nodes;
    nodes.reserve(tasks.size());
    for (std::size_t k = 0; k < tasks.size(); ++k) {
      const Task* t = &tasks[k];
      nodes.push_back(flow.emplace([t, k, values, iters] { run_task(*t, k, values, iters); }));
    }
    for (std::size_t k = 0; k < tasks.size(); ++k) {
      for (std::uint32_t p : preds[k]) nodes[p].precede(nodes[k]);
    }
    executor_.run(flow).wait();
  }

 private:
  tf::Executor executor_;
};

std::string version() {
  return "Taskflow " + std::to_string(TF_MAJOR_VERSION) + "." +
         std::to_string(TF_MINOR_VERSION) + "." + std::to_string(TF_PATCH_VERSION);
}

}  // namespace

std::vector<RuntimeEntry> taskflow_runtimes() {
  return {{.name = "taskflow-async",
           .make = [](int threads) { return std::make_unique<TaskflowAsyncRuntime>(threads); },
           .version = version()},
          {.name = "taskflow-graph",
           .make = [](int threads) { return std::make_unique<TaskflowGraphRuntime>(threads); },
           .version = version()}};
}

}  // namespace depengine::peers
