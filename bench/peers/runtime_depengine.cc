// depengine, threaded and naive: each task is one push with the task's read and write sets
// as Var lists; the engine infers the dependencies. Vars are made before the clock starts,
// as an application holds them already (an NDArray owns its var). `depengine` has `threads`
// workers, and the frontend thread pushes and then runs ops in wait_all: threads + 1 in
// all. `depengine-lean` has threads - 1 workers, so that with the frontend thread it uses
// exactly `threads`, as OpenMP's team and oneTBB's arena do (their master counts).
// `depengine-bounded` is `depengine` with at most kBound ops in flight (back-pressure, the
// chapter's remedy for a queue that eats memory): the frontend blocks instead of running
// tens of thousands of ops ahead, whose records are then out of the cache when they run.
// The others, like every peer here, are unbounded.
#include <algorithm>
#include <span>

#include <depengine/engine.h>

#include "runtime.h"

namespace depengine::peers {
namespace {

constexpr long kBound = 4096;  // depengine-bounded's max_inflight

class DepengineRuntime final : public Runtime {
 public:
  DepengineRuntime(const char* kind, int workers, long max_inflight = -1)
      : engine_(Engine::create(kind, {.cpu_threads = workers, .max_inflight = max_inflight})) {}

  void prepare(const Graph& graph, Slot*, std::uint64_t) override {
    vars_.clear();
    for (std::size_t v = 0; v < graph.num_vars(); ++v) vars_.push_back(engine_->new_var());
    // The tasks' accesses as Vars, laid out like graph.flat(), so each push passes two spans
    // of it without building lists.
    flat_.clear();
    flat_.reserve(graph.flat().size());
    for (std::uint32_t v : graph.flat()) flat_.push_back(vars_[v]);
  }

  void run(const Graph& graph, Slot* values, std::uint64_t iters) override {
    const std::vector<Task>& tasks = graph.tasks();
    const Var* base = flat_.data();
    for (std::size_t k = 0; k < tasks.size(); ++k) {
      const Task* t = &tasks[k];
      const Var* acc = base + graph.offset(k);
      engine_->push([t, k, values, iters] { run_task(*t, k, values, iters); },
                    std::span<const Var>(acc, t->n_ro + t->n_rw),
                    std::span<const Var>(acc + t->n_ro, t->n_rw + t->n_wo));
    }
    engine_->wait_all();
  }

  void release() override {
    flat_.clear();
    vars_.clear();
  }

 private:
  std::unique_ptr<Engine> engine_;
  std::vector<Var> vars_;
  std::vector<Var> flat_;
};

}  // namespace

std::vector<RuntimeEntry> depengine_runtimes() {
  return {
      {.name = "depengine",
       .make = [](int threads) { return std::make_unique<DepengineRuntime>("threaded", threads); }},
      {.name = "depengine-lean",
       .make =
           [](int threads) {
             return std::make_unique<DepengineRuntime>("threaded", std::max(1, threads - 1));
           }},
      {.name = "depengine-bounded",
       .make =
           [](int threads) {
             return std::make_unique<DepengineRuntime>("threaded", threads, kBound);
           }},
      {.name = "depengine-naive",
       .make = [](int threads) { return std::make_unique<DepengineRuntime>("naive", threads); }},
  };
}

}  // namespace depengine::peers
