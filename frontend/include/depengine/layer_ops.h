// depengine/layer_ops.h — fused, differentiable ops behind gluon's Dense layer and
// SoftmaxCrossEntropyLoss: one op forward, and while autograd records one tape entry whose
// backward pushes the few ops of its gradient.
//
//   #include <depengine/layer_ops.h>
//   NDArray h = nd::fully_connected(x, w1, b1, /*relu=*/true);   // relu(x·w1ᵀ + b1)
//   NDArray l = nd::softmax_cross_entropy_rows(nd::fully_connected(h, w2, b2), y);
//
// CPU arrays (an array on a GPU is an Error at the call; gluon composes the same layer from
// np ops there). Shapes are checked at the call (Error naming the op and the shapes, nothing
// pushed). Results are the same bits on every engine and number of workers. Thread safety as
// for NDArray.
#pragma once

#include "depengine/ndarray.h"

namespace depengine::nd {

// MXNet's FullyConnected: x (m, k), weight (n, k), bias (n,) or a null array → (m, n) =
// x·weightᵀ + bias, then max(·, 0) when `relu`. Gradients: dx = dz·weight, dweight = dzᵀ·x,
// dbias = Σ_rows dz, with dz the output's gradient through the relu.
NDArray fully_connected(const NDArray& x, const NDArray& weight, const NDArray& bias,
                        bool relu = false);

// Per-row softmax cross-entropy: logits (m, n), labels (m,) of class indices as floats →
// (m,) with -log softmax(logits[r])[labels[r]] (or -logits[r][labels[r]] when from_logits).
// A label out of range fails the op: the Error, naming the label and its sample, reaches the
// next blocker on the loss (or anything computed from it). Differentiable in logits.
NDArray softmax_cross_entropy_rows(const NDArray& logits, const NDArray& labels,
                                   bool from_logits = false);

}  // namespace depengine::nd
