// Per-op cost of pushing a segment of ops eagerly against replaying it recorded
// (Engine::record / Engine::replay), on the Task Bench patterns of the engine benchmark
// (chain, independent, random DAG) with empty bodies, so the figures are engine overhead,
// and on a chain of ops on one simulated GPU stream (a one-stream segment: one op per replay).
// Each iteration pushes (or replays) the segment and waits for it. After the runs, a table
// gives the median ns per op (1 core = 1 worker) of each and the ratio eager / replay, from this one run.
//
//   ./replay_bench --benchmark_repetitions=5
#include <algorithm>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "scenarios.h"

namespace {

using depengine::Engine;
using depengine::Var;
using depengine::bench::Shape;

constexpr int kOps = 2000;

// The program's ops with their vars resolved, pushed as one segment.
struct Segmented {
  std::vector<Var> vars;
  std::vector<Var> flat;
  std::vector<std::size_t> starts, read_counts;

  Segmented(Engine& e, const depengine::graphfile::Program& p) {
    for (std::size_t v = 0; v < p.vars.size(); ++v) vars.push_back(e.new_var());
    for (const auto& s : p.ops) {
      starts.push_back(flat.size());
      read_counts.push_back(s.reads.size());
      for (std::size_t v : s.reads) flat.push_back(vars[v]);
      for (std::size_t v : s.writes) flat.push_back(vars[v]);
    }
    starts.push_back(flat.size());
  }
  void push_all(Engine& e) const {
    const std::span<const Var> all(flat);
    for (std::size_t k = 0; k + 1 < starts.size(); ++k) {
      const std::size_t n = starts[k + 1] - starts[k];
      e.push([] {}, all.subspan(starts[k], read_counts[k]),
             all.subspan(starts[k] + read_counts[k], n - read_counts[k]));
    }
  }
};

void BM_Segment(benchmark::State& state, std::string kind, Shape shape, bool replay) {
  const int threads = static_cast<int>(state.range(0));
  auto engine = Engine::create(kind, {.cpu_threads = threads});
  const Segmented seg(*engine, depengine::bench::scenario_program(shape, kOps, 0));
  depengine::Segment recorded = engine->record([&] { seg.push_all(*engine); });
  engine->wait_all();
  for (auto _ : state) {
    if (replay) {
      engine->replay(recorded);
    } else {
      seg.push_all(*engine);
    }
    engine->wait_all();
  }
  // Seconds per op, shown in ns by the closing table.
  state.counters["s_per_op"] = benchmark::Counter(
      static_cast<double>(kOps) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// A chain of ops on one simulated GPU stream, each enqueueing an empty host function: eager,
// every op goes through the engine; replayed, the segment is one op whose body enqueues the
// work in stream order (the path a CUDA graph takes on a GPU).
void BM_SimGpuChain(benchmark::State& state, bool replay) {
  const int threads = static_cast<int>(state.range(0));
  auto engine = Engine::create("threaded", {.cpu_threads = threads, .sim_gpus = 1});
  const Var v = engine->new_var();
  auto push_all = [&] {
    for (int k = 0; k < kOps; ++k) {
      engine->push([](const depengine::RunContext& ctx) { ctx.stream->enqueue_host([] {}); }, {},
                   {v}, {.device = depengine::Device::gpu(0)});
    }
  };
  depengine::Segment recorded = engine->record(push_all);
  engine->wait_all();
  for (auto _ : state) {
    if (replay) {
      engine->replay(recorded);
    } else {
      push_all();
    }
    engine->wait_all();
  }
  state.counters["s_per_op"] = benchmark::Counter(
      static_cast<double>(kOps) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Keeps each benchmark's median ns_per_op for the closing table.
class MedianReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> median;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const bool first = r.run_type == Run::RT_Iteration && !median.contains(r.run_name.str());
      if (r.aggregate_name == "median" || first) {
        median[r.run_name.str()] = r.counters.at("s_per_op").value * 1e9;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int cores = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  std::vector<std::string> rows;
  for (Shape shape : {Shape::chain, Shape::independent, Shape::random_dag}) {
    for (const char* kind : {"naive", "threaded"}) {
      for (int threads : {1, cores}) {
        if (std::string(kind) == "naive" && threads != 1) continue;
        const std::string row = std::string(kind) + "/" +
                                std::string(depengine::bench::shape_name(shape)) + "/" +
                                std::to_string(threads);
        rows.push_back(row);
        for (bool replay : {false, true}) {
          const std::string name = (replay ? "replay/" : "eager/") + row;
          benchmark::RegisterBenchmark(name.c_str(), BM_Segment, std::string(kind), shape, replay)
              ->Arg(threads)
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  rows.push_back("threaded/simgpu_chain/" + std::to_string(cores));
  for (bool replay : {false, true}) {
    const std::string name = std::string(replay ? "replay/" : "eager/") + rows.back();
    benchmark::RegisterBenchmark(name.c_str(), BM_SimGpuChain, replay)->Arg(cores)->Unit(
        benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  MedianReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  std::printf("\n%-30s %14s %14s %14s\n", "engine/pattern/threads", "eager ns/op", "replay ns/op",
              "eager/replay");
  for (const std::string& row : rows) {
    auto find = [&](const char* mode) {
      for (const auto& [name, value] : reporter.median) {
        if (name.rfind(std::string(mode) + row + "/", 0) == 0) return value;
      }
      return 0.0;
    };
    const double eager = find("eager/");
    const double replayed = find("replay/");
    if (eager > 0 && replayed > 0) {
      std::printf("%-30s %14.1f %14.1f %14.2f\n", row.c_str(), eager, replayed, eager / replayed);
    }
  }
  return 0;
}
