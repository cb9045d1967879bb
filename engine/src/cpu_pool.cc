#include "cpu_pool.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include <oneapi/tbb/global_control.h>

#include "tsan_annotations.h"

namespace depengine::detail {
namespace {

// oneTBB caps its worker threads process-wide, at the smallest max_allowed_parallelism of
// the live global_control objects (default: the cores, one of them kept for the caller).
// Our arenas are fed by enqueue, with no caller joining, so each engine needs
// threads + 1. This registry keeps a single global_control at the largest requirement
// of the live pools.
class ParallelismRegistry {
 public:
  std::shared_ptr<void> require(int threads) {
    std::lock_guard lk(mu_);
    ++needs_[threads + 1];
    update();
    return std::shared_ptr<void>(nullptr, [this, threads](void*) {
      std::lock_guard lk2(mu_);
      if (--needs_[threads + 1] == 0) needs_.erase(threads + 1);
      update();
    });
  }

 private:
  void update() {
    std::size_t want = needs_.empty() ? 0 : static_cast<std::size_t>(needs_.rbegin()->first);
    if (want == current_) return;
    control_.reset();  // the smallest live value wins, so drop the old one first
    if (want > 0) {
      control_ = std::make_unique<oneapi::tbb::global_control>(
          oneapi::tbb::global_control::max_allowed_parallelism, want);
    }
    current_ = want;
  }
  std::mutex mu_;
  std::map<int, int> needs_;
  std::size_t current_ = 0;
  std::unique_ptr<oneapi::tbb::global_control> control_;
};

ParallelismRegistry& registry() {
  static ParallelismRegistry r;
  return r;
}

// What an enqueued oneTBB task carries; see tsan_annotations.h for the copy constructor.
class PoolTask {
 public:
  PoolTask(CpuPool* pool, void (*run)(CpuPool*, Op*), Op* op) noexcept
      : pool_(pool), run_(run), op_(op) {}
  // The acquire pairs with the release at the end of the task that last used this memory
  // (oneTBB recycles task objects); the release pairs with the acquire when this one runs.
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): assigned after the acquire
  PoolTask(const PoolTask& o) noexcept {
    tsan_acquire(this);
    pool_ = o.pool_;
    run_ = o.run_;
    op_ = o.op_;
    tsan_release(this);
  }
  PoolTask& operator=(const PoolTask&) = delete;
  void operator()() const {
    auto* self = const_cast<PoolTask*>(this);
    tsan_acquire(self);
    CpuPool* pool = pool_;
    Op* op = op_;
    auto run = run_;
    tsan_release(self);
    run(pool, op);
  }

 private:
  // No default member initializers: the copy constructor must not write before its acquire.
  CpuPool* pool_;
  void (*run_)(CpuPool*, Op*);
  Op* op_;
};

}  // namespace

CpuPool::CpuPool(int threads, CpuRunner& runner)
    : threads_(threads),
      runner_(runner),
      parallelism_(registry().require(threads)),
      arena_(threads, 0) {
  arena_.initialize();
}

CpuPool::~CpuPool() {
  while (active_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void CpuPool::submit(Op* op) {
  active_.fetch_add(1, std::memory_order_relaxed);
  const int prio = op->opts.lane == Lane::priority ? std::max(op->opts.priority, 1)
                                                   : op->opts.priority;
  if (prio == 0) {
    arena_.enqueue(PoolTask(this, &CpuPool::run_direct, op));
  } else if (prio > 0) {
    high_.push(op);
    high_size_.fetch_add(1, std::memory_order_release);
    arena_.enqueue(PoolTask(this, &CpuPool::run_high, nullptr));
  } else {
    low_.push(op);
    arena_.enqueue(PoolTask(this, &CpuPool::run_low, nullptr));
  }
}

void CpuPool::run_direct(CpuPool* pool, Op* op) {
  pool->run_chain(op);
  pool->active_.fetch_sub(1, std::memory_order_release);
}

void CpuPool::run_high(CpuPool* pool, Op*) {
  pool->drain_high();
  pool->active_.fetch_sub(1, std::memory_order_release);
}

void CpuPool::run_low(CpuPool* pool, Op*) {
  Op* op = nullptr;
  if (pool->low_.try_pop(op)) pool->run_chain(op);
  pool->active_.fetch_sub(1, std::memory_order_release);
}

void CpuPool::drain_high() {
  const int worker = oneapi::tbb::this_task_arena::current_thread_index();
  Op* op = nullptr;
  while (high_size_.load(std::memory_order_acquire) > 0 && high_.try_pop(op)) {
    high_size_.fetch_sub(1, std::memory_order_relaxed);
    // Continuations run here too, without re-draining (which would recurse).
    while (op) op = runner_.run_cpu(op, worker);
  }
}

void CpuPool::run_chain(Op* op) {
  const int worker = oneapi::tbb::this_task_arena::current_thread_index();
  while (op) {
    drain_high();
    op = runner_.run_cpu(op, worker);
  }
}

}  // namespace depengine::detail
