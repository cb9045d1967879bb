// Per-op overhead and parallel speedup of the naive and threaded engines on the shared
// scenarios. Each iteration pushes a whole scenario and waits for it; the counters report
// ns per op, so runs of different shapes and engines compare directly.
//
//   ./engine_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "scenarios.h"

namespace {

using depengine::bench::Shape;

void BM_Scenario(benchmark::State& state, std::string kind, Shape shape, double op_us) {
  const int threads = static_cast<int>(state.range(0));
  const int ops = op_us >= 20 ? 2000 : op_us >= 1 ? 20000 : 100000;
  auto engine = depengine::Engine::create(kind, {.cpu_threads = threads});
  double total = 0;
  for (auto _ : state) {
    const double seconds = depengine::bench::run_scenario(*engine, shape, ops, op_us);
    state.SetIterationTime(seconds);
    total += seconds;
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(total * 1e9 / (static_cast<double>(ops) * static_cast<double>(state.iterations())));
  state.SetItemsProcessed(static_cast<long>(ops) * state.iterations());
}

// The frontend's side alone: the time to push 100,000 empty ops, each writing a var of its
// own, while the workers run them (the wait for them is not timed). This is the cost that
// bounds independent tasks when ops are short. For an instruction count of the push itself,
// run it under callgrind collecting only inside the push (docs/benchmarks.md):
//   valgrind --tool=callgrind --collect-atstart=no
//     --toggle-collect='depengine::detail::EngineHandle::push_op*'
//     ./engine_bench --benchmark_filter=push_only/2 --benchmark_repetitions=1
void BM_PushOnly(benchmark::State& state) {
  constexpr int kOps = 100000;
  auto engine = depengine::Engine::create(
      "threaded", {.cpu_threads = static_cast<int>(state.range(0)), .max_inflight = -1});
  std::vector<depengine::Var> vars;
  for (int i = 0; i < kOps; ++i) vars.push_back(engine->new_var());
  static std::atomic<long> ran{0};
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (const depengine::Var& v : vars) {
      engine->push([] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v});
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    engine->wait_all();
    state.SetIterationTime(seconds);
    total += seconds;
  }
  state.counters["ns_per_push"] = benchmark::Counter(
      total * 1e9 / (static_cast<double>(kOps) * static_cast<double>(state.iterations())));
}

void register_all() {
  const int cores = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  benchmark::RegisterBenchmark("threaded/push_only", BM_PushOnly)
      ->Arg(1)
      ->Arg(cores)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  for (Shape shape : depengine::bench::kShapes) {
    for (double op_us : {0.0, 1.0, 20.0}) {
      for (const char* kind : {"naive", "threaded"}) {
        std::string name = std::string(kind) + "/" + std::string(depengine::bench::shape_name(shape)) +
                           "/" + std::to_string(static_cast<int>(op_us)) + "us";
        auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Scenario, std::string(kind), shape, op_us);
        b->UseManualTime()->Unit(benchmark::kMillisecond);
        if (std::string(kind) == "naive") {
          b->Arg(1);
        } else {
          b->Arg(1)->Arg(cores);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
