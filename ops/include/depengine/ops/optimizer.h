// depengine/ops/optimizer.h — fused optimizer updates: one pass over a parameter that reads
// its gradient and writes the weight and the optimizer's states, with Apache MXNet 1.9's
// formulas (sgd_update, sgd_mom_update, adam_update, rmsprop_update, rmspropalex_update, and
// the AdaDelta optimizer's update).
//
//   ops::SgdParams p{.lr = 0.1f, .momentum = 0.9f};
//   ops::cpu::update_sgd(ctx, w, g, mom, n, p);
//
// Every formula starts from the rescaled gradient g' = rescale_grad · g, clipped to
// [-clip_gradient, clip_gradient] when clip_gradient >= 0 (a negative value turns clipping
// off, as MXNet's -1 default). Each element is updated on its own, so results are the same
// bits on any number of threads. The CUDA twins (namespace ops::cuda, CUDA builds only) take
// device pointers and enqueue on ctx's stream. Kernels share no state and are thread-safe.
#pragma once

#include <cstddef>

#include "depengine/config.h"
#include "depengine/stream.h"

namespace depengine::ops {

// sgd_update / sgd_mom_update:
//   momentum == 0: w = (1 - lr·wd)·w - lr·g'
//   otherwise:     mom = momentum·mom - lr·wd·w - lr·g';  w = w + mom
struct SgdParams {
  float lr = 0.01f;
  float momentum = 0.0f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
};

// adam_update (bias correction is the caller's: Gluon's Adam passes
// lr · sqrt(1 - beta2^t) / (1 - beta1^t)):
//   g'' = clip(rescale_grad·g + wd·w)
//   mean = beta1·mean + (1 - beta1)·g'';  var = beta2·var + (1 - beta2)·g''²
//   w = w - lr·mean / (sqrt(var) + epsilon)
struct AdamParams {
  float lr = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
};

// MXNet 1.9's AdaDelta optimizer (it takes no learning rate):
//   acc_g = rho·acc_g + (1 - rho)·g'²
//   delta = sqrt(acc_delta + epsilon) / sqrt(acc_g + epsilon) · g'
//   acc_delta = rho·acc_delta + (1 - rho)·delta²
//   w = w - (delta + wd·w)
struct AdaDeltaParams {
  float rho = 0.9f;
  float epsilon = 1e-5f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
};

// rmsprop_update (centered == false; Tieleman & Hinton):
//   g'' = clip(rescale_grad·g + wd·w);  n = (1 - gamma1)·g''² + gamma1·n
//   w = w - lr·g'' / sqrt(n + epsilon)
// rmspropalex_update (centered == true; Graves):
//   n as above;  m = (1 - gamma1)·g'' + gamma1·m
//   delta = gamma2·delta - lr·g'' / sqrt(n - m² + epsilon);  w = w + delta
// then w is clipped to [-clip_weights, clip_weights] when clip_weights >= 0.
struct RmsPropParams {
  float lr = 0.001f;
  float gamma1 = 0.9f;
  float gamma2 = 0.9f;
  float epsilon = 1e-8f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
  float clip_weights = -1.0f;
  bool centered = false;
};

}  // namespace depengine::ops

namespace depengine::ops::cpu {

// `mom` may be nullptr when p.momentum == 0 (and is ignored then).
void update_sgd(const RunContext& ctx, float* w, const float* g, float* mom, std::size_t n,
                const SgdParams& p);
void update_adam(const RunContext& ctx, float* w, const float* g, float* mean, float* var,
                 std::size_t n, const AdamParams& p);
void update_adadelta(const RunContext& ctx, float* w, const float* g, float* acc_g,
                     float* acc_delta, std::size_t n, const AdaDeltaParams& p);
// `state_g` and `delta` are used (and must be non-null) only when p.centered.
void update_rmsprop(const RunContext& ctx, float* w, const float* g, float* state_n,
                    float* state_g, float* delta, std::size_t n, const RmsPropParams& p);

}  // namespace depengine::ops::cpu

#if DEPENGINE_HAS_CUDA
namespace depengine::ops::cuda {

void update_sgd(const RunContext& ctx, float* w, const float* g, float* mom, std::size_t n,
                const SgdParams& p);
void update_adam(const RunContext& ctx, float* w, const float* g, float* mean, float* var,
                 std::size_t n, const AdamParams& p);
void update_adadelta(const RunContext& ctx, float* w, const float* g, float* acc_g,
                     float* acc_delta, std::size_t n, const AdaDeltaParams& p);
void update_rmsprop(const RunContext& ctx, float* w, const float* g, float* state_n,
                    float* state_g, float* delta, std::size_t n, const RmsPropParams& p);

}  // namespace depengine::ops::cuda
#endif  // DEPENGINE_HAS_CUDA
