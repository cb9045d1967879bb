// depengine/ops/nn.h — kernels for training small networks: softmax cross-entropy with its
// gradient, the ReLU gradient, a fused SGD update and a count of correct predictions.
//
//   depengine::ops::cpu::softmax_xent(ctx, logits, labels, m, n, &loss, grad);
//
// Rows are independent and handled in fixed chunks; per-row results are combined on one
// thread in row order, so every result is the same bits on any number of threads.
// Kernels share no state between calls and are thread-safe.
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops::cpu {

// `logits` is m×n row-major, `labels` holds m class indices as floats, each in [0, n).
// loss[0] = mean over rows of -log softmax(logits)[label]; grad = (softmax - onehot) / m,
// the gradient of that mean. `grad` may not alias `logits`. Throws Error for a label that
// is not an index in [0, n).
void softmax_xent(const RunContext& ctx, const float* logits, const float* labels,
                  std::size_t m, std::size_t n, float* loss, float* grad);

// c[r, j] += bias[j] for the m×n row-major c, then c = max(c, 0) when `relu`: the tail of a
// linear layer fused into the op that computed c.
void bias_activation(const RunContext& ctx, float* c, const float* bias, std::size_t m,
                     std::size_t n, bool relu);

// dx[i] = y[i] > 0 ? dy[i] : 0, the gradient through y = relu(x) (y or x may be passed:
// both are positive at the same places). dx may alias dy.
void relu_backward(const RunContext& ctx, const float* y, const float* dy, float* dx,
                   std::size_t n);

// w[i] -= lr · (g[i] + weight_decay · w[i]), in one pass.
void sgd_update(const RunContext& ctx, float* w, const float* g, std::size_t n, float lr,
                float weight_decay);

// out[0] = number of rows r of the m×n `logits` whose argmax (first occurrence) equals
// labels[r].
void count_correct(const RunContext& ctx, const float* logits, const float* labels,
                   std::size_t m, std::size_t n, float* out);
// out[0] += that count (a metric's running total, updated in place).
void add_count_correct(const RunContext& ctx, const float* logits, const float* labels,
                       std::size_t m, std::size_t n, float* out);
// out[0] += x[0] + ... + x[n-1], summed in double in index order.
void add_sum(const RunContext& ctx, const float* x, std::size_t n, float* out);

}  // namespace depengine::ops::cpu
