// Autograd internals for the files that define differentiable ops: how an op joins the tape.
//
//   NDArray nd::exp(const NDArray& a) {
//     NDArray y = unary(ops::Unary::exp, a);               // the forward op, pushed
//     if (autograd::detail::should_record({&a}))
//       autograd::detail::record_op("exp", {a}, {&y}, {y},
//           [](const autograd::detail::Saved& s, const std::vector<NDArray>& dy) {
//             return std::vector<NDArray>{dy[0] * s[0]};   // one gradient per input
//           });
//     return y;
//   }
//
// A backward function gets the saved arrays and one gradient per output (zeros where an
// output got none) and returns one gradient per input, of that input's shape (or of a shape
// the input broadcasts to: the walk sums it down, as sum_to), or a null NDArray for an input
// that gets none. It may compute into the storage of a gradient in `dy` whose only handle is
// dy's (backward() moves them to it; nothing else can read it later). It runs with recording
// paused, so the ops it calls are
// pushed like any op. It must not capture NDArrays (they would keep the history alive in a
// cycle): what it needs goes in `saved`; shapes, scalars and flags may be captured.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "depengine/autograd.h"
#include "internal.h"

namespace depengine::autograd::detail {

using Saved = std::vector<NDArray>;
using BackwardFn =
    std::function<std::vector<NDArray>(const Saved& saved, const std::vector<NDArray>& dy)>;

// A shape the tape keeps: up to 4 dimensions inline, so that recording an op allocates
// no block per shape (recording is on the push path of every op).
using TapeShape = boost::container::small_vector<std::size_t, 4>;
inline TapeShape tape_shape(const Shape& s) { return TapeShape(s.begin(), s.end()); }
inline Shape to_shape(const TapeShape& s) { return Shape(s.begin(), s.end()); }
inline bool same_shape(const Shape& a, const TapeShape& b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// One input of a node: the node that made it and which output (null node: no gradient).
struct Edge {
  std::shared_ptr<Node> node;
  std::uint32_t output = 0;
};

// A node of the tape: a recorded op, or a variable (attach_grad).
struct Node {
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Iterative: a chain of a million recorded ops must not recurse a million frames deep.
  ~Node();

  std::uint64_t seq = 0;  // the order of recording (process-wide), for the reverse walk
  std::string name;
  // A variable's gradient buffer and how it receives the gradient.
  bool variable = false;
  GradReq req = GradReq::write;
  NDArray grad;
  // An op's inputs, outputs and gradient.
  // Inline for the usual few inputs and outputs: one allocation fewer each.
  boost::container::small_vector<Edge, 3> inputs;
  boost::container::small_vector<TapeShape, 3> input_shapes;
  boost::container::small_vector<TapeShape, 1> output_shapes;
  Engine* engine = nullptr;
  Device device = Device::cpu();
  Saved saved;
  boost::container::small_vector<std::uint64_t, 3> saved_versions;
  BackwardFn backward;
  bool freed = false;  // a backward without retain_graph dropped saved and backward
  // The backward gets a null array (not zeros) for an output no gradient reached: a cached
  // op (cached_op.h) passes them on to its own nodes, which then skip as the walk would.
  bool sparse_dy = false;
};

// A new node named `name` with the next sequence number (the order of recording).
std::shared_ptr<Node> make_node(std::string name);
// The sequence number the next node will get: every node recorded from now on has one at
// least as large.
std::uint64_t next_seq() noexcept;
// slot += g as the walk sums the gradients that meet at one array (slot = g when null).
void accumulate(NDArray& slot, const NDArray& g);
// The walk's step for one node: pushes n.backward(saved, dy) when any of `dy` (one per
// output; null where no gradient reached) is defined, the others made zeros (unless
// n.sparse_dy); hands the gradient of each input i for which wants(i), summed down to the
// input's shape, to deliver(i, g). `buffers` (null: none) are what gradient_buffer() gives
// n.backward. Throws Error (prefixed `fn`) for a gradient of a wrong count or shape.
void push_gradient(const char* fn, const Node& n, const Saved& saved, std::vector<NDArray> dy,
                   const std::vector<NDArray>* buffers,
                   const std::function<bool(std::size_t)>& wants,
                   const std::function<void(std::size_t, const NDArray&)>& deliver);

// True when this thread records and one of `inputs` (null arrays allowed) has a history.
bool should_record(std::initializer_list<const NDArray*> inputs) noexcept;
bool should_record(const std::vector<NDArray>& inputs) noexcept;

// Appends a node for the op `name` that read `inputs` and made `outputs` (their history is
// set to it; outputs must be defined arrays on one engine). `saved` are kept, detached, with
// their storage versions, and handed to `backward`.
// (The initializer_list forms build no vector: recording is on the push path of every op.)
void record_op(std::string name, std::initializer_list<NDArray> inputs,
               std::initializer_list<NDArray*> outputs, Saved saved, BackwardFn backward);
void record_op(std::string name, std::initializer_list<const NDArray*> inputs,
               std::initializer_list<NDArray*> outputs, Saved saved, BackwardFn backward);
void record_op(std::string name, const std::vector<NDArray>& inputs,
               std::initializer_list<NDArray*> outputs, Saved saved, BackwardFn backward);
void record_op(std::string name, const std::vector<NDArray>& inputs,
               const std::vector<NDArray*>& outputs, Saved saved, BackwardFn backward);

// For an op that writes `a` in place, at push time: refused (Error naming `op`) while this
// thread records and `a` or one of `others` has a history, as in MXNet; else counts the write
// in a's storage version.
void in_place(const NDArray& a, std::initializer_list<const NDArray*> others, const char* op);
// Counts a write to a's storage (an op that overwrites it outside the tape's view).
void bump_version(const NDArray& a) noexcept;

// `g` summed over the axes along which an input of shape `shape` was broadcast to g's shape
// (g itself when the shapes are equal).
NDArray sum_to(const NDArray& g, const Shape& shape);
// Zeros of `shape` on `device` of `e` (for gradients that did not reach an output).
NDArray zeros(Engine& e, const Shape& shape, Device device);
// Pushes a copy of `src` into the storage of `dst` (same shape, engine and device): a write
// of dst, as a gradient buffer receives a GradReq::write gradient.
void copy_into(const NDArray& dst, const NDArray& src);

// Inside a backward function, during backward(): the gradient buffer of input `input` when
// the function may write that input's gradient straight into it, else a null array. It is
// given for a variable with GradReq::write whose gradient this node alone gives (one edge to
// it in the walk) and whose buffer no node of the walk saved, so no later gradient op reads
// the old value. A function that pushes input i's gradient (of the input's shape) into this
// array and returns it saves the walk's copy_into (copy_into of an array into itself pushes
// nothing); ignoring it is always correct.
NDArray gradient_buffer(std::size_t input);

}  // namespace depengine::autograd::detail
