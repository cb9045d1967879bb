// oneTBB flow graph: one continue_node per task and one make_edge per predecessor, the
// predecessors derived from the read and write sets (Graph::predecessors, computed once per
// graph before the clock starts, as a user would write the edges down). Building the nodes
// and edges, starting the sources and wait_for_all are timed. Runs in a task_arena of
// `threads` slots, the calling thread being one of them.
#include <deque>
#include <string>

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/version.h>

#include "runtime.h"

namespace depengine::peers {
namespace {

namespace flow = oneapi::tbb::flow;

class TbbFlowRuntime final : public Runtime {
 public:
  explicit TbbFlowRuntime(int threads) : arena_(threads) { arena_.initialize(); }

  void prepare(const Graph& graph, Slot*, std::uint64_t) override { graph.predecessors(); }

  void run(const Graph& graph, Slot* values, std::uint64_t iters) override {
    arena_.execute([&] {
      const std::vector<Task>& tasks = graph.tasks();
      const auto& preds = graph.predecessors();
      flow::graph g;
      std::deque<flow::continue_node<flow::continue_msg>> nodes;
      for (std::size_t k = 0; k < tasks.size(); ++k) {
        const Task* t = &tasks[k];
        nodes.emplace_back(g, [t, k, values, iters](const flow::continue_msg&) {
          run_task(*t, k, values, iters);
        });
      }
      for (std::size_t k = 0; k < tasks.size(); ++k) {
        for (std::uint32_t p : preds[k]) flow::make_edge(nodes[p], nodes[k]);
      }
      for (std::size_t k = 0; k < tasks.size(); ++k) {
        if (preds[k].empty()) nodes[k].try_put(flow::continue_msg());
      }
      g.wait_for_all();
    });
  }

 private:
  oneapi::tbb::task_arena arena_;
};

}  // namespace

std::vector<RuntimeEntry> tbb_flow_runtimes() {
  return {{.name = "tbb-flow",
           .make = [](int threads) { return std::make_unique<TbbFlowRuntime>(threads); },
           .version = std::string("oneTBB ") + TBB_VERSION_STRING}};
}

}  // namespace depengine::peers
