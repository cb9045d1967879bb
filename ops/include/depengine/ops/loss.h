// depengine/ops/loss.h — per-row softmax cross-entropy, as Gluon's SoftmaxCrossEntropyLoss
// computes it before averaging: one loss per row, and its gradient for given per-row
// output gradients.
//
//   depengine::ops::cpu::softmax_xent_rows(ctx, logits, labels, m, n, false, loss);
//
// `logits` is m×n row-major (log-probabilities when from_logits), `labels` m class indices
// as floats. A label that is not an index in [0, n) throws Error naming it and its row (an
// op's failure: it reaches the next blocker). Rows are independent and chunked by size only,
// so results are the same bits on any number of threads. Thread-safe.
#pragma once

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops::cpu {

// loss[r] = -log softmax(logits[r])[label[r]] (max-shifted), or -logits[r][label[r]] when
// from_logits.
void softmax_xent_rows(const RunContext& ctx, const float* logits, const float* labels,
                       std::size_t m, std::size_t n, bool from_logits, float* loss);

// grad[r] = (softmax(logits[r]) - onehot(label[r])) · dloss[r], or -onehot(label[r]) · dloss[r]
// when from_logits. `grad` may not alias `logits`.
void softmax_xent_rows_backward(const RunContext& ctx, const float* logits, const float* labels,
                                const float* dloss, std::size_t m, std::size_t n,
                                bool from_logits, float* grad);

}  // namespace depengine::ops::cpu
