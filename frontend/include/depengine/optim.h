// depengine/optim.h — fused optimizer updates on NDArrays, with Apache MXNet 1.9's names and
// formulas (given in full in depengine/ops/optimizer.h, the kernels'). Each call pushes ONE op that reads
// the gradient and writes the weight and the optimizer states in place, and returns at once.
//
//   #include <depengine/optim.h>
//   NDArray mean = nd::zeros(w.shape()), var = nd::zeros(w.shape());
//   nd::adam_update(w, w.grad(), mean, var, {.lr = 0.001f, .rescale_grad = 1.0f / batch});
//   nd::sgd_mom_update(w2, g2, mom2, {.lr = 0.1f, .momentum = 0.9f, .wd = 1e-4f});
//
// Checked at the call (depengine::Error naming the op, nothing pushed): arrays defined, on
// one engine and one device, of the weight's shape; a state or the gradient sharing storage
// with the weight or another state; hyperparameters that are not finite, a learning rate or
// epsilon below 0, decay rates (momentum, beta1, beta2, rho, gamma1, gamma2) outside [0, 1].
// CPU arrays, and GPU arrays (CUDA or simulated), are supported alike.
//
// Thread safety as for NDArray (depengine/ndarray.h): an update is an in-place write, ordered
// by the engine after the earlier reads and writes of the weight and its states.
#pragma once

#include <vector>

#include "depengine/ndarray.h"

namespace depengine::nd {

// The hyperparameters, with MXNet's defaults. A clip bound < 0 turns clipping off (MXNet's -1).
struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
};
struct AdamOptions {
  float lr = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
};
struct AdaDeltaOptions {
  float rho = 0.9f;
  float epsilon = 1e-5f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
};
struct RmsPropOptions {
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

// w = (1 - lr·wd)·w - lr·clip(rescale_grad·grad). `options.momentum` must be 0 (use
// sgd_mom_update for momentum).
void sgd_update(NDArray& weight, const NDArray& grad, const SgdOptions& options);
// mom = momentum·mom - lr·wd·w - lr·clip(rescale_grad·grad); w += mom.
void sgd_mom_update(NDArray& weight, const NDArray& grad, NDArray& mom,
                    const SgdOptions& options);
// MXNet's adam_update; the bias correction is folded into options.lr by the caller (Gluon's
// Adam: lr·sqrt(1 - beta2^t) / (1 - beta1^t)).
void adam_update(NDArray& weight, const NDArray& grad, NDArray& mean, NDArray& var,
                 const AdamOptions& options);
// MXNet 1.9's AdaDelta step (no learning rate).
void adadelta_update(NDArray& weight, const NDArray& grad, NDArray& acc_g, NDArray& acc_delta,
                     const AdaDeltaOptions& options);
// MXNet's rmsprop_update; `options.centered` must be false.
void rmsprop_update(NDArray& weight, const NDArray& grad, NDArray& n,
                    const RmsPropOptions& options);
// MXNet's rmspropalex_update (centered RMSProp); `options.centered` must be true.
void rmspropalex_update(NDArray& weight, const NDArray& grad, NDArray& n, NDArray& g,
                        NDArray& delta, const RmsPropOptions& options);

// Sets every array to zeros (MXNet's reset_arrays, behind Gluon's zero_grad): one op per
// device among them that writes them all. Arrays must be defined and on one engine; an empty
// list pushes nothing.
void reset_arrays(const std::vector<NDArray>& arrays);

}  // namespace depengine::nd
