// depengine/nn.h — NDArray ops for training: GEMM with transposes, softmax cross-entropy
// with its gradient, the ReLU gradient, a fused in-place SGD update and a count of correct
// predictions. Like every NDArray op, each is pushed with its reads and writes and returns
// at once; shapes are checked at the call and a mismatch throws depengine::Error.
//
//   #include <depengine/nn.h>
//   NDArray h = nd::relu(nd::dot(x, w1) + b1);
//   NDArray z = nd::dot(h, w2) + b2;
//   auto [loss, dz] = nd::softmax_cross_entropy(z, y);
//   NDArray dw2 = nd::gemm(h, dz, true, false);   // hᵀ · dz
//   NDArray dh = nd::gemm(dz, w2, false, true);   // dz · w2ᵀ
//   NDArray dz1 = nd::relu_backward(h, dh);
//   nd::sgd_update(w2, dw2, 0.1f);                // w2 -= 0.1 · dw2, in place
//
// The kernels are CPU-only: an array on a GPU is rejected with an Error at the call.
// Results are the same bits on every engine and any number of workers. Thread safety as
// for NDArray (depengine/ndarray.h).
#pragma once

#include "depengine/ndarray.h"

namespace depengine::nd {

// op(a) · op(b) for 2-d arrays, op(x) = xᵀ when its flag is set, without materializing the
// transpose: (m,k)·(k,n) -> (m,n) after the transposes.
NDArray gemm(const NDArray& a, const NDArray& b, bool transpose_a, bool transpose_b);

// A linear layer in one op: x · w + b, then relu when `relu` (x (m,k), w (k,n), b (n,)).
// The same bits as nd::dot(x, w) + b (then nd::relu), with one op instead of two or three.
NDArray linear(const NDArray& x, const NDArray& w, const NDArray& b, bool relu = false);

// The loss and gradient of softmax cross-entropy, pushed as one op.
struct SoftmaxCrossEntropy {
  NDArray loss;  // 0-d: mean over the rows of -log softmax(logits)[label]
  NDArray grad;  // like logits: d loss / d logits = (softmax - onehot) / rows
};
// `logits` is (m, n); `labels` is (m,) holding class indices in [0, n) as floats. A label
// out of range fails the op (the Error reaches the next blocker on loss or grad).
SoftmaxCrossEntropy softmax_cross_entropy(const NDArray& logits, const NDArray& labels);

// The gradient through y = relu(x): dy where y > 0, else 0. `y` and `dy` have one shape.
NDArray relu_backward(const NDArray& y, const NDArray& dy);

// w -= lr · (grad + weight_decay · w), in place: w's var is read and written.
void sgd_update(NDArray& w, const NDArray& grad, float lr, float weight_decay = 0.0f);

// 0-d: how many rows of the (m, n) `logits` have their argmax equal to `labels` (m,).
NDArray count_correct(const NDArray& logits, const NDArray& labels);

}  // namespace depengine::nd
