// The floor: a plain loop over the tasks in submission order. Its results are the reference
// every other runtime is checked against, and its time is the serial time of efficiency.
#include "runtime.h"

namespace depengine::peers {
namespace {

class SerialRuntime final : public Runtime {
 public:
  void prepare(const Graph&, Slot*, std::uint64_t) override {}
  void run(const Graph& graph, Slot* values, std::uint64_t iters) override {
    const std::vector<Task>& tasks = graph.tasks();
    for (std::size_t k = 0; k < tasks.size(); ++k) run_task(tasks[k], k, values, iters);
  }
};

}  // namespace

std::vector<RuntimeEntry> serial_runtimes() {
  return {{.name = "serial", .make = [](int) { return std::make_unique<SerialRuntime>(); }}};
}

}  // namespace depengine::peers
