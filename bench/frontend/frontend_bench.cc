// Frontend benchmarks (Google Benchmark), on Engine::get() unless a case says otherwise:
//   Gemm/*        nd::dot + wait_to_read vs cblas_sgemm called directly with OpenBLAS using
//                 as many threads as the engine has workers (GFLOP/s counters).
//   Bandwidth/*   a + b, a + 1 and copy through NDArray vs memcpy (GB/s of bytes moved).
//   PushCost/*    time from the `a + b` call to its return (the result kept, or dropped).
//   Sharing/*     ten independent 1000x1000 products under three ways of sharing the cores
//                 between engine workers, oneTBB and OpenBLAS (docs/threading.md).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "depengine/ndarray.h"
#include "depengine/ops/gemm.h"

namespace depengine {
namespace {

using Clock = std::chrono::steady_clock;

int workers() { return Engine::get().cpu_threads(); }

void gflops(benchmark::State& state, double n) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = workers();
}

void Gemm_Frontend(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  ops::cpu::pin_blas_threads();
  openblas_set_num_threads(1);
  NDArray a = nd::random_normal({n, n}), b = nd::random_normal({n, n});
  for (auto _ : state) nd::dot(a, b).wait_to_read();
  gflops(state, static_cast<double>(n));
}

void Gemm_CblasDirect(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  openblas_set_num_threads(workers());
  const int ni = static_cast<int>(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni,
                b.data(), ni, 0.0f, c.data(), ni);
    benchmark::DoNotOptimize(c.data());
  }
  openblas_set_num_threads(1);
  gflops(state, static_cast<double>(n));
}

void bytes(benchmark::State& state, std::size_t per_iteration) {
  state.SetBytesProcessed(static_cast<std::int64_t>(per_iteration) * state.iterations());
}

void Bandwidth_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n, 1.0f), c(n);
  for (auto _ : state) {
    std::memcpy(c.data(), a.data(), n * sizeof(float));
    benchmark::DoNotOptimize(c.data());
  }
  bytes(state, 2 * n * sizeof(float));
}

void Bandwidth_Add(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  NDArray a = nd::ones({n}), b = nd::ones({n});
  for (auto _ : state) (a + b).wait_to_read();
  bytes(state, 3 * n * sizeof(float));
}

void Bandwidth_AddScalarInPlace(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  NDArray a = nd::ones({n});
  for (auto _ : state) {
    a += 1.0f;
    a.wait_to_read();
  }
  bytes(state, 2 * n * sizeof(float));
}

void Bandwidth_Copy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  NDArray a = nd::ones({n});
  for (auto _ : state) a.copy().wait_to_read();
  bytes(state, 2 * n * sizeof(float));
}

// The `a + b` call alone: results are kept during a timed batch, then dropped and drained
// outside the timing.
void PushCost_AddKept(benchmark::State& state) {
  constexpr int kBatch = 512;
  NDArray a = nd::ones({16}), b = nd::ones({16});
  std::vector<NDArray> keep(kBatch);
  waitall();
  double pushed = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) keep[static_cast<std::size_t>(i)] = a + b;
    const double batch = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(batch);
    pushed += batch;
    for (NDArray& k : keep) k = NDArray();
    waitall();
  }
  state.counters["ns_per_push"] =
      pushed * 1e9 / (static_cast<double>(state.iterations()) * kBatch);
}

// `c = a + b` in a loop: the call plus dropping the previous result (its deferred delete).
void PushCost_AddDropped(benchmark::State& state) {
  NDArray a = nd::ones({16}), b = nd::ones({16}), c;
  for (auto _ : state) c = a + b;
  state.counters["ns_per_push"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  waitall();
}

// Ten independent products of 1000x1000 matrices, pushed, then waitall.
void ten_products(benchmark::State& state, Engine& e, int blas_threads, bool frontend) {
  constexpr std::size_t n = 1000;
  constexpr int ni = static_cast<int>(n);
  std::vector<std::vector<float>> a(10, std::vector<float>(n * n, 0.5f)), c = a;
  std::vector<Var> vars;
  for (int i = 0; i < 10; ++i) vars.push_back(e.new_var());
  EngineScope use(e);
  std::vector<NDArray> arrays;
  for (int i = 0; i < 10; ++i) arrays.push_back(nd::full({n, n}, 0.5f));
  ops::cpu::pin_blas_threads();
  openblas_set_num_threads(blas_threads);
  e.wait_all();
  for (auto _ : state) {
    std::vector<NDArray> out;
    for (int i = 0; i < 10; ++i) {
      if (frontend) {
        out.push_back(nd::dot(arrays[static_cast<std::size_t>(i)], arrays[static_cast<std::size_t>(i)]));
      } else {
        const float* pa = a[static_cast<std::size_t>(i)].data();
        float* pc = c[static_cast<std::size_t>(i)].data();
        e.push(
            [=] {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, pa, ni, pa,
                          ni, 0.0f, pc, ni);
            },
            {}, {vars[static_cast<std::size_t>(i)]});
      }
    }
    e.wait_all();
  }
  openblas_set_num_threads(1);
  for (Var& v : vars) e.delete_var(v);
  e.wait_all();
  state.counters["GFLOP/s"] =
      benchmark::Counter(10 * 2.0 * 1e9 * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Ours: OpenBLAS on one thread, each product tiled over the engine's workers by oneTBB.
void Sharing_TiledInEngineArena(benchmark::State& state) {
  auto e = Engine::create("threaded", {.cpu_threads = static_cast<int>(state.range(0))});
  ten_products(state, *e, 1, true);
}

// Alternative: whole products per op, OpenBLAS on one thread (inter-op parallelism only).
void Sharing_OneBlasThreadPerOp(benchmark::State& state) {
  auto e = Engine::create("threaded", {.cpu_threads = static_cast<int>(state.range(0))});
  ten_products(state, *e, 1, false);
}

// Alternative: whole products per op, OpenBLAS with its own threads (one per core) inside
// every engine worker: workers x cores threads compete for the cores.
void Sharing_BlasThreadsPerOp(benchmark::State& state) {
  auto e = Engine::create("threaded", {.cpu_threads = static_cast<int>(state.range(0))});
  ten_products(state, *e, static_cast<int>(std::thread::hardware_concurrency()), false);
}

BENCHMARK(Gemm_Frontend)->Arg(256)->Arg(512)->Arg(1000)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Gemm_CblasDirect)->Arg(256)->Arg(512)->Arg(1000)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Bandwidth_Memcpy)->Arg(1 << 18)->Arg(1 << 22)->UseRealTime();
BENCHMARK(Bandwidth_Add)->Arg(1 << 18)->Arg(1 << 22)->UseRealTime();
BENCHMARK(Bandwidth_AddScalarInPlace)->Arg(1 << 18)->Arg(1 << 22)->UseRealTime();
BENCHMARK(Bandwidth_Copy)->Arg(1 << 18)->Arg(1 << 22)->UseRealTime();
BENCHMARK(PushCost_AddKept)->UseManualTime();
BENCHMARK(PushCost_AddDropped)->UseRealTime();
BENCHMARK(Sharing_TiledInEngineArena)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Sharing_OneBlasThreadPerOp)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Sharing_BlasThreadsPerOp)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace depengine

BENCHMARK_MAIN();
