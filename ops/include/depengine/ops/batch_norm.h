// depengine/ops/batch_norm.h — batch normalization over axis 1 of an array viewed as
// (outer, channels, inner): NCHW has outer = N, inner = H·W; an (N, C) matrix inner = 1.
//
//   depengine::ops::BatchNorm g{.outer = 64, .channels = 32, .inner = 26 * 26};
//   depengine::ops::cpu::batch_norm_train(ctx, g, x, gamma, beta, 1e-5f, y, mean, var, inv_std);
//   depengine::ops::cpu::batch_norm_update_running(ctx, g, 0.9f, mean, var, rmean, rvar);
//
// Statistics are per channel, over outer·inner elements, accumulated in double in a fixed
// order (the variance from a second pass around the mean); the variance is the biased one
// (divided by the element count), as MXNet's. Channels are split over oneTBB in fixed
// chunks, so results do not depend on the thread count. gamma == nullptr stands for a scale
// of 1 (MXNet's fix_gamma). Thread-safe.
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops {

struct BatchNorm {
  std::size_t outer = 0, channels = 0, inner = 1;
};

namespace cpu {

// Training: mean, var (biased) and inv_std = 1/sqrt(var + eps) of each channel (each
// `channels` long), and y = gamma·(x − mean)·inv_std + beta.
void batch_norm_train(const RunContext& ctx, const BatchNorm& g, const float* x,
                      const float* gamma, const float* beta, float eps, float* y, float* mean,
                      float* var, float* inv_std);
// Inference: y = gamma·(x − running_mean)/sqrt(running_var + eps) + beta.
void batch_norm_infer(const RunContext& ctx, const BatchNorm& g, const float* x,
                      const float* gamma, const float* beta, const float* running_mean,
                      const float* running_var, float eps, float* y);
// The gradients of the training forward: dx (like x), dgamma and dbeta (per channel; dgamma
// may be nullptr when gamma is fixed). `mean` and `inv_std` are the forward's.
void batch_norm_backward(const RunContext& ctx, const BatchNorm& g, const float* x,
                         const float* dy, const float* gamma, const float* mean,
                         const float* inv_std, float* dx, float* dgamma, float* dbeta);
// running = momentum·running + (1 − momentum)·batch, for the mean and the variance (MXNet's).
void batch_norm_update_running(const RunContext& ctx, const BatchNorm& g, float momentum,
                               const float* mean, const float* var, float* running_mean,
                               float* running_var);
// Backward of the inference forward (running statistics are constants): dx, and dgamma,
// dbeta as in batch_norm_backward (dgamma may be nullptr).
void batch_norm_infer_backward(const RunContext& ctx, const BatchNorm& g, const float* x,
                               const float* dy, const float* gamma,
                               const float* running_mean, const float* running_var, float eps,
                               float* dx, float* dgamma, float* dbeta);

}  // namespace cpu
}  // namespace depengine::ops
