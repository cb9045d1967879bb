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

#include <array>
#include <cstddef>

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

// A metric's running totals, each updated in place by one op (gluon.metric's Accuracy and
// Loss push these, so an update costs the frontend one push and no blocker). `total` is a
// CPU float array of one element; it is read and written, never recorded by autograd.
// total += count_correct(logits, labels):
void add_count_correct(NDArray& total, const NDArray& logits, const NDArray& labels);
// total += the sum of every element of x (summed in double, in index order):
void add_sum(NDArray& total, const NDArray& x);

// ===== Convolutional networks ==============================================================
//
// Convolution, pooling, softmax, NLL and batch normalization, NCHW, on the CPU and on GPUs
// (CUDA devices and the engine's simulated GPUs): each call checks shapes and devices and
// pushes one op, like the ops above; shape errors name the op and the shapes involved.
// CPU results are the same bits on every engine and any number of workers. While autograd
// records (depengine/autograd.h), convolution, pooling, softmax, log_softmax, nll_loss and
// batch_norm record their gradients; the *_backward functions are those gradients as ops.
//
//   NDArray y = nd::convolution(x, w, b, {1, 1}, {1, 1});       // x (N,C,H,W), w (K,C,3,3)
//   NDArray p = nd::pooling(nd::relu(y), {2, 2}, {2, 2}, {0, 0}, nd::PoolType::max);
//   NDArray loss = nd::nll_loss(nd::log_softmax(logits), labels);  // logits (N, classes): (N,)

// (height, width) of a kernel, a stride or a padding.
using Size2 = std::array<std::size_t, 2>;

// x (N, C, H, W) convolved with w (K, C, kh, kw), plus b (K,) unless b is a null NDArray:
// (N, K, (H + 2·pad − kh) / stride + 1, (W + 2·pad − kw) / stride + 1). Dilation 1.
NDArray convolution(const NDArray& x, const NDArray& w, const NDArray& b, Size2 stride = {1, 1},
                    Size2 pad = {0, 0});
// relu(convolution(x, w, b, stride, pad)), bit for bit: on the CPU one op (the relu applied
// as the kernel stores each output, no pass of its own) and one tape entry whose gradient is
// relu_backward(y, dy) then the convolution's; on a GPU composed of the two.
NDArray convolution_relu(const NDArray& x, const NDArray& w, const NDArray& b,
                         Size2 stride = {1, 1}, Size2 pad = {0, 0});
// The gradients of convolution given dy (its output's shape): with respect to x (of shape
// `x_shape`), to w (of shape `w_shape`), and to b ((K,): dy summed over N, H and W).
NDArray convolution_backward_data(const NDArray& dy, const NDArray& w, const Shape& x_shape,
                                  Size2 stride = {1, 1}, Size2 pad = {0, 0});
NDArray convolution_backward_weight(const NDArray& x, const NDArray& dy, const Shape& w_shape,
                                    Size2 stride = {1, 1}, Size2 pad = {0, 0});
NDArray convolution_backward_bias(const NDArray& dy);

enum class PoolType { max, avg };

// Max or average pooling of x (N, C, H, W) over kernel windows (MXNet's "valid" windows:
// (H + 2·pad − kernel) / stride + 1 outputs per side; pad smaller than the kernel). Average
// pooling divides by the kernel's area when count_include_pad, else by the window's input
// elements. `global` pools each whole plane (kernel, stride and pad are then ignored), to
// (N, C, 1, 1).
NDArray pooling(const NDArray& x, Size2 kernel, Size2 stride, Size2 pad, PoolType type,
                bool global = false, bool count_include_pad = true);
// dx (like x) from dy (like pooling's output); max pooling routes each window's gradient to
// its first maximum (row-major).
NDArray pooling_backward(const NDArray& x, const NDArray& dy, Size2 kernel, Size2 stride,
                         Size2 pad, PoolType type, bool global = false,
                         bool count_include_pad = true);

// softmax / log(softmax) along `axis` (negative counts from the end; out of range: Error).
NDArray softmax(const NDArray& x, int axis = -1);
NDArray log_softmax(const NDArray& x, int axis = -1);
// dx from the forward's output y and dy (both of y's shape), along `axis`.
NDArray softmax_backward(const NDArray& y, const NDArray& dy, bool log, int axis = -1);

// Per-row negative log-likelihood: loss[r] = −logp[r, labels[r]] for logp (m, n) and labels
// (m,) holding class indices as floats; (m,). A label outside [0, n) fails the op on the CPU
// (the Error reaches the next blocker); on a CUDA device that row's loss is NaN.
NDArray nll_loss(const NDArray& logp, const NDArray& labels);
// d loss / d logp given dloss (m,): −dloss[r] at the label, 0 elsewhere; (m, cols).
NDArray nll_loss_backward(const NDArray& dloss, const NDArray& labels, std::size_t cols);

// Batch normalization over axis 1 of x (N, C, ...) with gamma, beta, running_mean and
// running_var all (C,). Training: normalizes with the batch's mean and (biased) variance
// per channel and, in the same op, updates running_* in place as MXNet does:
// running = momentum·running + (1 − momentum)·batch. Inference: normalizes with running_*.
// fix_gamma: gamma is taken as 1 (and gets no gradient), MXNet's fix_gamma.
NDArray batch_norm(const NDArray& x, const NDArray& gamma, const NDArray& beta,
                   NDArray& running_mean, NDArray& running_var, float eps = 1e-5f,
                   float momentum = 0.9f, bool training = true, bool fix_gamma = false);
// The training forward with the statistics its gradient needs: mean and 1/sqrt(var + eps)
// of each channel (C,).
struct BatchNormTrain {
  NDArray y, mean, inv_std;
};
BatchNormTrain batch_norm_train(const NDArray& x, const NDArray& gamma, const NDArray& beta,
                                NDArray& running_mean, NDArray& running_var, float eps = 1e-5f,
                                float momentum = 0.9f, bool fix_gamma = false);
struct BatchNormGrads {
  NDArray dx, dgamma, dbeta;  // dgamma is zeros when fix_gamma
};
// The gradient of the training forward (mean and inv_std from batch_norm_train).
BatchNormGrads batch_norm_backward(const NDArray& x, const NDArray& dy, const NDArray& gamma,
                                   const NDArray& mean, const NDArray& inv_std,
                                   bool fix_gamma = false);
// The gradient of the inference forward (the running statistics held constant).
BatchNormGrads batch_norm_infer_backward(const NDArray& x, const NDArray& dy,
                                         const NDArray& gamma, const NDArray& running_mean,
                                         const NDArray& running_var, float eps = 1e-5f,
                                         bool fix_gamma = false);

}  // namespace depengine::nd
