// depengine/ops/softmax.h — softmax and log-softmax along one axis, their gradients, and the
// negative log-likelihood of log-probabilities.
//
//   depengine::ops::cpu::softmax_forward(ctx, true, x, rows, cols, 1, logp);  // log_softmax
//   depengine::ops::cpu::nll_loss_forward(ctx, logp, labels, rows, cols, loss);
//
// The softmax kernels see the array as [outer, len, inner] (row-major) and normalize along
// len: a rows×cols matrix along its rows is (rows, cols, 1). Each of the outer·inner lines is
// computed by one task in a fixed order (sums in double), so results are the same bits on
// any number of threads. Thread-safe.
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops::cpu {

// y = softmax(x) along len, or log(softmax(x)) when `log`. y may alias x.
void softmax_forward(const RunContext& ctx, bool log, const float* x, std::size_t outer,
                     std::size_t len, std::size_t inner, float* y);
// dx from the forward's output y and dy: y·(dy − Σ dy·y) for softmax, dy − exp(y)·Σ dy for
// log-softmax, the sums along len. dx may alias dy.
void softmax_backward(const RunContext& ctx, bool log, const float* y, const float* dy,
                      std::size_t outer, std::size_t len, std::size_t inner, float* dx);

// loss[r] = −logp[r, labels[r]], labels holding class indices as floats. Throws Error for a
// label that is not an index in [0, cols) (before anything is written).
void nll_loss_forward(const RunContext& ctx, const float* logp, const float* labels,
                      std::size_t rows, std::size_t cols, float* loss);
// dlogp[r, j] = −dloss[r] where j = labels[r], else 0 (overwritten). Labels as above.
void nll_loss_backward(const RunContext& ctx, const float* dloss, const float* labels,
                       std::size_t rows, std::size_t cols, float* dlogp);

}  // namespace depengine::ops::cpu
