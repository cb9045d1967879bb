// The CPU worker pool: a oneTBB task_arena with one slot per worker thread. Ready ops of
// priority 0 are enqueued as tasks directly (FIFO); prioritized ops wait in concurrent
// priority queues that every task drains first (priority > 0) or that their own tasks
// drain in priority order (priority < 0). Kernels that use tbb::parallel_for inside an op
// share the same arena, so intra-op parallelism does not oversubscribe the cores.
#pragma once

#include <atomic>
#include <memory>

#include <oneapi/tbb/concurrent_priority_queue.h>
#include <oneapi/tbb/task_arena.h>

#include "op.h"

namespace depengine::detail {

class CpuRunner {
 public:
  // Runs a ready op on the current worker; returns a successor to run next on the same
  // worker (a continuation that skips the queue), or null.
  virtual Op* run_cpu(Op* op, int worker) = 0;

 protected:
  ~CpuRunner() = default;
};

class CpuPool {
 public:
  CpuPool(int threads, CpuRunner& runner);
  // Waits until every task submitted has returned.
  ~CpuPool();
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  // Thread-safe.
  void submit(Op* op);
  int threads() const noexcept { return threads_; }

 private:
  struct ByPriority {
    bool operator()(const Op* a, const Op* b) const noexcept {
      if (a->opts.priority != b->opts.priority) return a->opts.priority < b->opts.priority;
      return a->seq > b->seq;
    }
  };
  using Queue = oneapi::tbb::concurrent_priority_queue<Op*, ByPriority>;

  // Task bodies (see PoolTask in cpu_pool.cc).
  static void run_direct(CpuPool* pool, Op* op);
  static void run_high(CpuPool* pool, Op* op);
  static void run_low(CpuPool* pool, Op* op);
  void run_chain(Op* op);
  void drain_high();

  const int threads_;
  CpuRunner& runner_;
  std::shared_ptr<void> parallelism_;  // keeps oneTBB's worker limit >= threads_
  Queue high_, low_;
  std::atomic<long> high_size_{0};
  std::atomic<long> active_{0};
  oneapi::tbb::task_arena arena_;
};

}  // namespace depengine::detail
