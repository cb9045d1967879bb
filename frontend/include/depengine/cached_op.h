// depengine/cached_op.h — nd::CachedOp: a forward recorded once with autograd's tape on and
// replayed, under autograd too, as MXNet's CachedOp (what gluon's hybridize() runs on).
//
//   using namespace depengine;
//   autograd::RecordScope rec;
//   nd::CachedOp op = nd::CachedOp::record("mlp", {x.copy()}, {false}, {w},
//       [&](const std::vector<NDArray>& in) { return std::vector<NDArray>{nd::dot(in[0], w)}; });
//   NDArray y = op({x}, {w})[0];        // the recording's own result, a tape node over x, w
//   ...                                  // backward, update w
//   NDArray y2 = op({x2}, {w})[0];       // a replay of the segment: one tape node again
//   nd::sum(y2).backward();              // w.grad(): the same bits as without the cache
//
// The recording runs `fn` once on private `inputs` (nd::record), with the tape on: it keeps
// the forward's ops as a segment and its tape nodes as a plan (their gradient functions and
// the arrays they saved, which are the segment's arrays). Each call after that replays the
// segment (its inputs copied into the private ones; its outputs copied out, so that an
// output kept from an earlier call is not overwritten, or, with copy_outputs false, handed
// out as they are: see held()) and, while this thread records, appends ONE
// tape node whose gradient pushes the plan's gradient ops against the segment's arrays, in
// the order the walk would have pushed the plan's own nodes, and hands each contribution to
// an input or parameter on as a gradient of its own: gradients are summed in the same order
// as without the cache, so they are the same bits, and GradReq write/add/null, retain_graph
// and the saved-array checks work as for any node.
//
// A replay writes the same arrays again, so a call's gradient must be pushed before the
// next replay: busy() says a call's node still needs them (no backward pushed yet, or one
// with retain_graph); and an output handed out without a copy must be dropped before it:
// held() says one is still alive. Call another CachedOp recorded for the same shapes then
// (gluon keeps a pool per shape). Thread safety: one thread at a time per CachedOp.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "depengine/ndarray.h"
#include "depengine/record.h"

namespace depengine::nd {

class CachedOp {
 public:
  using Forward = std::function<std::vector<NDArray>(const std::vector<NDArray>& inputs)>;

  CachedOp() = default;

  // Records fn(inputs) on the current engine with recording on (the training flag as it
  // is). `inputs`: private arrays a call copies its inputs into; `with_grad[i]`: whether
  // input i gets a gradient (a call's input i must then have a history, as it had here);
  // `params`: the arrays with a history (variables) or without (GradReq::null) the forward
  // reads in place, passed again by each call. Throws Error as nd::record does, for sizes
  // that differ, and when the forward reads an array with a history that is neither an input
  // nor a parameter (naming `name`).
  static CachedOp record(std::string name, std::vector<NDArray> inputs,
                         std::vector<bool> with_grad, std::vector<NDArray> params,
                         const Forward& fn);

  // One call: the first after record() returns the recording's own results; later ones
  // replay the segment with `inputs` (shapes as recorded) and read `params` in place. While
  // this thread records, the outputs share one tape node over `inputs` (those with_grad)
  // and `params` (those with a history now). With `copy_outputs` (the default) each output
  // is a copy pushed after the replay; without, it is the segment's own array (no copy: an
  // output that is one of the inputs or parameters is copied all the same), which the next
  // replay overwrites, so the op is held() while any handle to it lives. Throws Error for a
  // wrong count or shape of inputs (naming `name`, the index and both shapes), and while
  // held(); then nothing is pushed.
  std::vector<NDArray> operator()(const std::vector<NDArray>& inputs,
                                  const std::vector<NDArray>& params, bool copy_outputs = true);

  explicit operator bool() const noexcept { return data_ != nullptr; }
  // Whether the tape node of the latest call still needs the segment's arrays (its gradient
  // not pushed yet, or pushed with retain_graph and the node alive).
  bool busy() const;
  // Whether an output that the latest call handed out without a copy is still alive (the
  // array, a copy of its handle, a view or reshape of it, a Python object over it): a replay
  // would overwrite what its holder reads.
  bool held() const;
  // Unholds the op by giving each of `arrays` storage of its own: a copy of its value
  // (pushed, ordered like any op), with the same shape and autograd history. Only when
  // `arrays` are exactly the handles left to the held outputs (each one of them, no other
  // handle, view or copy of a handle alive); else changes nothing. Returns !held().
  //   if (op.held() && !op.release({&y})) ...   // y: the array the previous call returned
  bool release(const std::vector<NDArray*>& arrays);
  // Calls that replayed the segment (the first call does not).
  std::size_t replays() const;
  // The number of tape nodes the plan holds (the forward's recorded ops).
  std::size_t plan_size() const;
  const Segment& segment() const;

  struct Data;  // internal (cached_op.cc)

 private:
  std::shared_ptr<Data> data_;
};

}  // namespace depengine::nd
