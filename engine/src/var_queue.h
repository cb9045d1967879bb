// A var's queue of pending accesses (the threaded engine's half of VarState). Granted
// accesses are counted (running reads, one active write, or a run of commute or reduce
// accesses); waiting ones form a FIFO linked through Access::next. Reads of one version are
// granted together, a write alone, a run of consecutive commute (or reduce) accesses
// together, in push order. Commute accesses granted together still exclude each other when
// they run: commute.h takes `commute_held` when the op starts. Every member is called under
// `lock`.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "invariant.h"
#include "spin_lock.h"

namespace depengine::detail {

class Op;
struct VarState;

enum class AccessKind : std::uint8_t { read, write, read_write, commute, reduce };

// Uses the var's value (device work waits for its data).
constexpr bool reads(AccessKind k) noexcept {
  return k == AccessKind::read || k == AccessKind::read_write || k == AccessKind::commute;
}
// Inherits the var's failure (the op is skipped). Commute and reduce accesses do not: the
// ops of a run may go in any order, so one must not see another's failure; instead each
// passes its failure to the var, where the earliest origin stays (merges_failure), and the
// run's outcome does not depend on the order.
constexpr bool inherits_failure(AccessKind k) noexcept {
  return k == AccessKind::read || k == AccessKind::read_write;
}
// Ordered as a write and makes a new version.
constexpr bool writes(AccessKind k) noexcept { return k != AccessKind::read; }
// Granted together with its neighbours of the same kind.
constexpr bool grouped(AccessKind k) noexcept {
  return k == AccessKind::commute || k == AccessKind::reduce;
}
// Stores the op's outcome in the var: a failure, or success clearing it.
constexpr bool sets_failure(AccessKind k) noexcept {
  return k == AccessKind::write || k == AccessKind::read_write;
}
// Adds the op's failure to the var's, the earliest origin staying; success changes nothing.
// (A reduce access's failure reaches its var through its reduction's combining op.)
constexpr bool merges_failure(AccessKind k) noexcept { return k == AccessKind::commute; }

// One op's access to one var; also the node of that var's queue of waiting accesses.
// Trivially constructible, so that an op's inline array of them costs nothing until filled;
// build one with make_access.
struct Access {
  VarState* var;
  Op* op;
  Access* next;
  AccessKind kind;
  // The kind of `next` while this access waits in a queue: a release decides how far a run
  // of grants goes without loading the access that ends it, which lives in another op's
  // record, most likely still in the cache of the core that pushed it.
  AccessKind next_kind;
  // The compound access of a replayed segment (replay_run.h, ReplayGate): `op` is
  // null and its grant releases the segment's first ops on the var.
  bool gate;
  // Version of the var this access sees: for a read, the writes pushed before it; for a
  // write, the version it creates. Set at push time.
  std::uint64_t version;
};
static_assert(std::is_trivially_default_constructible_v<Access>);

// `op`'s access of `kind` to `var`: not queued, not a gate, its version not yet stamped.
constexpr Access make_access(VarState* var, Op* op, AccessKind kind) noexcept {
  return Access{var, op, nullptr, kind, AccessKind::read, false, 0};
}

// The fields every grant and release touches come first, packed, so that with VarState's
// hot fields they share one cache line (op.h); `parked` (commute only) may spill.
struct VarQueue {
  SpinLock lock;
  bool write_active = false;
  AccessKind group_kind = AccessKind::commute;
  AccessKind head_kind = AccessKind::read;  // the kind of `head`, when there is one
  // Commute exclusion (commute.h): an op of the granted run holds the var while it runs;
  // ops that found it held wait in `parked` (linked through Op::next_parked), off the
  // workers, and are dispatched again when it is let go.
  bool commute_held = false;
  // Every handle to the var is gone (var_release, op.cc): the release that leaves the queue
  // idle frees the var.
  bool orphaned = false;
  // The var was deleted with an op-less callback still to run (DeleteOptions::
  // frees_memory_only; VarState::pending_delete): the release that leaves the queue idle
  // runs it. Set only on a queue that is not idle.
  bool delete_pending = false;
  // Granted reads not yet released. Atomic because a read that is not the last of its
  // version is released without the lock (release_shared_read): the count then never
  // reaches zero outside the lock, so whether reads are running, which everything else
  // here decides on, changes only under it.
  std::atomic<int> running_reads{0};
  int group_running = 0;  // granted accesses of the current commute or reduce run
  // The first waiting (not yet granted) access. Changed under `lock`; atomic (relaxed: plain
  // loads and stores on x86) so that a running op may read it without the lock, as a hint of
  // what its release will grant (ThreadedCore::run_cpu).
  std::atomic<Access*> head_{nullptr};
  Access* tail = nullptr;
  Op* parked = nullptr;

  // Under `lock`; without it, a hint that may be stale or null at any time (only prefetched).
  Access* head() const noexcept { return head_.load(std::memory_order_relaxed); }

  // No access granted, waiting or parked on the var.
  bool idle() const noexcept {
    return !write_active && reads_running() == 0 && group_running == 0 && !head() &&
           !commute_held && !parked;
  }
  // Granted reads now (exact under `lock`; without it, may only fall, and not to zero).
  int reads_running() const noexcept { return running_reads.load(std::memory_order_relaxed); }
  // Releases a granted read without `lock` when other reads of its version still run (true):
  // such a release grants nothing and cannot leave the queue idle. False when it may be the
  // last: the caller then takes the lock and calls release(AccessKind::read). Nothing of the
  // var may be touched after a true return (its last release, on another thread, may free
  // it).
  bool release_shared_read() noexcept {
    // A compare-and-swap from a guess rather than a load first: it takes the line for
    // writing at once, and a failure gives the count; a load would bring the line shared,
    // and the swap then fetch it again.
    int r = 2;
    while (!running_reads.compare_exchange_weak(r, r - 1, std::memory_order_acq_rel,
                                                std::memory_order_relaxed)) {
      if (r <= 1) return false;
    }
    return true;
  }
  // Grants `a` at once if nothing conflicts (true), else queues it (false).
  bool grant_or_enqueue(Access& a) noexcept;
  // Releases a finished access of `kind`; returns the accesses it grants, chained through
  // `next`.
  Access* release(AccessKind kind) noexcept;

 private:
  Access* pop() noexcept;
  // With nothing granted: grants the head, and its neighbours that go with it.
  template <class Grant>
  void grant_head(Grant&& grant) noexcept;
  // Granted reads, an active write and a granted run exclude each other; a waiting head
  // exists only behind something granted; the FIFO's ends agree.
  void check() const noexcept {
    DEPENGINE_INVARIANT(reads_running() >= 0 && group_running >= 0,
                        "a var's count of granted accesses went negative");
    DEPENGINE_INVARIANT((write_active ? 1 : 0) + (reads_running() > 0 ? 1 : 0) +
                                (group_running > 0 ? 1 : 0) <= 1,
                        "a var has accesses of different kinds granted together");
    DEPENGINE_INVARIANT((head() == nullptr) == (tail == nullptr), "a var queue's ends disagree");
    DEPENGINE_INVARIANT(head() == nullptr || write_active || reads_running() > 0 || group_running > 0,
                        "a var queue waits behind nothing granted");
    DEPENGINE_INVARIANT(head() == nullptr || head_kind == head()->kind,
                        "a var queue's cached head kind disagrees with its head");
  }
};

inline bool VarQueue::grant_or_enqueue(Access& a) noexcept {
  check();
  if (!head() && !write_active) {
    if (grouped(a.kind)) {
      if (reads_running() == 0 && (group_running == 0 || group_kind == a.kind)) {
        group_kind = a.kind;
        ++group_running;
        return true;
      }
    } else if (group_running == 0) {
      if (!writes(a.kind)) {
        running_reads.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (reads_running() == 0) {
        write_active = true;
        return true;
      }
    }
  }
  a.next = nullptr;
  if (tail) {
    tail->next = &a;
    tail->next_kind = a.kind;
  } else {
    head_.store(&a, std::memory_order_relaxed);
    head_kind = a.kind;
  }
  tail = &a;
  return false;
}

inline Access* VarQueue::pop() noexcept {
  Access* a = head();
  Access* next = a->next;
  head_.store(next, std::memory_order_relaxed);
  if (next) {
    head_kind = a->next_kind;
  } else {
    tail = nullptr;
  }
  return a;
}

template <class Grant>
void VarQueue::grant_head(Grant&& grant) noexcept {
  if (!head()) return;
  const AccessKind k = head_kind;
  if (grouped(k)) {
    group_kind = k;
    while (head() && head_kind == k) {
      ++group_running;
      grant(pop());
    }
  } else if (writes(k)) {
    write_active = true;
    grant(pop());
  } else {
    int n = 0;
    while (head() && head_kind == AccessKind::read) {
      ++n;
      grant(pop());
    }
    running_reads.fetch_add(n, std::memory_order_relaxed);
  }
}

inline Access* VarQueue::release(AccessKind kind) noexcept {
  check();
  Access* granted = nullptr;
  Access** last = &granted;
  auto grant = [&](Access* a) {
    *last = a;
    last = &a->next;
  };
  if (grouped(kind)) {
    DEPENGINE_INVARIANT(group_running > 0, "a commute or reduce access released on a var without its run");
    if (--group_running == 0) grant_head(grant);
  } else if (!writes(kind)) {
    const int before = running_reads.fetch_sub(1, std::memory_order_acq_rel);
    DEPENGINE_INVARIANT(before > 0, "a read released on a var with no running read");
    if (before == 1) grant_head(grant);
  } else {
    DEPENGINE_INVARIANT(write_active, "a write released on a var with no active write");
    write_active = false;
    grant_head(grant);
  }
  *last = nullptr;
  check();
  return granted;
}

}  // namespace depengine::detail
