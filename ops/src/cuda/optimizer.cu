// GPU kernels of depengine/ops/optimizer.h: one grid-stride loop per optimizer over the
// formulas the CPU kernels use (../optimizer_formulas.h).
#include "../optimizer_formulas.h"
#include "common.cuh"
#include "depengine/ops/optimizer.h"

namespace depengine::ops::cuda {
namespace {

// Functors rather than __device__ lambdas, which would need nvcc's --extended-lambda.
struct Sgd {
  float *w, *mom;
  const float* g;
  SgdParams p;
  __device__ void operator()(std::size_t i) const { ops::detail::sgd_element(w, g, mom, i, p); }
};
struct Adam {
  float *w, *mean, *var;
  const float* g;
  AdamParams p;
  __device__ void operator()(std::size_t i) const {
    ops::detail::adam_element(w, g, mean, var, i, p);
  }
};
struct AdaDelta {
  float *w, *acc_g, *acc_delta;
  const float* g;
  AdaDeltaParams p;
  __device__ void operator()(std::size_t i) const {
    ops::detail::adadelta_element(w, g, acc_g, acc_delta, i, p);
  }
};
struct RmsProp {
  float *w, *n, *m, *delta;
  const float* g;
  RmsPropParams p;
  __device__ void operator()(std::size_t i) const {
    ops::detail::rmsprop_element(w, g, n, m, delta, i, p);
  }
};

template <class F>
__global__ void each_kernel(std::size_t n, F f) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    f(i);
  }
}

template <class F>
void launch(const RunContext& ctx, const char* op, std::size_t n, const F& f) {
  cudaStream_t s = detail::stream_of(ctx, op);
  if (n == 0) return;
  each_kernel<<<detail::blocks_for(n), detail::kThreads, 0, s>>>(n, f);
  detail::check_launch(ctx, op);
}

}  // namespace

void update_sgd(const RunContext& ctx, float* w, const float* g, float* mom, std::size_t n,
                const SgdParams& p) {
  launch(ctx, "sgd_update", n, Sgd{w, mom, g, p});
}

void update_adam(const RunContext& ctx, float* w, const float* g, float* mean, float* var,
                 std::size_t n, const AdamParams& p) {
  launch(ctx, "adam_update", n, Adam{w, mean, var, g, p});
}

void update_adadelta(const RunContext& ctx, float* w, const float* g, float* acc_g,
                     float* acc_delta, std::size_t n, const AdaDeltaParams& p) {
  launch(ctx, "adadelta_update", n, AdaDelta{w, acc_g, acc_delta, g, p});
}

void update_rmsprop(const RunContext& ctx, float* w, const float* g, float* state_n,
                    float* state_g, float* delta, std::size_t n, const RmsPropParams& p) {
  launch(ctx, p.centered ? "rmspropalex_update" : "rmsprop_update", n,
         RmsProp{w, state_n, state_g, delta, g, p});
}

}  // namespace depengine::ops::cuda
