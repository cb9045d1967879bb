// StarPU 1.3: starpu_task_insert with STARPU_R / STARPU_RW / STARPU_W on one registered
// variable handle per var, implicit (sequentially consistent) data dependencies, CPU
// workers only (STARPU_NCPU = threads). Two runtimes, one per scheduler: "lws" (locality
// work stealing) and "dmda" (deque model data aware, with a history-based performance model
// per task size that StarPU calibrates during the warm-up repetition). StarPU has one
// scheduler per starpu_init, so each lives in its own phase of the driver.
//
// Handles are registered before the clock starts and unregistered after it stops (which
// also returns the data to main memory for the check). Outside the timed runs the workers
// are paused (starpu_pause), so that their polling does not slow the other runtimes down.
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>

#include <starpu.h>

#include "runtime.h"
#include "starpu_start.h"

namespace depengine::peers {
namespace {

struct TaskArg {
  const Task* task;
  std::uint64_t index;
  Slot* values;
  std::uint64_t iters;
};

void cpu_kernel(void** /*buffers*/, void* cl_arg) {
  const auto* a = static_cast<const TaskArg*>(cl_arg);
  run_task(*a->task, a->index, a->values, a->iters);
}

// A codelet per task size, so that dmda's history model of one size is not averaged with
// another's.
struct Codelet {
  starpu_codelet cl;
  starpu_perfmodel model;
  std::string symbol;
};

class StarPuRuntime final : public Runtime {
 public:
  StarPuRuntime(const char* sched, int threads) : sched_(sched) {
    starpu_start(threads, sched);
  }

  ~StarPuRuntime() override {
    release();
    starpu_resume();
    // Codelets and models must outlive every task; starpu_shutdown unloads the models.
    starpu_shutdown();
  }

  void prepare(const Graph& graph, Slot* values, std::uint64_t iters) override {
    handles_.resize(graph.num_vars());
    for (std::size_t v = 0; v < graph.num_vars(); ++v) {
      starpu_variable_data_register(&handles_[v], STARPU_MAIN_RAM,
                                    reinterpret_cast<uintptr_t>(&values[v]), sizeof(Slot));
    }
    const std::vector<Task>& tasks = graph.tasks();
    args_.resize(tasks.size());
    for (std::size_t k = 0; k < tasks.size(); ++k) args_[k] = {&tasks[k], k, values, iters};
    codelet(iters);
  }

  void run(const Graph& graph, Slot*, std::uint64_t iters) override {
    starpu_codelet* cl = &codelet(iters).cl;
    const std::vector<Task>& tasks = graph.tasks();
    std::vector<starpu_data_descr> descr;
    for (std::size_t k = 0; k < tasks.size(); ++k) {
      const Task& t = tasks[k];
      descr.clear();
      for (std::uint32_t v : t.read_only()) descr.push_back({handles_[v], STARPU_R});
      for (std::uint32_t v : t.read_write()) descr.push_back({handles_[v], STARPU_RW});
      for (std::uint32_t v : t.write_only()) descr.push_back({handles_[v], STARPU_W});
      const int rc = starpu_task_insert(cl, STARPU_DATA_MODE_ARRAY, descr.data(),
                                        static_cast<int>(descr.size()), STARPU_CL_ARGS_NFREE,
                                        &args_[k], sizeof(TaskArg), 0);
      if (rc != 0) {
        starpu_resume();
        starpu_task_wait_for_all();
        starpu_pause();
        throw std::runtime_error("starpu_task_insert failed (" + std::to_string(rc) + ")");
      }
    }
    // StarPU's documented idiom for a program that uses it for a part of its run: submit
    // while the workers are paused, then resume them (on 2 cores this keeps polling workers
    // from slowing the submitting thread down).
    starpu_resume();
    starpu_task_wait_for_all();
    starpu_pause();
  }

  void release() override {
    for (starpu_data_handle_t h : handles_) starpu_data_unregister(h);
    handles_.clear();
  }

 private:
  Codelet& codelet(std::uint64_t iters) {
    std::unique_ptr<Codelet>& c = codelets_[iters];
    if (!c) {
      c = std::make_unique<Codelet>();
      starpu_codelet_init(&c->cl);
      c->cl.cpu_funcs[0] = cpu_kernel;
      c->cl.nbuffers = STARPU_VARIABLE_NBUFFERS;
      c->cl.name = "peers_task";
      // Only the model-driven scheduler gets a model: with lws it would only add timing.
      if (std::string(sched_) == "dmda") {
        c->symbol = "depengine_peers_" + std::to_string(iters);
        c->model = starpu_perfmodel{};
        c->model.type = STARPU_HISTORY_BASED;
        c->model.symbol = c->symbol.c_str();
        c->cl.model = &c->model;
      }
    }
    return *c;
  }

  const char* sched_;
  std::vector<starpu_data_handle_t> handles_;
  std::vector<TaskArg> args_;
  std::map<std::uint64_t, std::unique_ptr<Codelet>> codelets_;
};

}  // namespace

std::vector<RuntimeEntry> starpu_runtimes() {
  std::vector<RuntimeEntry> out;
  for (const char* sched : {"lws", "dmda"}) {
    out.push_back({.name = std::string("starpu-") + sched,
                   .exclusive = true,
                   .make = [sched](int threads) {
                     return std::make_unique<StarPuRuntime>(sched, threads);
                   },
                   .version = "StarPU " + std::to_string(STARPU_MAJOR_VERSION) + "." +
                              std::to_string(STARPU_MINOR_VERSION) + "." +
                              std::to_string(STARPU_RELEASE_VERSION)});
  }
  return out;
}

}  // namespace depengine::peers
