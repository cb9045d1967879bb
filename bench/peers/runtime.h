// The interface every runtime of the peers benchmark implements, one file per runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "workload.h"

namespace depengine::peers {

// Runs a Graph: every task through `run_task`, ordered only by what the runtime derives from
// the tasks' read and write sets. A runtime is used from one thread at a time.
class Runtime {
 public:
  virtual ~Runtime() = default;

  // Untimed set-up for one graph run: vars, registered handles, per-task arguments.
  virtual void prepare(const Graph& graph, Slot* values, std::uint64_t iters) = 0;
  // Timed: submits every task in order and returns once all have finished.
  virtual void run(const Graph& graph, Slot* values, std::uint64_t iters) = 0;
  // Untimed tear-down of what prepare made; `values` hold the final values afterwards.
  virtual void release() {}
};

// A runtime as the driver sees it: either usable, or missing with the reason.
struct RuntimeEntry {
  std::string name{};
  // Runtimes that cannot coexist with each other in one process (StarPU: one scheduler per
  // starpu_init) run in a phase of their own, beside the serial loop.
  bool exclusive = false;
  // Made when the phase starts, destroyed when it ends; null with `missing` set when absent.
  std::function<std::unique_ptr<Runtime>(int threads)> make{};
  std::string missing{};
  // The library's version, for the machine line of the report (empty: none to name).
  std::string version{};
};

// One factory per runtime file. `serial` and the depengine engines are always present.
std::vector<RuntimeEntry> serial_runtimes();
std::vector<RuntimeEntry> depengine_runtimes();
std::vector<RuntimeEntry> openmp_runtimes();
std::vector<RuntimeEntry> tbb_flow_runtimes();
std::vector<RuntimeEntry> starpu_runtimes();
std::vector<RuntimeEntry> taskflow_runtimes();

}  // namespace depengine::peers
