// Reductions (reduce(v) accesses): a run of consecutive reduce accesses to one var is a
// ReduceGroup; its ops add into private buffers, one per thread that runs them, made by the
// var's identity hook; the group is combined into the var by an op of its own (the threaded
// engine pushes it before the next other access to the var, or at wait_all; the naive engine
// combines after every reduce op, which is the sequential meaning).
#pragma once

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "op.h"
#include "spin_lock.h"

namespace depengine::detail {

class ReduceGroup {
 public:
  explicit ReduceGroup(std::shared_ptr<const Reduction> hooks) : hooks_(std::move(hooks)) {}

  // The calling thread's buffer, made by the identity hook on first use. Throws what the
  // hook throws, or Error when it returns null.
  void* buffer();
  // Records the outcome of a contributing op that failed or was skipped: the earliest
  // origin wins, so the result does not depend on scheduling.
  void fail(const Failure& failure) noexcept;
  Failure failure() const noexcept;
  // Combines the buffers pairwise as a tree (a level at a time), then the
  // root into the target; drops the buffers. Throws what a hook throws.
  void combine_all();

 private:
  std::shared_ptr<const Reduction> hooks_;
  mutable SpinLock lock_;
  std::vector<std::pair<std::thread::id, std::shared_ptr<void>>> buffers_;
  Failure failure_;
};

// The groups an op's reduce accesses contribute to.
struct ReduceLinks {
  std::vector<std::pair<const VarState*, std::shared_ptr<ReduceGroup>>> groups;
};

// Engine::set_reduction's checks before it takes the push lock: `v` null or foreign, a hook
// empty.
std::shared_ptr<const Reduction> checked_reduction(const Var& v, Reduction r,
                                                   std::uint64_t owner);
// Stores the hooks in `v` (under the push lock); throws Error when v was deleted.
void set_reduction_locked(const Var& v, std::shared_ptr<const Reduction> hooks);

// Throws Error naming the op and var when `op` has a reduce access to a var without hooks.
// Call under the push lock, before anything is registered.
void check_reductions(const Op& op);

// Links each reduce access of `op` to a group: the var's open one when `join_open` (the
// threaded engine), else a new one per access. New open groups are reported to `opened`.
// Call under the push lock.
template <class Opened>
void link_reductions(Op& op, bool join_open, Opened&& opened) {
  if (!op.has_reduce) return;
  for (Access& a : op.acc) {
    if (a.kind != AccessKind::reduce) continue;
    std::shared_ptr<ReduceGroup> group = join_open ? a.var->open_reduction : nullptr;
    if (!group) {
      group = std::make_shared<ReduceGroup>(a.var->reduction);
      if (join_open) {
        a.var->open_reduction = group;
        a.var->reduction_open = true;
        opened(a.var);
      }
    }
    if (!op.reductions) op.reductions.reset(new ReduceLinks);
    op.reductions->groups.emplace_back(a.var, std::move(group));
  }
}

// Records `failure` in every group `op` contributes to (nothing when it has none).
void fail_reductions(Op& op, const Failure& failure) noexcept;

// The op that combines `group` into `v`: a read-write access to v named "reduce_combine".
// An input failure skips it as for any op; a failure recorded in the group fails it without
// running (see Op::combines).
OpPtr make_combine_op(OpSink* sink, VarState* v, std::shared_ptr<ReduceGroup> group);

}  // namespace depengine::detail
