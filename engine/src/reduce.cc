#include "reduce.h"

#include <string>

namespace depengine::detail {

void ReduceLinksDelete::operator()(ReduceLinks* links) const noexcept { delete links; }

void* ReduceGroup::buffer() {
  const std::thread::id me = std::this_thread::get_id();
  {
    std::lock_guard lk(lock_);
    for (auto& [thread, buf] : buffers_) {
      if (thread == me) return buf.get();
    }
  }
  // Made outside the lock: the hook may be slow (allocating and zeroing a large buffer).
  std::shared_ptr<void> buf = hooks_->identity();
  if (!buf) throw Error("Reduction::identity returned a null buffer");
  void* raw = buf.get();
  std::lock_guard lk(lock_);
  buffers_.emplace_back(me, std::move(buf));
  return raw;
}

void ReduceGroup::fail(const Failure& failure) noexcept {
  std::lock_guard lk(lock_);
  failure_.keep_earliest(failure);
}

Failure ReduceGroup::failure() const noexcept {
  std::lock_guard lk(lock_);
  return failure_;
}

void ReduceGroup::combine_all() {
  // The combining op holds the var alone, after every contribution: no lock needed.
  std::vector<std::pair<std::thread::id, std::shared_ptr<void>>> bufs = std::move(buffers_);
  buffers_.clear();
  const auto& combine = hooks_->combine;
  // Level by level: buffer i takes buffer i + stride, for every i that is a multiple of
  // 2 * stride (a pairwise tree, as StarPU combines its per-worker buffers: depth log2 of
  // the buffer count, which also keeps float rounding from growing with it). The pairs of a
  // level are independent but combined here one after another: there is at most one buffer
  // per thread, and a hook over large values may split its own loop.
  for (std::size_t stride = 1; stride < bufs.size(); stride *= 2) {
    for (std::size_t i = 0; i + stride < bufs.size(); i += 2 * stride) {
      combine(bufs[i].second.get(), bufs[i + stride].second.get());
    }
  }
  if (!bufs.empty()) combine(hooks_->target, bufs[0].second.get());
}

std::shared_ptr<const Reduction> checked_reduction(const Var& v, Reduction r,
                                                   std::uint64_t owner) {
  check_var(v, owner, "set_reduction");
  if (!r.identity || !r.combine) {
    throw Error("set_reduction(var #" + std::to_string(v.id()) + "): the " +
                (r.identity ? "combine" : "identity") + " hook is empty");
  }
  if (r.target == nullptr) {
    throw Error("set_reduction(var #" + std::to_string(v.id()) +
                "): the target is null (the var's own value, into which the buffers are combined)");
  }
  return std::make_shared<const Reduction>(std::move(r));
}

void set_reduction_locked(const Var& v, std::shared_ptr<const Reduction> hooks) {
  if (v.state()->deleted) {
    throw Error("set_reduction: var #" + std::to_string(v.id()) + " was deleted");
  }
  v.state()->reduction = std::move(hooks);
}

void check_reductions(const Op& op) {
  if (!op.has_reduce) return;
  for (const Access& a : const_cast<Op&>(op).acc) {
    if (a.kind == AccessKind::reduce && !a.var->reduction) {
      throw Error(op.call_name() + ": reduce(var #" + std::to_string(a.var->id) +
                  ") has no reduction hooks; call Engine::set_reduction first");
    }
  }
}

void fail_reductions(Op& op, const Failure& failure) noexcept {
  if (!op.reductions || !failure) return;
  for (auto& [var, group] : op.reductions->groups) group->fail(failure);
}

OpPtr make_combine_op(OpSink* sink, VarState* v, std::shared_ptr<ReduceGroup> group) {
  v->reduction_open = false;
  ReduceGroup* raw = group.get();
  auto fn = [g = std::move(group)] { g->combine_all(); };
  OpPtr op(new Op(sink, OpKind::reduce_combine, PushOptions{.name = "reduce_combine"}));
  op->set_body(body_builder<SyncFunction<decltype(fn)>>(std::move(fn)));
  op->acc.resize(1);
  op->acc[0] = make_access(v, op.get(), AccessKind::read_write);
  if (sink->ops_reference_vars()) {
    var_add_ref(v);
    op->holds_var_refs = true;
  }
  op->combines = raw;
  return op;
}

void* reduction_buffer(const Var& v) {
  Op* op = current_op();
  if (op && op->reductions) {
    for (auto& [var, group] : op->reductions->groups) {
      if (var == v.state()) return group->buffer();
    }
  }
  throw Error("reduction_buffer(var #" + std::to_string(v.id()) + ") called " +
              (op ? "from operation " + op->display_name() + ", which does not list reduce(v)"
                  : std::string("outside a running operation")));
}

}  // namespace depengine::detail
