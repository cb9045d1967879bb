// depengine_gpu_bench: the GPU measurements of tools/gpu-check.sh, printed as one table.
//
//   build/gpu/bench/gpu/depengine_gpu_bench [--quick | --count]
//
// Rows (each a median of repeated runs, measured in this process on gpu(0)):
//   d2l dot        10 x (1000x1000 · 1000x1000) pushed to the threaded engine: time for the
//                  pushes to return vs time until wait_all returns (push must be far shorter).
//   NDArray dot    the same through the frontend, nd::dot on gpu(0) arrays (each output
//                  allocated from the device's stream-ordered pool and freed as it is dropped).
//   gemm 4096      GEMM through the engine vs cuBLAS alone on one stream: TFLOP/s and the
//                  ratio (target >= 95%).
//   tiny op        per-op wall time of a chain of 1-element kernels through the engine minus
//                  the same chain launched directly on a stream: engine overhead (target <= 5 us).
//   overlap        copies (copy_to_device lane) beside GEMMs (compute lane): share of the run
//                  during which both lanes had work in flight, from the profiler's op times.
//   utilization    a loop of small dependent kernels: kernel time / wall time with event
//                  completion (threaded engine) vs draining the stream after each op (naive).
// Exits 77 (skipped) when no CUDA device is usable.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "depengine/ops/cuda.h"
#include "depengine/engine.h"
#include "depengine/ndarray.h"
#include "depengine/profiler.h"

namespace {

using namespace depengine;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

PushOptions gpu(Lane lane = Lane::compute, const char* name = "op") {
  return PushOptions{.device = Device::gpu(0), .lane = lane, .priority = 0, .name = name};
}

// A device buffer owned by the benchmark, made and freed outside the engine.
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n) {
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), "cudaMalloc");
    cuda_check(cudaMemset(p, 0, n * sizeof(float)), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* p = nullptr;
};

struct Row {
  std::string name, ours, reference, result, target;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// d2l's 10 products of 1000x1000 matrices, `reps` rounds: the time to push them against the
// time until they are done (pushing should return long before the GPU finishes).
template <class Push, class Wait>
Row push_against_done(const char* name, int reps, Push push, Wait wait) {
  std::vector<double> push_s, done_s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    push();
    push_s.push_back(seconds_since(t0));
    wait();
    done_s.push_back(seconds_since(t0));
  }
  const double p = median(push_s) * 1e3, d = median(done_s) * 1e3;
  return {name, fmt("push %.3f ms", p), fmt("done %.3f ms", d),
          fmt("push/done %.1f%%", 100 * p / d), "push << done"};
}

Row d2l_dot(int reps) {
  static constexpr std::size_t n = 1000;
  auto e = Engine::create("threaded");
  DeviceBuffer a(n * n), c(10 * n * n);
  Var va = e->new_var();
  std::vector<Var> vc;
  for (int i = 0; i < 10; ++i) vc.push_back(e->new_var());
  e->push([&](const RunContext& ctx) { ops::cuda::fill(ctx, a.p, n * n, 0.5f); }, {}, {va}, gpu());
  e->wait_all();
  return push_against_done(
      "d2l 10x dot 1000^2", reps,
      [&] {
        for (int i = 0; i < 10; ++i) {
          float* out = c.p + static_cast<std::size_t>(i) * n * n;
          e->push([&a, out](const RunContext& ctx) {
            ops::cuda::gemm(ctx, false, false, n, n, n, 1.f, a.p, n, a.p, n, 0.f, out, n);
          }, {va}, {vc[static_cast<std::size_t>(i)]}, gpu(Lane::compute, "dot"));
        }
      },
      [&] { e->wait_all(); });
}

Row ndarray_dot(int reps) {
  constexpr std::size_t n = 1000;
  auto e = Engine::create("threaded");
  EngineScope use(*e);
  const NDArray a = nd::random_normal({n, n}, 0.f, 1.f, Device::gpu(0));
  a.wait_to_read();
  std::vector<NDArray> out;
  return push_against_done(
      "NDArray 10x dot 1000^2", reps,
      [&] {
        for (int i = 0; i < 10; ++i) out.push_back(nd::dot(a, a));
      },
      [&] {
        waitall();
        out.clear();  // frees the products' storage outside the timed pushes
      });
}

Row gemm_4096(int reps) {
  constexpr std::size_t n = 4096;
  const double flop = 2.0 * n * n * n;
  DeviceBuffer a(n * n), b(n * n), c(n * n);
  // cuBLAS alone, on its own stream.
  cudaStream_t s;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  const float one = 1.f, zero = 0.f;
  std::vector<double> blas_s, ours_s;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) {
      cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.p, n, a.p, n, &zero, c.p, n);
    }
    cuda_check(cudaStreamSynchronize(s), "gemm sync");
    if (r > 0) blas_s.push_back(seconds_since(t0) / 5);
  }
  cublasDestroy(h);
  cudaStreamDestroy(s);
  auto e = Engine::create("threaded");
  Var va = e->new_var(), vb = e->new_var(), vc = e->new_var();
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) {
      e->push([&](const RunContext& ctx) {
        ops::cuda::gemm(ctx, false, false, n, n, n, 1.f, a.p, n, b.p, n, 0.f, c.p, n);
      }, {va, vb}, {vc}, gpu(Lane::compute, "gemm"));
    }
    e->wait_all();
    if (r > 0) ours_s.push_back(seconds_since(t0) / 5);
  }
  const double tb = flop / median(blas_s) / 1e12, to = flop / median(ours_s) / 1e12;
  return {"gemm 4096^2 TFLOP/s", fmt("engine %.2f", to), fmt("cuBLAS %.2f", tb),
          fmt("%.1f%% of cuBLAS", 100 * to / tb), ">= 95%"};
}

Row tiny_op(int ops) {
  DeviceBuffer x(1);
  // The raw chain: the same kernels launched back to back from inside one op, on its stream.
  auto direct = Engine::create("naive");
  Var vd = direct->new_var();
  double raw_s = 0;
  direct->push([&](const RunContext& ctx) {
    ops::cuda::binary_scalar(ctx, ops::Binary::add, x.p, 1.f, false, x.p, 1);  // warm-up
    cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream->native_handle()));
    const auto t0 = Clock::now();
    for (int i = 0; i < ops; ++i) ops::cuda::binary_scalar(ctx, ops::Binary::add, x.p, 1.f, false, x.p, 1);
    cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream->native_handle()));
    raw_s = seconds_since(t0);
  }, {}, {vd}, gpu());
  direct->wait_all();
  auto e = Engine::create("threaded");
  Var vx = e->new_var();
  std::vector<double> per;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < ops; ++i) {
      e->push([&x](const RunContext& ctx) {
        ops::cuda::binary_scalar(ctx, ops::Binary::add, x.p, 1.f, false, x.p, 1);
      }, {vx}, {vx}, gpu(Lane::compute, "tiny"));
    }
    e->wait_all();
    per.push_back(seconds_since(t0));
  }
  const double ours_us = median(per) / ops * 1e6, raw_us = raw_s / ops * 1e6;
  return {"tiny GPU op (chain)", fmt("engine %.2f us/op", ours_us), fmt("raw %.2f us/op", raw_us),
          fmt("overhead %.2f us", ours_us - raw_us), "<= 5 us"};
}

Row overlap() {
  constexpr std::size_t n = 2048, bytes_n = 32u << 20;
  DeviceBuffer a(n * n), c(n * n), dst(bytes_n);
  float* host = ops::cuda::allocate_pinned(bytes_n);
  std::memset(host, 0, bytes_n * sizeof(float));
  auto e = Engine::create("threaded");
  auto prof = std::make_shared<Profiler>();
  e->set_observer(prof);
  Var va = e->new_var(), vc = e->new_var(), vh = e->new_var(), vd = e->new_var();
  for (int i = 0; i < 8; ++i) {
    e->push([&](const RunContext& ctx) {
      ops::cuda::gemm(ctx, false, false, n, n, n, 1.f, a.p, n, a.p, n, 0.f, c.p, n);
    }, {va}, {vc}, gpu(Lane::compute, "gemm"));
    e->push([&](const RunContext& ctx) { ops::cuda::copy_to_device(ctx, host, dst.p, bytes_n); },
            {vh}, {vd}, gpu(Lane::copy_to_device, "h2d"));
  }
  e->wait_all();
  e->set_observer(nullptr);
  ops::cuda::free_pinned(host);
  // Intervals of each lane, then the time both lanes were busy at once.
  std::vector<std::pair<std::int64_t, int>> edges;
  std::int64_t first = INT64_MAX, last = 0;
  for (const OpProfile& op : prof->ops()) {
    if (!op.device.is_gpu() || op.start_ns < 0) continue;
    const int lane = op.lane == Lane::compute ? 0 : 1;
    edges.push_back({op.start_ns, lane + 1});
    edges.push_back({op.end_ns, -(lane + 1)});
    first = std::min(first, op.start_ns);
    last = std::max(last, op.end_ns);
  }
  std::sort(edges.begin(), edges.end());
  int busy[2] = {0, 0};
  std::int64_t both = 0, prev = first;
  for (auto [t, what] : edges) {
    if (busy[0] > 0 && busy[1] > 0) both += t - prev;
    prev = t;
    busy[std::abs(what) - 1] += what > 0 ? 1 : -1;
  }
  const double share = last > first ? 100.0 * static_cast<double>(both) / static_cast<double>(last - first) : 0;
  return {"copy/compute overlap", fmt("both lanes %.1f%%", share), "of the run (profiler)",
          share > 0 ? "overlapping" : "serialized", "> 0%"};
}

Row utilization(int ops) {
  constexpr std::size_t n = 1 << 16;
  DeviceBuffer x(n);
  auto busy_s = [&](Engine& e, Var& v) {
    const auto t0 = Clock::now();
    for (int i = 0; i < ops; ++i) {
      e.push([&x](const RunContext& ctx) {
        ops::cuda::unary(ctx, ops::Unary::sqrt, x.p, x.p, n);
        ops::cuda::binary_scalar(ctx, ops::Binary::add, x.p, 1.f, false, x.p, n);
      }, {v}, {v}, gpu(Lane::compute, "small"));
    }
    e.wait_all();
    return seconds_since(t0);
  };
  auto naive = Engine::create("naive");
  auto threaded = Engine::create("threaded");
  Var vn = naive->new_var(), vt = threaded->new_var();
  // Kernel time alone: the loop back to back on one stream, timed with events.
  double kernel_s = 0;
  naive->push([&](const RunContext& ctx) {
    cudaStream_t s = static_cast<cudaStream_t>(ctx.stream->native_handle());
    cudaEvent_t b, en;
    cudaEventCreate(&b);
    cudaEventCreate(&en);
    cudaEventRecord(b, s);
    for (int i = 0; i < ops; ++i) {
      ops::cuda::unary(ctx, ops::Unary::sqrt, x.p, x.p, n);
      ops::cuda::binary_scalar(ctx, ops::Binary::add, x.p, 1.f, false, x.p, n);
    }
    cudaEventRecord(en, s);
    cudaEventSynchronize(en);
    float ms = 0;
    cudaEventElapsedTime(&ms, b, en);
    kernel_s = ms / 1e3;
    cudaEventDestroy(b);
    cudaEventDestroy(en);
  }, {}, {vn}, gpu());
  naive->wait_all();
  std::vector<double> sync_s, event_s;
  for (int r = 0; r < 3; ++r) {
    sync_s.push_back(busy_s(*naive, vn));
    event_s.push_back(busy_s(*threaded, vt));
  }
  const double ue = 100 * kernel_s / median(event_s), us = 100 * kernel_s / median(sync_s);
  return {"GPU utilization, small ops", fmt("events %.1f%%", ue), fmt("sync each op %.1f%%", us),
          fmt("%.2fx", median(sync_s) / median(event_s)), "events > sync"};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--count") == 0) {
    std::printf("%d\n", Device::gpu_count());
    return 0;
  }
  if (Device::gpu_count() == 0) {
    std::puts("depengine_gpu_bench: no usable CUDA device; skipped");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("depengine GPU benchmarks on %s (%d GPU(s)); medians%s\n", prop.name,
              Device::gpu_count(), quick ? " (--quick)" : "");
  std::vector<std::function<Row()>> rows = {
      [&] { return d2l_dot(quick ? 3 : 7); },
      [&] { return ndarray_dot(quick ? 3 : 7); },
      [&] { return gemm_4096(quick ? 2 : 5); },
      [&] { return tiny_op(quick ? 2000 : 20000); },
      [] { return overlap(); },
      [&] { return utilization(quick ? 500 : 2000); },
  };
  std::printf("%-28s %-26s %-26s %-22s %s\n", "measurement", "depengine", "reference", "result",
              "target");
  int failures = 0;
  for (auto& make : rows) {
    try {
      const Row r = make();
      std::printf("%-28s %-26s %-26s %-22s %s\n", r.name.c_str(), r.ours.c_str(),
                  r.reference.c_str(), r.result.c_str(), r.target.c_str());
    } catch (const std::exception& err) {
      std::printf("%-28s error: %s\n", "(measurement failed)", err.what());
      ++failures;
    }
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
