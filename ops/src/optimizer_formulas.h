// The per-element update formulas of depengine/ops/optimizer.h, shared by the CPU kernels and
// their CUDA twins so that both compute the same expressions in the same order.
#pragma once

#include <cmath>
#include <cstddef>

#include "depengine/ops/optimizer.h"

#if defined(__CUDACC__)
#define DEPENGINE_HD __host__ __device__ inline
#else
#define DEPENGINE_HD inline
#endif

namespace depengine::ops::detail {

// MXNet's clip: a negative bound turns clipping off.
DEPENGINE_HD float clip(float x, float bound) {
  if (bound < 0.0f) return x;
  return x > bound ? bound : (x < -bound ? -bound : x);
}

DEPENGINE_HD void sgd_element(float* w, const float* g, float* mom, std::size_t i,
                              const SgdParams& p) {
  const float gr = clip(p.rescale_grad * g[i], p.clip_gradient);
  if (p.momentum == 0.0f) {
    w[i] = (1.0f - p.lr * p.wd) * w[i] - p.lr * gr;
    return;
  }
  mom[i] = p.momentum * mom[i] - p.lr * p.wd * w[i] - p.lr * gr;
  w[i] = w[i] + mom[i];
}

DEPENGINE_HD void adam_element(float* w, const float* g, float* mean, float* var, std::size_t i,
                               const AdamParams& p) {
  const float gr = clip(p.rescale_grad * g[i] + p.wd * w[i], p.clip_gradient);
  mean[i] = p.beta1 * mean[i] + (1.0f - p.beta1) * gr;
  var[i] = p.beta2 * var[i] + (1.0f - p.beta2) * gr * gr;
  w[i] = w[i] - p.lr * mean[i] / (sqrtf(var[i]) + p.epsilon);
}

DEPENGINE_HD void adadelta_element(float* w, const float* g, float* acc_g, float* acc_delta,
                                   std::size_t i, const AdaDeltaParams& p) {
  const float gr = clip(p.rescale_grad * g[i], p.clip_gradient);
  acc_g[i] = p.rho * acc_g[i] + (1.0f - p.rho) * gr * gr;
  const float delta = sqrtf(acc_delta[i] + p.epsilon) / sqrtf(acc_g[i] + p.epsilon) * gr;
  acc_delta[i] = p.rho * acc_delta[i] + (1.0f - p.rho) * delta * delta;
  w[i] = w[i] - (delta + p.wd * w[i]);
}

DEPENGINE_HD void rmsprop_element(float* w, const float* g, float* n, float* m, float* delta,
                                  std::size_t i, const RmsPropParams& p) {
  const float gr = clip(p.rescale_grad * g[i] + p.wd * w[i], p.clip_gradient);
  n[i] = (1.0f - p.gamma1) * gr * gr + p.gamma1 * n[i];
  float wi;
  if (p.centered) {
    m[i] = (1.0f - p.gamma1) * gr + p.gamma1 * m[i];
    delta[i] = p.gamma2 * delta[i] - p.lr * gr / sqrtf(n[i] - m[i] * m[i] + p.epsilon);
    wi = w[i] + delta[i];
  } else {
    wi = w[i] - p.lr * (gr / sqrtf(n[i] + p.epsilon));
  }
  w[i] = clip(wi, p.clip_weights);
}

}  // namespace depengine::ops::detail
