// The tape (autograd_internal.h) and the reverse walk that pushes a backward pass.
#include "depengine/autograd.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd_internal.h"
#include "depengine/ndarray_ops.h"

namespace depengine {
namespace autograd {
namespace {

using depengine::detail::ArrayInternals;

thread_local bool t_recording = false;
thread_local bool t_training = false;

std::atomic<std::uint64_t> g_seq{0};
// The gradient buffers the node being walked may write directly (detail::gradient_buffer),
// one per input (null: none); set only around its backward function, under g_walk_mutex.
thread_local const std::vector<NDArray>* t_buffers = nullptr;
// backward() and grad() read and free nodes that threads may share (an array passed from
// one thread to another carries its history): one walk at a time. A walk only pushes.
std::mutex g_walk_mutex;

std::uint64_t version_of(const NDArray& a) noexcept {
  return ArrayInternals::chunk(a)->version.load(std::memory_order_relaxed);
}

// Restores the thread's flags when a walk ends, by return or by throw.
struct FlagGuard {
  FlagGuard(bool recording, bool training)
      : was_recording(set_recording(recording)), was_training(set_training(training)) {}
  ~FlagGuard() {
    set_recording(was_recording);
    set_training(was_training);
  }
  bool was_recording, was_training;
};

std::string node_name(const detail::Node& n) { return "'" + n.name + "'"; }

// The gradient that reached one output of a node, summed in the walk's order.
void accumulate(NDArray& slot, const NDArray& g) { slot = slot.defined() ? slot + g : g; }

// Every node the heads depend on, latest recorded first (a node's inputs were all recorded
// before it, so this order visits each node after every node that uses it).
std::vector<detail::Node*> reverse_order(const std::vector<NDArray>& heads) {
  std::vector<detail::Node*> order, stack;
  std::unordered_map<detail::Node*, bool> seen;
  for (const NDArray& h : heads) {
    detail::Node* n = ArrayInternals::node(h).get();
    if (n && !seen[n]) {
      seen[n] = true;
      stack.push_back(n);
    }
  }
  while (!stack.empty()) {
    detail::Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const detail::Edge& e : n->inputs) {
      if (e.node && !seen[e.node.get()]) {
        seen[e.node.get()] = true;
        stack.push_back(e.node.get());
      }
    }
  }
  std::sort(order.begin(), order.end(),
            [](const detail::Node* a, const detail::Node* b) { return a->seq > b->seq; });
  return order;
}

// The walk shared by backward() and grad(): pushes every node's gradient ops and returns the
// gradient that reached each output of each node (handles only: their storage is freed once
// the caller drops them and the ops reading them have run).
using Grads = std::unordered_map<detail::Node*, std::vector<NDArray>>;

// The variables (GradReq::write) whose buffers the walk over `order` may write directly: those
// reached by exactly one edge and not a head, whose buffer no node saved and no head gradient
// is (a gradient op pushed later might read it, and must see the old value, as with the copy
// at the end).
std::unordered_set<const detail::Node*> direct_variables(const std::vector<detail::Node*>& order,
                                                         const std::vector<NDArray>& heads,
                                                         const std::vector<NDArray>& head_grads) {
  std::unordered_map<const detail::Node*, int> edges;
  for (const detail::Node* n : order) {
    if (n->variable) continue;
    for (const detail::Edge& e : n->inputs) {
      if (e.node && e.node->variable && e.node->req == GradReq::write) ++edges[e.node.get()];
    }
  }
  std::unordered_set<const depengine::detail::Chunk*> read;
  for (const detail::Node* n : order) {
    for (const NDArray& s : n->saved) read.insert(ArrayInternals::chunk(s));
  }
  for (const NDArray& g : head_grads) read.insert(ArrayInternals::chunk(g));
  for (const NDArray& h : heads) edges[ArrayInternals::node(h).get()] += 2;
  std::unordered_set<const detail::Node*> out;
  for (const auto& [n, count] : edges) {
    if (count == 1 && !read.contains(ArrayInternals::chunk(n->grad))) out.insert(n);
  }
  return out;
}

// Sets t_buffers for one backward function call.
// Saves and restores the outer value: a cached op's gradient (cached_op.cc) runs the gradients
// of its recorded nodes inside its own, and those get no buffers of its inputs.
struct BufferScope {
  explicit BufferScope(const std::vector<NDArray>* buffers)
      : outer_(std::exchange(t_buffers, buffers)) {}
  ~BufferScope() { t_buffers = outer_; }
  BufferScope(const BufferScope&) = delete;
  BufferScope& operator=(const BufferScope&) = delete;

 private:
  const std::vector<NDArray>* outer_;
};

// direct: backward()'s walk, which may let gradient functions write variables' buffers.
Grads walk(const char* fn, const std::vector<NDArray>& heads,
           const std::vector<NDArray>& head_grads, bool retain_graph, bool direct) {
  if (heads.empty()) throw Error(std::string(fn) + ": no heads given");
  if (!head_grads.empty() && head_grads.size() != heads.size()) {
    throw Error(std::string(fn) + ": " + std::to_string(head_grads.size()) +
                " head gradients given for " + std::to_string(heads.size()) + " heads");
  }
  Grads grads;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const NDArray& h = heads[i];
    depengine::detail::require(h, fn);
    const std::shared_ptr<detail::Node>& n = ArrayInternals::node(h);
    if (!n) {
      throw Error(std::string(fn) + ": head " + std::to_string(i) + " of shape " +
                  shape_str(h.shape()) +
                  " has no autograd history: compute it inside autograd::RecordScope "
                  "(autograd.record() in Python) from arrays that have attach_grad()");
    }
    NDArray g;
    if (head_grads.empty() || !head_grads[i].defined()) {
      g = nd::ones_like(h.detach());
    } else {
      if (head_grads[i].shape() != h.shape()) {
        throw Error(std::string(fn) + ": head gradient " + std::to_string(i) + " has shape " +
                    shape_str(head_grads[i].shape()) + ", its head " + shape_str(h.shape()));
      }
      g = head_grads[i].detach();
    }
    std::vector<NDArray>& slots = grads[n.get()];
    slots.resize(n->variable ? 1 : n->output_shapes.size());
    accumulate(slots[ArrayInternals::output(h)], g);
  }
  const std::vector<detail::Node*> order = reverse_order(heads);
  // Checked before anything is pushed, so that a refused walk changes nothing.
  for (const detail::Node* n : order) {
    if (n->variable) continue;
    if (n->freed) {
      throw Error(std::string(fn) + ": the graph through " + node_name(*n) +
                  " was freed by an earlier backward; pass retain_graph=true to that backward "
                  "to run another through the same graph");
    }
    for (std::size_t i = 0; i < n->saved.size(); ++i) {
      if (version_of(n->saved[i]) != n->saved_versions[i]) {
        throw Error(std::string(fn) + ": an array that " + node_name(*n) +
                    " saved for its gradient was written in place after it was recorded");
      }
    }
  }
  const std::unordered_set<const detail::Node*> direct_vars =
      direct ? direct_variables(order, heads, head_grads) : std::unordered_set<const detail::Node*>{};
  std::vector<NDArray> buffers;
  for (detail::Node* n : order) {
    if (n->variable) continue;
    // backward() reads only the variables' slots afterwards: a node's output gradients are
    // moved out to it, so a backward function may find itself their only holder (and reuse
    // their storage); grad() may return any node's, so it copies them.
    std::vector<NDArray> dy = direct ? std::move(grads[n]) : grads[n];
    bool any_buffer = false;
    if (!direct_vars.empty()) buffers.assign(n->inputs.size(), NDArray());
    for (std::size_t i = 0; i < n->inputs.size() && !direct_vars.empty(); ++i) {
      const detail::Node* v = n->inputs[i].node.get();
      if (v && direct_vars.contains(v) && detail::same_shape(v->grad.shape(), n->input_shapes[i])) {
        buffers[i] = v->grad;
        any_buffer = true;
      }
    }
    detail::push_gradient(
        fn, *n, n->saved, std::move(dy), any_buffer ? &buffers : nullptr,
        [&](std::size_t i) { return n->inputs[i].node != nullptr; },
        [&](std::size_t i, const NDArray& g) {
          const detail::Edge& e = n->inputs[i];
          std::vector<NDArray>& slots = grads[e.node.get()];
          slots.resize(e.node->variable ? 1 : e.node->output_shapes.size());
          accumulate(slots[e.output], g);
        });
    if (!retain_graph) {
      n->freed = true;
      n->saved.clear();
      n->backward = nullptr;
    }
  }
  return grads;
}

}  // namespace

bool is_recording() noexcept { return t_recording; }
bool is_training() noexcept { return t_training; }
bool set_recording(bool on) noexcept { return std::exchange(t_recording, on); }
bool set_training(bool on) noexcept { return std::exchange(t_training, on); }

RecordScope::RecordScope(bool train_mode)
    : was_recording_(set_recording(true)), was_training_(set_training(train_mode)) {}
RecordScope::~RecordScope() {
  set_recording(was_recording_);
  set_training(was_training_);
}

PauseScope::PauseScope(bool train_mode)
    : was_recording_(set_recording(false)), was_training_(set_training(train_mode)) {}
PauseScope::~PauseScope() {
  set_recording(was_recording_);
  set_training(was_training_);
}

bool has_history(const NDArray& a) noexcept { return ArrayInternals::node(a) != nullptr; }

void mark_variable(NDArray& x, GradReq req) {
  depengine::detail::require(x, "attach_grad");
  mark_variable(x, req, req == GradReq::null ? NDArray() : nd::zeros_like(x));
}

void mark_variable(NDArray& x, GradReq req, NDArray grad) {
  depengine::detail::Chunk& c = depengine::detail::require(x, "attach_grad");
  if (req == GradReq::null) {
    ArrayInternals::set_history(x, nullptr, 0);
    return;
  }
  auto n = std::make_shared<detail::Node>();
  n->seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  n->name = "variable";
  n->variable = true;
  n->req = req;
  n->engine = c.engine;
  n->device = c.device;
  depengine::detail::Chunk& cg = depengine::detail::require(grad, "attach_grad");
  if (grad.shape() != x.shape() || cg.engine != c.engine || cg.device != c.device) {
    throw Error("attach_grad: the gradient buffer of shape " + shape_str(grad.shape()) + " on " +
                cg.device.str() + " does not match the variable of shape " +
                shape_str(x.shape()) + " on " + c.device.str() + " (or another engine)");
  }
  n->grad = std::move(grad);
  ArrayInternals::set_history(x, std::move(n), 0);
}

void backward(const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads,
              bool retain_graph, bool train_mode) {
  std::lock_guard lock(g_walk_mutex);
  FlagGuard flags(false, train_mode);
  Grads grads = walk("backward", heads, head_grads, retain_graph, true);
  // Variables in the order they were made, so the pushes do not depend on hashing.
  std::vector<std::pair<detail::Node*, NDArray>> reached;
  for (auto& [n, slots] : grads) {
    if (n->variable && !slots.empty() && slots[0].defined()) reached.emplace_back(n, slots[0]);
  }
  std::sort(reached.begin(), reached.end(),
            [](const auto& a, const auto& b) { return a.first->seq < b.first->seq; });
  for (auto& [n, g] : reached) {
    if (n->req == GradReq::add) {
      n->grad += g;
    } else {
      detail::copy_into(n->grad, g);
    }
  }
}

std::vector<NDArray> grad(const std::vector<NDArray>& heads, const std::vector<NDArray>& variables,
                          const std::vector<NDArray>& head_grads, bool retain_graph,
                          bool train_mode) {
  for (std::size_t i = 0; i < variables.size(); ++i) {
    depengine::detail::require(variables[i], "grad");
    if (!ArrayInternals::node(variables[i])) {
      throw Error("grad: variable " + std::to_string(i) + " of shape " +
                  shape_str(variables[i].shape()) +
                  " has no autograd history (attach_grad() it, or pass a recorded output)");
    }
  }
  std::lock_guard lock(g_walk_mutex);
  FlagGuard flags(false, train_mode);
  Grads grads = walk("grad", heads, head_grads, retain_graph, false);
  std::vector<NDArray> out;
  out.reserve(variables.size());
  for (const NDArray& v : variables) {
    detail::Node* n = ArrayInternals::node(v).get();
    auto it = grads.find(n);
    const std::uint32_t o = ArrayInternals::output(v);
    if (it != grads.end() && o < it->second.size() && it->second[o].defined()) {
      out.push_back(it->second[o]);
    } else {
      out.push_back(nd::zeros_like(v));
    }
  }
  return out;
}

namespace detail {

std::shared_ptr<Node> make_node(std::string name) {
  auto n = std::make_shared<Node>();
  n->seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  n->name = std::move(name);
  return n;
}

std::uint64_t next_seq() noexcept { return g_seq.load(std::memory_order_relaxed); }

void accumulate(NDArray& slot, const NDArray& g) { autograd::accumulate(slot, g); }

void push_gradient(const char* fn, const Node& n, const Saved& saved, std::vector<NDArray> dy,
                   const std::vector<NDArray>* buffers,
                   const std::function<bool(std::size_t)>& wants,
                   const std::function<void(std::size_t, const NDArray&)>& deliver) {
  dy.resize(n.output_shapes.size());
  bool any = false;
  for (std::size_t o = 0; o < dy.size(); ++o) {
    if (dy[o].defined()) {
      any = true;
    } else if (!n.sparse_dy) {
      dy[o] = zeros(*n.engine, to_shape(n.output_shapes[o]), n.device);
    }
  }
  if (!any) return;
  std::vector<NDArray> dx;
  {
    BufferScope scope(buffers);
    dx = n.backward(saved, dy);
  }
  if (dx.size() != n.input_shapes.size()) {
    throw Error(std::string(fn) + ": the gradient of " + node_name(n) + " gave " +
                std::to_string(dx.size()) + " arrays for " +
                std::to_string(n.input_shapes.size()) + " inputs");
  }
  for (std::size_t i = 0; i < dx.size(); ++i) {
    if (!wants(i) || !dx[i].defined()) continue;
    if (!same_shape(dx[i].shape(), n.input_shapes[i])) {
      const Shape want = to_shape(n.input_shapes[i]);
      // A gradient of the shape the input was broadcast to is summed down to it.
      const std::optional<Shape> b = depengine::detail::broadcast_shape(dx[i].shape(), want);
      if (b && *b == dx[i].shape()) dx[i] = sum_to(dx[i], want);
      if (dx[i].shape() != want) {
        throw Error(std::string(fn) + ": the gradient of " + node_name(n) + " for input " +
                    std::to_string(i) + " has shape " + shape_str(dx[i].shape()) +
                    ", the input " + shape_str(want));
      }
    }
    deliver(i, dx[i]);
  }
}

NDArray gradient_buffer(std::size_t input) {
  return t_buffers && input < t_buffers->size() ? (*t_buffers)[input] : NDArray();
}

Node::~Node() {
  // Unlink the inputs into a local list and release them one at a time, so that dropping the
  // last handle of a long chain does not recurse once per node.
  // An input that others hold too (a variable, a shared intermediate) is released here: its
  // destructor does not run, so it needs no list.
  std::vector<std::shared_ptr<Node>> pending;
  for (Edge& e : inputs) {
    if (e.node && e.node.use_count() == 1) pending.push_back(std::move(e.node));
  }
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    if (n.use_count() == 1) {
      for (Edge& e : n->inputs) {
        if (e.node) pending.push_back(std::move(e.node));
      }
    }
  }
}

bool should_record(std::initializer_list<const NDArray*> inputs) noexcept {
  if (!t_recording) return false;
  for (const NDArray* a : inputs) {
    if (a && ArrayInternals::node(*a)) return true;
  }
  return false;
}

bool should_record(const std::vector<NDArray>& inputs) noexcept {
  if (!t_recording) return false;
  for (const NDArray& a : inputs) {
    if (ArrayInternals::node(a)) return true;
  }
  return false;
}

namespace {

// inputs[i] is input(i): the inputs as arrays or as pointers to them.
template <class Input>
void record(std::string name, const Input* inputs, std::size_t n_in, NDArray* const* outputs,
            std::size_t n_out, Saved saved, BackwardFn backward) {
  auto input = [&](std::size_t i) -> const NDArray& {
    if constexpr (std::is_pointer_v<Input>) {
      return *inputs[i];
    } else {
      return inputs[i];
    }
  };
  auto n = std::make_shared<Node>();
  n->seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  n->name = std::move(name);
  n->inputs.reserve(n_in);
  n->input_shapes.reserve(n_in);
  for (std::size_t i = 0; i < n_in; ++i) {
    n->inputs.push_back({ArrayInternals::node(input(i)), ArrayInternals::output(input(i))});
    n->input_shapes.push_back(tape_shape(input(i).shape()));
  }
  const depengine::detail::Chunk& first = depengine::detail::require(*outputs[0], "record");
  n->engine = first.engine;
  n->device = first.device;
  n->output_shapes.reserve(n_out);
  for (std::size_t i = 0; i < n_out; ++i) n->output_shapes.push_back(tape_shape(outputs[i]->shape()));
  n->saved_versions.reserve(saved.size());
  for (NDArray& s : saved) {
    ArrayInternals::set_history(s, nullptr, 0);  // detached, without copying its shape
    n->saved_versions.push_back(version_of(s));
  }
  n->saved = std::move(saved);
  n->backward = std::move(backward);
  for (std::size_t i = 0; i + 1 < n_out; ++i) {
    ArrayInternals::set_history(*outputs[i], n, static_cast<std::uint32_t>(i));
  }
  ArrayInternals::set_history(*outputs[n_out - 1], std::move(n), static_cast<std::uint32_t>(n_out - 1));
}

}  // namespace

void record_op(std::string name, std::initializer_list<NDArray> inputs,
               std::initializer_list<NDArray*> outputs, Saved saved, BackwardFn backward) {
  record(std::move(name), inputs.begin(), inputs.size(), outputs.begin(), outputs.size(),
         std::move(saved), std::move(backward));
}

void record_op(std::string name, std::initializer_list<const NDArray*> inputs,
               std::initializer_list<NDArray*> outputs, Saved saved, BackwardFn backward) {
  record(std::move(name), inputs.begin(), inputs.size(), outputs.begin(), outputs.size(),
         std::move(saved), std::move(backward));
}

void record_op(std::string name, const std::vector<NDArray>& inputs,
               std::initializer_list<NDArray*> outputs, Saved saved, BackwardFn backward) {
  record(std::move(name), inputs.data(), inputs.size(), outputs.begin(), outputs.size(),
         std::move(saved), std::move(backward));
}

void record_op(std::string name, const std::vector<NDArray>& inputs,
               const std::vector<NDArray*>& outputs, Saved saved, BackwardFn backward) {
  record(std::move(name), inputs.data(), inputs.size(), outputs.data(), outputs.size(),
         std::move(saved), std::move(backward));
}

void in_place(const NDArray& a, std::initializer_list<const NDArray*> others, const char* op) {
  if (t_recording && (ArrayInternals::node(a) || should_record(others))) {
    throw Error(std::string(op) +
                ": in-place operations (+=, x[...] = v, ...) are not supported on arrays with "
                "autograd history while recording; write a new array instead (a = a + b)");
  }
  bump_version(a);
}

void bump_version(const NDArray& a) noexcept {
  if (depengine::detail::Chunk* c = ArrayInternals::chunk(a)) {
    c->version.fetch_add(1, std::memory_order_relaxed);
    c->is_mask.store(false, std::memory_order_relaxed);
  }
}

NDArray sum_to(const NDArray& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  // The leading axes that the input did not have, and those where it was 1: one reduction.
  const std::size_t lead = g.ndim() - shape.size();
  std::vector<int> axes;
  for (std::size_t d = 0; d < g.ndim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(static_cast<int>(d));
  }
  return nd::sum(g, axes).reshape(shape);
}

}  // namespace detail
}  // namespace autograd

void NDArray::attach_grad(autograd::GradReq req) { autograd::mark_variable(*this, req); }

NDArray NDArray::grad() const {
  const autograd::detail::Node* n = node_.get();
  return n && n->variable ? n->grad : NDArray();
}

NDArray NDArray::detach() const { return NDArray(chunk_, shape_); }

void NDArray::backward() const { autograd::backward({*this}); }

void NDArray::backward(const NDArray& head_grad, bool retain_graph, bool train_mode) const {
  autograd::backward({*this}, {head_grad}, retain_graph, train_mode);
}

}  // namespace depengine
