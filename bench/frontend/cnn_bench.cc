// CNN kernels through NDArray (Google Benchmark), at the shapes of the MNIST network of
// issue 25 (batch 64, 28×28): conv 3×3 1→32, conv 3×3 32→64, max-pool 2 — forward and the
// three gradients, each pushed and waited for on Engine::get(). GFLOP/s counts 2·K·C·kh·kw
// multiply-adds per output element (per input-gradient element for backward data).
//   Conv/<which>/<layer>   layer 0: (64,1,28,28) * (32,1,3,3); layer 1: (64,32,26,26) * (64,32,3,3)
//   Pool/<which>           max-pool 2×2 stride 2 of (64,64,24,24)
//   Gemm/<layer>           the same multiply-adds as the layer's forward as one product,
//                          (K, C·kh·kw) · (C·kh·kw, N·oh·ow) through nd::dot: the bound
//                          that im2col + per-image GEMMs are measured against, in one run
#include <benchmark/benchmark.h>

#include "depengine/ndarray.h"
#include "depengine/nn.h"

namespace depengine {
namespace {

struct Layer {
  Shape x, w;
};
const Layer kLayers[] = {{{64, 1, 28, 28}, {32, 1, 3, 3}}, {{64, 32, 26, 26}, {64, 32, 3, 3}}};

double conv_flops(const Layer& l) {
  const double oh = double(l.x[2] - l.w[2] + 1), ow = double(l.x[3] - l.w[3] + 1);
  return 2.0 * double(l.x[0]) * double(l.w[0]) * oh * ow * double(l.w[1] * l.w[2] * l.w[3]);
}

void rate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = Engine::get().cpu_threads();
}

enum Which { forward, backward_data, backward_weight, backward_bias };

void Conv(benchmark::State& state) {
  const Layer& l = kLayers[state.range(1)];
  const auto which = static_cast<Which>(state.range(0));
  const NDArray x = nd::random_normal(l.x), w = nd::random_normal(l.w);
  const NDArray b = nd::random_normal({l.w[0]});
  const NDArray y = nd::convolution(x, w, b);
  const NDArray dy = nd::random_normal(y.shape());
  waitall();
  for (auto _ : state) {
    switch (which) {
      case forward: nd::convolution(x, w, b).wait_to_read(); break;
      case backward_data: nd::convolution_backward_data(dy, w, l.x).wait_to_read(); break;
      case backward_weight: nd::convolution_backward_weight(x, dy, l.w).wait_to_read(); break;
      case backward_bias: nd::convolution_backward_bias(dy).wait_to_read(); break;
    }
  }
  rate(state, which == backward_bias ? double(dy.size()) : conv_flops(l));
}

void Pool(benchmark::State& state) {
  const NDArray x = nd::random_normal({64, 64, 24, 24});
  const NDArray y = nd::pooling(x, {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max);
  const NDArray dy = nd::random_normal(y.shape());
  waitall();
  for (auto _ : state) {
    if (state.range(0) == 0) {
      nd::pooling(x, {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max).wait_to_read();
    } else {
      nd::pooling_backward(x, dy, {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max).wait_to_read();
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(x.size() * sizeof(float)) *
                          state.iterations());
}

void Gemm(benchmark::State& state) {
  const Layer& l = kLayers[state.range(0)];
  const std::size_t oh = l.x[2] - l.w[2] + 1, ow = l.x[3] - l.w[3] + 1;
  const std::size_t taps = l.w[1] * l.w[2] * l.w[3];
  const NDArray a = nd::random_normal({l.w[0], taps}), b = nd::random_normal({taps, l.x[0] * oh * ow});
  waitall();
  for (auto _ : state) nd::dot(a, b).wait_to_read();
  rate(state, conv_flops(l));
}

BENCHMARK(Conv)
    ->ArgNames({"which", "layer"})
    ->ArgsProduct({{forward, backward_data, backward_weight, backward_bias}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(Gemm)->ArgName("layer")->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Pool)->ArgName("backward")->DenseRange(0, 1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace depengine

BENCHMARK_MAIN();
