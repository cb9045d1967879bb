// nd::CachedOp: a recorded forward (nd::record) plus the tape nodes it made, kept as a plan
// whose gradient a single tape node pushes on each replay.
#include "depengine/cached_op.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include "autograd_internal.h"

namespace depengine::nd {

namespace ag = autograd::detail;
using depengine::detail::ArrayInternals;

namespace {

// Where a gradient goes: nowhere, into an output slot of a plan node, or out of the cached
// op as its input `index` (a "use": one per edge from the plan to an input or parameter).
struct Target {
  enum Kind { none, node, use } kind = none;
  std::size_t index = 0;
  std::uint32_t output = 0;
};

struct PlanNode {
  std::unique_ptr<ag::Node> node;  // name, backward, shapes, engine, device; no edges
  std::size_t saved_begin = 0, saved_end = 0;
  std::vector<Target> inputs;
};

}  // namespace

struct CachedOp::Data {
  std::string name;
  Segment segment;
  std::vector<NDArray> inputs;   // the private inputs the segment reads
  std::vector<bool> with_grad;
  std::size_t n_params = 0;
  std::vector<NDArray> outputs;  // the segment's outputs (no history)
  // Output i is one of the inputs or parameters: always copied (a replay writes the inputs,
  // an optimizer the parameters).
  std::vector<bool> output_is_boundary;
  // One per output the latest call handed out without a copy: the owner of the handles it
  // made, alive while any handle derived from them is.
  std::vector<std::weak_ptr<const void>> handed;
  // Shared with every call's tape node (its backward), so const after record().
  struct Plan {
    std::vector<PlanNode> nodes;    // latest recorded first: the walk's order
    std::vector<Target> outputs;    // where each output's gradient goes
    std::vector<std::size_t> uses;  // per use: the boundary (input i, or params n_in + j)
    std::vector<Shape> use_shapes;
  };
  std::shared_ptr<const Plan> plan;
  ag::Saved saved;  // the plan nodes' saved arrays, each node's a range
  bool fresh = true;
  std::size_t replays = 0;
  std::weak_ptr<ag::Node> last;
};

namespace {

using Plan = CachedOp::Data::Plan;
using Saved = ag::Saved;

// The cached op's gradient: the plan's nodes in the walk's order, each one's gradient
// pushed as the walk pushes it; a contribution to an input or parameter leaves as the
// gradient of its own use, so the outer walk sums them in the order it would have.
std::vector<NDArray> plan_backward(const Plan& plan, const Saved& saved,
                                   const std::vector<NDArray>& dy) {
  std::vector<NDArray> dx(plan.uses.size());
  std::vector<std::vector<NDArray>> slots(plan.nodes.size());
  auto deliver = [&](const Target& t, const NDArray& g) {
    if (t.kind == Target::node) {
      std::vector<NDArray>& s = slots[t.index];
      s.resize(plan.nodes[t.index].node->output_shapes.size());
      ag::accumulate(s[t.output], g);
    } else if (t.kind == Target::use) {
      ag::accumulate(dx[t.index], g);
    }
  };
  for (std::size_t o = 0; o < dy.size(); ++o) {
    if (dy[o].defined()) deliver(plan.outputs[o], dy[o]);
  }
  for (std::size_t k = 0; k < plan.nodes.size(); ++k) {
    const PlanNode& p = plan.nodes[k];
    if (slots[k].empty()) continue;
    const Saved s(saved.begin() + static_cast<std::ptrdiff_t>(p.saved_begin),
                  saved.begin() + static_cast<std::ptrdiff_t>(p.saved_end));
    ag::push_gradient(
        "backward", *p.node, s, std::move(slots[k]), /*buffers=*/nullptr,
        [&](std::size_t i) { return p.inputs[i].kind != Target::none; },
        [&](std::size_t i, const NDArray& g) { deliver(p.inputs[i], g); });
    slots[k] = {};
  }
  return dx;
}

}  // namespace

CachedOp CachedOp::record(std::string name, std::vector<NDArray> inputs,
                          std::vector<bool> with_grad, std::vector<NDArray> params,
                          const Forward& fn) {
  if (!fn) throw Error("CachedOp::record: " + name + ": the forward is empty");
  if (with_grad.size() != inputs.size()) {
    throw Error("CachedOp::record: " + name + ": " + std::to_string(with_grad.size()) +
                " with_grad flags for " + std::to_string(inputs.size()) + " inputs");
  }
  for (NDArray& a : inputs) {
    depengine::detail::require(a, "CachedOp::record");
    ArrayInternals::set_history(a, nullptr, 0);  // private: a history would only be kept alive
  }
  auto d = std::make_shared<Data>();
  d->name = std::move(name);
  d->with_grad = std::move(with_grad);
  d->n_params = params.size();

  // Each private input with a gradient gets a node of its own, so that the forward's ops
  // are taped from it; the parameters' nodes (variables) are theirs.
  const std::uint64_t start = ag::next_seq();
  std::unordered_map<const ag::Node*, std::size_t> boundary;
  std::vector<NDArray> marked = inputs;
  for (std::size_t i = 0; i < marked.size(); ++i) {
    ArrayInternals::set_history(marked[i], nullptr, 0);
    if (!d->with_grad[i]) continue;
    std::shared_ptr<ag::Node> n = ag::make_node("input");
    n->variable = true;
    boundary.emplace(n.get(), i);
    ArrayInternals::set_history(marked[i], std::move(n), 0);
  }
  for (std::size_t j = 0; j < params.size(); ++j) {
    if (const ag::Node* n = ArrayInternals::node(params[j]).get()) {
      boundary.emplace(n, inputs.size() + j);
    }
  }

  std::vector<NDArray> outs;
  {
    const bool was = autograd::set_recording(true);
    struct Restore {
      bool was;
      ~Restore() { autograd::set_recording(was); }
    } restore{was};
    d->segment = nd::record(inputs, [&] { outs = fn(marked); });
  }

  // The plan: every node the outputs depend on that this recording made.
  std::unordered_map<const ag::Node*, std::size_t> index;
  std::vector<ag::Node*> found, stack;
  for (const NDArray& o : outs) {
    ag::Node* n = ArrayInternals::node(o).get();
    if (n && !boundary.count(n) && !index.count(n)) {
      index.emplace(n, 0);
      stack.push_back(n);
    }
  }
  while (!stack.empty()) {
    ag::Node* n = stack.back();
    stack.pop_back();
    if (n->seq < start) {
      throw Error(d->name + ": the forward reads an array with autograd history that is neither "
                  "one of its inputs nor one of its parameters (op '" + n->name +
                  "'); pass it as an input");
    }
    found.push_back(n);
    for (const ag::Edge& e : n->inputs) {
      ag::Node* m = e.node.get();
      if (m && !boundary.count(m) && !index.count(m)) {
        index.emplace(m, 0);
        stack.push_back(m);
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const ag::Node* a, const ag::Node* b) { return a->seq > b->seq; });
  for (std::size_t k = 0; k < found.size(); ++k) index[found[k]] = k;

  auto plan = std::make_shared<Plan>();
  auto target = [&](const std::shared_ptr<ag::Node>& n, std::uint32_t output) {
    Target t;
    if (!n) return t;
    if (auto b = boundary.find(n.get()); b != boundary.end()) {
      t.kind = Target::use;
      t.index = plan->uses.size();
      plan->uses.push_back(b->second);
      plan->use_shapes.push_back(b->second < inputs.size()
                                     ? inputs[b->second].shape()
                                     : params[b->second - inputs.size()].shape());
      return t;
    }
    t.kind = Target::node;
    t.index = index.at(n.get());
    t.output = output;
    return t;
  };
  for (const NDArray& o : outs) {
    plan->outputs.push_back(target(ArrayInternals::node(o), ArrayInternals::output(o)));
  }
  for (ag::Node* n : found) {
    PlanNode p;
    p.node = std::make_unique<ag::Node>();
    p.node->seq = n->seq;
    p.node->name = n->name;
    p.node->input_shapes = n->input_shapes;
    p.node->output_shapes = n->output_shapes;
    p.node->engine = n->engine;
    p.node->device = n->device;
    p.node->backward = n->backward;
    p.saved_begin = d->saved.size();
    d->saved.insert(d->saved.end(), n->saved.begin(), n->saved.end());
    p.saved_end = d->saved.size();
    for (const ag::Edge& e : n->inputs) p.inputs.push_back(target(e.node, e.output));
    plan->nodes.push_back(std::move(p));
  }
  d->plan = std::move(plan);
  for (NDArray& o : outs) {
    depengine::detail::require(o, "CachedOp::record");
    const auto same = [&](const NDArray& b) {
      return ArrayInternals::chunk(b) == ArrayInternals::chunk(o);
    };
    d->output_is_boundary.push_back(std::any_of(inputs.begin(), inputs.end(), same) ||
                                    std::any_of(params.begin(), params.end(), same));
    d->outputs.push_back(o.detach());
  }
  d->inputs = std::move(inputs);
  CachedOp op;
  op.data_ = std::move(d);
  return op;
}

std::vector<NDArray> CachedOp::operator()(const std::vector<NDArray>& inputs,
                                          const std::vector<NDArray>& params,
                                          bool copy_outputs) {
  if (!data_) throw Error("CachedOp: the op was not recorded (a default CachedOp)");
  Data& d = *data_;
  if (inputs.size() != d.inputs.size() || params.size() != d.n_params) {
    throw Error(d.name + ": called with " + std::to_string(inputs.size()) + " inputs and " +
                std::to_string(params.size()) + " parameters, recorded with " +
                std::to_string(d.inputs.size()) + " and " + std::to_string(d.n_params));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    depengine::detail::require(inputs[i], "CachedOp");
    if (inputs[i].shape() != d.inputs[i].shape()) {
      throw Error(d.name + ": input " + std::to_string(i) + " has shape " +
                  shape_str(inputs[i].shape()) + ", the op was recorded with " +
                  shape_str(d.inputs[i].shape()));
    }
  }
  if (held()) {
    throw Error(d.name + ": called while an output of its previous call, handed out without a "
                "copy, is still alive (a replay would overwrite it); call another op recorded "
                "for the same shapes, or copy the outputs");
  }
  if (d.fresh) {
    d.fresh = false;
  } else {
    nd::replay(d.segment, inputs);
    ++d.replays;
  }
  std::vector<NDArray> outs;
  outs.reserve(d.outputs.size());
  d.handed.clear();
  for (std::size_t i = 0; i < d.outputs.size(); ++i) {
    const NDArray& o = d.outputs[i];
    if (copy_outputs || d.output_is_boundary[i]) {
      outs.push_back(nd::copy(o));
      continue;
    }
    // The handle shares the chunk's storage through an owner of its own, so that held()
    // knows whether anything derived from it is alive.
    const std::shared_ptr<depengine::detail::Chunk>& chunk = ArrayInternals::shared_chunk(o);
    auto owner = std::make_shared<std::shared_ptr<depengine::detail::Chunk>>(chunk);
    d.handed.emplace_back(owner);
    outs.push_back(ArrayInternals::wrap(
        std::shared_ptr<depengine::detail::Chunk>(std::move(owner), chunk.get()), o.shape()));
  }
  const Plan& plan = *d.plan;
  std::vector<NDArray> uses;
  uses.reserve(plan.uses.size());
  for (std::size_t b : plan.uses) {
    uses.push_back(b < inputs.size() ? inputs[b] : params[b - inputs.size()]);
  }
  if (outs.empty() || !ag::should_record(uses)) return outs;
  for (std::size_t u = 0; u < uses.size(); ++u) {
    if (uses[u].shape() != plan.use_shapes[u]) {
      throw Error(d.name + ": a parameter of shape " + shape_str(uses[u].shape()) +
                  " was recorded with shape " + shape_str(plan.use_shapes[u]));
    }
  }
  std::vector<NDArray*> out_ptrs;
  for (NDArray& o : outs) out_ptrs.push_back(&o);
  ag::record_op(d.name, uses, out_ptrs, d.saved,
                [plan = d.plan](const Saved& saved, const std::vector<NDArray>& dy) {
                  return plan_backward(*plan, saved, dy);
                });
  const std::shared_ptr<ag::Node>& n = ArrayInternals::node(outs[0]);
  n->sparse_dy = true;
  d.last = n;
  return outs;
}

bool CachedOp::busy() const {
  if (!data_) return false;
  const std::shared_ptr<ag::Node> n = data_->last.lock();
  return n && !n->freed;
}

bool CachedOp::held() const {
  if (!data_) return false;
  return std::any_of(data_->handed.begin(), data_->handed.end(),
                     [](const std::weak_ptr<const void>& w) { return !w.expired(); });
}

bool CachedOp::release(const std::vector<NDArray*>& arrays) {
  if (!held()) return true;
  Data& d = *data_;
  long handles = 0;
  for (const std::weak_ptr<const void>& w : d.handed) handles += w.use_count();
  if (handles != static_cast<long>(arrays.size())) return false;
  for (const NDArray* a : arrays) {
    const std::shared_ptr<depengine::detail::Chunk>& c = ArrayInternals::shared_chunk(*a);
    const bool ours = std::any_of(d.handed.begin(), d.handed.end(),
                                  [&](const std::weak_ptr<const void>& w) {
                                    return !w.owner_before(c) && !c.owner_before(w);
                                  });
    if (!ours) return false;
  }
  for (NDArray* a : arrays) {
    NDArray own = nd::copy(a->detach());  // detached: the copy is no tape entry
    ArrayInternals::set_history(own, ArrayInternals::node(*a), ArrayInternals::output(*a));
    *a = std::move(own);
  }
  return !held();
}

std::size_t CachedOp::replays() const { return data_ ? data_->replays : 0; }

std::size_t CachedOp::plan_size() const { return data_ ? data_->plan->nodes.size() : 0; }

const Segment& CachedOp::segment() const {
  if (!data_) throw Error("CachedOp::segment: the op was not recorded (a default CachedOp)");
  return data_->segment;
}

}  // namespace depengine::nd
