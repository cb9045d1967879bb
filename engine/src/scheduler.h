// The CPU scheduler: where ready ops wait, which op a thread runs next, and when threads
// sleep and wake. Every rule of that kind lives here:
//
// - Ready queues by priority: a concurrent priority queue for rank > 0, a FIFO for rank 0
//   (ready_fifo.h), a priority queue for rank < 0 (rank = the op's priority, at least 1 on
//   the priority lane); a thread always takes from the first non-empty one.
// - Continuations: a worker that finishes an op may keep one op it made ready and run it
//   next without a queue, but only when nothing more urgent is queued (keep_continuation).
// - Drain tasks: oneTBB tasks in the scheduler's task_arena, up to `threads` at a time, each
//   running ops until the queues are empty; a busy engine pays a queue push and pop per op
//   rather than a oneTBB enqueue and wake-up. Kernels that use tbb::parallel_for inside an
//   op share the arena, so intra-op parallelism does not oversubscribe the cores.
// - Lingering and parking: a drain task that runs out of ops spins (yielding) for kLinger,
//   then parks for up to kPark on a wake-up of its own (wakeup.h), listed among the parked tasks;
//   submit claims one listed task and wakes it. A claimed task is off the list and counted
//   as a wake under way until it lingers, so that submits meanwhile wake nobody else: one
//   parked task costs the frontend one wake-up, however many ops it pushes while that task
//   gets its core back. (A shared notifier was woken by every such submit, a futex call
//   each, which set the engine's per-op cost in about one process in two.)
//   At most cores - 1 tasks spin at once, so that the frontend keeps a core, and pool
//   threads run SCHED_BATCH, so that a woken task never preempts the frontend that woke it.
//   A drain task leaves (returns to oneTBB) when it has parked kPark without an op, when the
//   scheduler stops, or at once when a kernel opens a parallel loop (ParallelRegion), so
//   that it can take that loop's chunks.
// - The thread lent by a wait: help() runs queued ops on a thread outside the pool (one
//   in wait_all or wait_to_read) in the arena's slot kept for it. It takes rank-0 ops a few
//   at a time (pop_some): that thread most often runs on a core of its own while the pool
//   threads share the others, so each take brings the queue's line over from another core
//   (one take per op cost it about 85 ns of each 1 µs op it ran). It takes no more than a
//   share that leaves as many for each pool thread, and an op of a higher rank alone, so an
//   urgent op queued meanwhile waits at most for the rest of one small batch on that thread
//   (the pool threads take it at once).
//
// A parked task's sleep follows the announce-then-check rule of notifier.h, with the list
// as the announcement (see wait_for_work). The announcements a submit reads (a task
// lingering, parked or leaving) are made, and the count of queued ops checked, under the
// rank-0 queue's lock, which every submit holds while it counts its op: either the submit
// sees the task's announcement or the task sees the op, with no barrier on the submit's
// path beyond the lock it takes to queue the op. Two waits poll, each bounded: help()
// yields while it lingers (kLinger without an op), and the destructor yields until the
// drain tasks, told to stop, have returned.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include <oneapi/tbb/concurrent_priority_queue.h>
#include <oneapi/tbb/task_arena.h>

#include "op.h"
#include "ready_fifo.h"
#include "spin_lock.h"
#include "wakeup.h"

namespace depengine::detail {

class CpuRunner {
 public:
  // Runs a ready op on the current thread (`worker`: 0..threads-1, or threads for a thread
  // lent by a wait); returns an op it made ready that the thread may run next, or null. The
  // scheduler decides whether it does (Scheduler::keep_continuation).
  virtual Op* run_cpu(Op* op, int worker) = 0;
  // Called by a pool thread (a drain task) that found the ready queues empty, before it
  // lingers, parks or leaves: the runner lets go of what it holds back on this thread
  // (ThreadedCore: the retirements of the ops it finished, accounting.h's HeldRetires).
  virtual void ran_out() {}

 protected:
  ~CpuRunner() = default;
};

// The queue an op waits in: its priority, raised to at least 1 on the priority lane.
inline int rank(const Op& op) noexcept {
  return op.opts.lane == Lane::priority ? std::max(op.opts.priority, 1) : op.opts.priority;
}

class Scheduler {
 public:
  Scheduler(int threads, CpuRunner& runner);
  // Stops: wakes parked drain tasks and waits until every one has returned.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a ready op and wakes or starts a drain task for it. Thread-safe.
  void submit(Op* op);
  // Queues `n` ready ops of rank 0, in order, as submit() would one by one, but taking the
  // queue's line once: a release that makes many ops ready at once (the readers of a var
  // whose write finished) would otherwise pull that line back from the popping workers for
  // every op. Thread-safe.
  void submit_rank0(Op* const* ops, std::size_t n);
  int threads() const noexcept { return threads_; }
  // Some op is queued (a hint: another thread may take it at once).
  bool queued_now() const noexcept { return normal_.queued.load(std::memory_order_relaxed) != 0; }

  // True when `next`, an op the caller just made ready, may run on the caller's thread
  // right away: no op of a higher rank is queued (for rank < 0: no op at all). Else the
  // caller submits it. Thread-safe; a concurrent submit may make the answer stale.
  bool keep_continuation(const Op& next) const noexcept;

  // Lends the calling thread (one outside the pool, about to wait) to the pool: it runs
  // queued ops, as worker index threads(), in the arena's slot kept for it, a batch of up
  // to kHelpBatch at a time (pop_some), until `done()` holds after a batch or no op has
  // been queued for kLinger. As OpenMP's master thread at a taskwait and
  // oneTBB's at wait_for_all, the waiting thread works instead of only sleeping. One thread
  // at a time; others return at once.
  void help(const std::function<bool()>& done);
  // Runs `op`, a ready op, and the continuations it keeps on the calling thread (one outside
  // the pool: a frontend pushing a small op, PushOptions::small) as the thread lent by a
  // wait runs them, in the same arena slot and worker index; false, without running it, when
  // another thread holds that slot now (the caller then submits it).
  bool run_here(Op* op);
  // True while a thread other than the caller is inside help().
  bool helped_elsewhere() const noexcept;

  // Drain tasks parked now, and parked tasks woken so far (for tests: a burst of submits
  // while parked tasks wake costs one wake-up per task, not one per submit).
  int parked() const noexcept { return parked_.load(std::memory_order_acquire); }
  long wake_ups() const noexcept { return wake_ups_.load(std::memory_order_relaxed); }

  // Wakes parked drain tasks so that they see a parallel loop open (ParallelRegion).
  void call_back_parked() { wake_all_parked(); }

  // The body of a drain task.
  static void drain(Scheduler* s);

  static constexpr std::chrono::microseconds kLinger{50};
  static constexpr std::chrono::milliseconds kPark{2};
  // The most ops help() takes at once.
  static constexpr std::size_t kHelpBatch = 8;

 private:
  struct ByRank {
    bool operator()(const Op* a, const Op* b) const noexcept {
      const int ra = rank(*a), rb = rank(*b);
      if (ra != rb) return ra < rb;
      return a->seq > b->seq;
    }
  };
  using PriorityQueue = oneapi::tbb::concurrent_priority_queue<Op*, ByRank>;

  // A parked drain task: its wake-up, and its place in the list of parked tasks.
  struct Parker {
    Wakeup woken;
    Parker* next = nullptr;
  };

  Op* pop();
  // Takes ops for a thread that runs them one after another: one op of the highest rank
  // queued, or, from the rank-0 queue, up to `max` in queue order, but no more than a share
  // that leaves as many for each other thread; returns how many it put in `out`.
  std::size_t pop_some(Op** out, std::size_t max);
  // Runs `op` and the continuations this thread keeps.
  void run_from(Op* op, int worker);
  void spawn_drainer_if_needed();
  // Adds `n` to the count of queued ops, under normal_.lock; true when a drain task is
  // lingering (it will take them: see wait_for_work()).
  bool count_queued_locked(long n) noexcept;
  // Spins for kLinger, then parks for kPark; true when an op came, false when the drain task
  // should leave.
  bool wait_for_work(Parker& self);
  // Parks the calling drain task until it is claimed or `deadline`; true when it was
  // claimed (it then counts in wakes_pending_ until it lingers).
  bool park(Parker& self, std::chrono::steady_clock::time_point deadline);
  // Claims one parked task and wakes it; false when none is listed.
  bool wake_one_parked();
  void wake_all_parked();
  bool must_leave() const noexcept;

  const int threads_;
  CpuRunner& runner_;
  // Drain tasks that may spin at once in wait_for_work (see there).
  const int max_lingering_;
  std::shared_ptr<void> parallelism_;  // keeps oneTBB's worker limit >= threads_
  std::shared_ptr<void> registration_;  // in the list ParallelRegion calls back
  PriorityQueue high_, low_;
  // What every submit and pop touches shares a cache line, under one spin lock: the rank-0
  // queue, the count of queued ops, and the count of lingering drain tasks (which submit
  // reads, and a task changes each time it runs out of ops). A submit or a pop is then one
  // lock-prefixed instruction on that line: the counts are plain stores under the lock, not
  // atomic read-modify-writes of their own (each of which drained the store buffer and took
  // the line back from the cores polling it). The counts are atomics so that idle tasks may
  // poll them without the lock. The rest sits on lines of its own.
  struct alignas(64) Normal {
    SpinLock lock;
    ReadyFifo fifo;                 // under lock
    std::atomic<long> queued{0};    // ops in all the queues; written under lock
    std::atomic<int> lingering{0};  // drain tasks spinning in wait_for_work(); written under lock
  } normal_;
  static_assert(sizeof(Normal) == 64, "the rank-0 queue, its lock and its counts share one line");
  alignas(64) std::atomic<long> high_size_{0};
  std::atomic<long> low_size_{0};
  alignas(64) std::atomic<int> drainers_{0};  // drain tasks enqueued or running
  std::atomic<long> alive_{0};       // drain tasks not yet returned (for the destructor)
  std::atomic<bool> helped_{false};  // a thread is in help()
  std::atomic<bool> stopping_{false};
  // Parked drain tasks (a stack under parked_mu_), their number, and the tasks claimed and
  // not yet lingering.
  alignas(64) std::atomic<int> parked_{0};
  std::atomic<int> wakes_pending_{0};
  std::atomic<long> wake_ups_{0};
  std::mutex parked_mu_;
  Parker* parked_top_ = nullptr;
  // One per arena slot: a drain task parks on its slot's (a slot has one thread, and of drain
  // tasks nested on it, inside a kernel's parallel loop, only the innermost can park).
  std::unique_ptr<Parker[]> parkers_;
  oneapi::tbb::task_arena arena_;
};

}  // namespace depengine::detail
