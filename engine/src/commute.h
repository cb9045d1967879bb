// Commute exclusion (commute(v) accesses). The var queue grants a run of consecutive commute
// accesses together; among them, the op that starts takes every commute var it lists, all
// or none, before running. An op that finds one held does not wait on the worker: it parks
// on that var (releasing the ones it took) and is dispatched again when the holder lets go.
// Taking all or none means no op holds one var while waiting for another, so several
// commute vars taken in different orders by different ops cannot deadlock.
#pragma once

#include <mutex>
#include <utility>

#include "op.h"

namespace depengine::detail {

// Takes every commute var of `op` (true), or parks it on a held one and takes none
// (false: `redispatch` gets it back later). `redispatch` also gets the ops parked on a var
// this call took and let go again.
template <class Redispatch>
bool take_commute(Op* op, Redispatch&& redispatch);

// Lets go of `v`'s commute exclusion and dispatches the ops parked on it again.
template <class Redispatch>
void let_go_commute(VarState* v, Redispatch& redispatch) {
  Op* parked;
  {
    std::lock_guard lk(v->queue.lock);
    v->queue.commute_held = false;
    parked = std::exchange(v->queue.parked, nullptr);
  }
  while (parked) {
    Op* next = std::exchange(parked->next_parked, nullptr);
    redispatch(parked);
    parked = next;
  }
}

// Lets go of the commute vars `op` holds and dispatches the ops parked on them again.
template <class Redispatch>
void release_commute(Op* op, Redispatch&& redispatch) {
  if (!op->commute_taken) return;
  op->commute_taken = false;
  for (Access& a : op->acc) {
    if (a.kind == AccessKind::commute) let_go_commute(a.var, redispatch);
  }
}

template <class Redispatch>
bool take_commute(Op* op, Redispatch&& redispatch) {
  if (!op->has_commute || op->commute_taken) return true;
  // Read before the op can be parked: once parked, with nothing taken, it may run and be
  // freed elsewhere at once.
  Access* const first = op->acc.begin();
  int taken = 0;
  for (Access& a : op->acc) {
    if (a.kind != AccessKind::commute) continue;
    VarQueue& q = a.var->queue;
    std::unique_lock lk(q.lock);
    if (!q.commute_held) {
      q.commute_held = true;
      ++taken;
      continue;
    }
    // Parked under the var's lock, so its holder's release sees it.
    op->next_parked = q.parked;
    q.parked = op;
    lk.unlock();
    // Lets go of the `taken` vars before this one. Once parked, the op may be dispatched
    // again and run elsewhere as soon as the last of them is let go, so nothing of it is
    // touched after that.
    for (Access* b = first; taken > 0; ++b) {
      if (b->kind != AccessKind::commute) continue;
      --taken;
      let_go_commute(b->var, redispatch);
    }
    return false;
  }
  op->commute_taken = true;
  return true;
}

}  // namespace depengine::detail
