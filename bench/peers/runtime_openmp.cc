// OpenMP tasks (libgomp): one thread of a parallel region creates every task with
// depend(in:) on its read-only vars, depend(inout:) on its read-write vars and depend(out:)
// on its write-only vars, using OpenMP 5.0 iterators for the variable-length lists; the
// region's implicit barrier waits for them all.
#include <omp.h>

#include <string>

#include "runtime.h"

namespace depengine::peers {
namespace {

class OpenMpRuntime final : public Runtime {
 public:
  explicit OpenMpRuntime(int threads) : threads_(threads) {}

  void prepare(const Graph&, Slot*, std::uint64_t) override {}

  void run(const Graph& graph, Slot* values, std::uint64_t iters) override {
    const std::vector<Task>& tasks = graph.tasks();
    const std::size_t n = tasks.size();
#pragma omp parallel num_threads(threads_)
#pragma omp single
    for (std::size_t k = 0; k < n; ++k) {
      const Task* t = &tasks[k];
      const std::uint32_t* ro = t->vars;
      const std::uint32_t* rw = ro + t->n_ro;
      const std::uint32_t* wo = rw + t->n_rw;
      const int n_ro = static_cast<int>(t->n_ro);
      const int n_rw = static_cast<int>(t->n_rw);
      const int n_wo = static_cast<int>(t->n_wo);
#pragma omp task firstprivate(t, k) depend(iterator(i = 0 : n_ro), in : values[ro[i]]) \
    depend(iterator(i = 0 : n_rw), inout : values[rw[i]])                             \
    depend(iterator(i = 0 : n_wo), out : values[wo[i]])
      run_task(*t, k, values, iters);
    }
  }

 private:
  int threads_;
};

}  // namespace

std::vector<RuntimeEntry> openmp_runtimes() {
  return {{.name = "openmp",
           .make = [](int threads) { return std::make_unique<OpenMpRuntime>(threads); },
           .version = "libgomp, OpenMP " + std::to_string(_OPENMP)}};
}

}  // namespace depengine::peers
