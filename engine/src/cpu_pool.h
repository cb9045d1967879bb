// The CPU worker pool, on a oneTBB task_arena with one slot per worker thread.
//
// Ready ops wait in three queues: a concurrent priority queue for priority > 0 (and the
// priority lane), a FIFO concurrent queue for priority 0, and a priority queue for
// priority < 0; a worker always takes from the first non-empty one. oneTBB tasks do not
// carry ops one by one: up to `threads` drain tasks are alive at a time, each running ops
// until the queues are empty, so a busy engine pays a queue push and pop per op rather than
// a oneTBB enqueue and wake-up. Kernels that use tbb::parallel_for inside an op share the
// arena, so intra-op parallelism does not oversubscribe the cores. The arena keeps one more
// slot for a thread outside the pool that helps while it waits (help()).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include <oneapi/tbb/concurrent_priority_queue.h>
#include <oneapi/tbb/concurrent_queue.h>
#include <oneapi/tbb/task_arena.h>

#include "op.h"

namespace depengine::detail {

class CpuRunner {
 public:
  // Runs a ready op on the current worker; returns a successor to run next on the same
  // worker (a continuation that skips the queues), or null.
  virtual Op* run_cpu(Op* op, int worker) = 0;

 protected:
  ~CpuRunner() = default;
};

class CpuPool {
 public:
  CpuPool(int threads, CpuRunner& runner);
  // Waits until every drain task has returned.
  ~CpuPool();
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  // Queues a ready op. Thread-safe.
  void submit(Op* op);
  int threads() const noexcept { return threads_; }

  // Lends the calling thread (one outside the pool, about to wait for the engine to drain)
  // to the pool: it runs queued ops, as worker index threads(), in the arena's slot kept
  // for it, until `done()` holds or no op has been queued for kLinger. As OpenMP's master
  // thread at a taskwait and oneTBB's at wait_for_all, the waiting thread does work
  // instead of only sleeping. One thread at a time; others return at once.
  void help(const std::function<bool()>& done);
  // True while a thread other than the caller is inside help().
  bool helped_elsewhere() const noexcept;

  // The body of a drain task (see PoolTask in cpu_pool.cc).
  static void drain(CpuPool* pool);

 private:
  struct ByPriority {
    bool operator()(const Op* a, const Op* b) const noexcept {
      if (a->opts.priority != b->opts.priority) return a->opts.priority < b->opts.priority;
      return a->seq > b->seq;
    }
  };
  using PriorityQueue = oneapi::tbb::concurrent_priority_queue<Op*, ByPriority>;

  Op* pop();
  void spawn_drainer_if_needed();
  // Waits up to kLinger for an op (less if a kernel opens a parallel loop); true when one
  // came.
  bool linger();

  static constexpr std::chrono::microseconds kLinger{50};

  const int threads_;
  CpuRunner& runner_;
  std::shared_ptr<void> parallelism_;  // keeps oneTBB's worker limit >= threads_
  PriorityQueue high_, low_;
  oneapi::tbb::concurrent_queue<Op*> normal_;
  std::atomic<long> high_size_{0}, low_size_{0};
  std::atomic<long> queued_{0};    // ops in the queues
  std::atomic<int> drainers_{0};   // drain tasks enqueued or running
  std::atomic<long> alive_{0};     // drain tasks not yet returned (for the destructor)
  std::atomic<int> lingering_{0};  // drainers waiting in linger()
  std::atomic<bool> helped_{false};  // a thread is in help()
  oneapi::tbb::task_arena arena_;
};

}  // namespace depengine::detail
