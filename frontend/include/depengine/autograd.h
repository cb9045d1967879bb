// depengine/autograd.h — reverse-mode automatic differentiation of NDArray ops, as
// mxnet.autograd: record a forward pass, then push its backward pass to the engine.
//
//   #include <depengine/autograd.h>
//   using namespace depengine;
//   NDArray w = nd::random_normal({784, 10});
//   w.attach_grad();                               // w.grad(): zeros of w's shape
//   NDArray loss;
//   {
//     autograd::RecordScope record;                // ops on this thread are taped
//     loss = nd::sum(nd::square(nd::dot(x, w) - y));
//   }
//   loss.backward();                               // pushed: returns before it has run
//   nd::sgd_update(w, w.grad(), 0.1f);             // ordered after the backward's write
//
// The tape: while a thread records, every differentiable op it pushes whose inputs have a
// history (a variable made by attach_grad, or the output of a recorded op) links a node to
// its inputs' nodes, keeping what its gradient needs (saved arrays). backward() walks the
// nodes reachable from the heads in reverse order of recording and pushes each node's
// gradient ops to the engine, with their reads and writes, like any op; gradients meeting at
// one array are summed in that fixed order, so gradients are the same bits on every engine
// and any number of workers. The saved arrays are dropped as soon as their gradient ops are
// pushed (unless retain_graph), so their storage is freed once those ops have run.
//
// Errors (depengine::Error, thrown at the call, nothing pushed): backward on an array that
// has no history; a second backward through a graph freed by the first (retain_graph);
// an array saved for a gradient and written in place afterwards; in-place ops on arrays with
// a history while recording (as MXNet, which does not support them: write `a = a + b`).
//
// Thread safety: recording state is per thread. Different threads may record and run
// backward on different graphs concurrently; backward calls are serialized process-wide.
#pragma once

#include <vector>

#include "depengine/ndarray.h"

namespace depengine::autograd {

// GradReq (declared in ndarray.h): how a variable's gradient buffer receives its gradient:
// overwritten (write), added to (add), or not at all (null: no history, no gradient).

// The recording and training flags of the calling thread (both false on a new thread).
bool is_recording() noexcept;
bool is_training() noexcept;
// Set the flags; return the previous value.
bool set_recording(bool on) noexcept;
bool set_training(bool on) noexcept;

// autograd.record(train_mode): records (and sets the training flag) until destroyed, then
// restores both flags.
class RecordScope {
 public:
  explicit RecordScope(bool train_mode = true);
  ~RecordScope();
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  bool was_recording_, was_training_;
};

// autograd.pause(train_mode): stops recording (and sets the training flag) until destroyed.
class PauseScope {
 public:
  explicit PauseScope(bool train_mode = false);
  ~PauseScope();
  PauseScope(const PauseScope&) = delete;
  PauseScope& operator=(const PauseScope&) = delete;

 private:
  bool was_recording_, was_training_;
};

// Whether `a` has a history: it is a variable, or the output of an op recorded from one.
bool has_history(const NDArray& a) noexcept;

// Makes `x` a variable: its gradient buffer is a new array of zeros of its shape on its
// device (x.grad()), and ops on it are taped while recording. Again on the same array, a new
// buffer and a fresh history. GradReq::null removes both. The same as x.attach_grad(req).
void mark_variable(NDArray& x, GradReq req = GradReq::write);
// The same with `grad` (x's shape, engine and device) as the gradient buffer.
void mark_variable(NDArray& x, GradReq req, NDArray grad);

// Pushes the gradients of `heads` with respect to every variable they were recorded from,
// into the variables' gradient buffers (by their GradReq). `head_grads`: one per head, each
// of its head's shape (an empty list: ones). Returns at once; the gradient buffers are
// written by the pushed ops. Throws Error for a head without history, a head gradient of
// another shape, or a graph already freed (pass retain_graph to keep it for another pass).
// `train_mode` is the training flag while the gradient ops are made.
void backward(const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads = {},
              bool retain_graph = false, bool train_mode = true);

// The gradients of `heads` with respect to `variables` (arrays with a history: variables or
// recorded outputs), as new arrays, without touching any gradient buffer. A variable the
// heads do not depend on gets zeros.
std::vector<NDArray> grad(const std::vector<NDArray>& heads, const std::vector<NDArray>& variables,
                          const std::vector<NDArray>& head_grads = {}, bool retain_graph = false,
                          bool train_mode = true);

}  // namespace depengine::autograd
