#include "cpu_pool.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <oneapi/tbb/global_control.h>

#include "depengine/parallel_region.h"
#include "tsan_annotations.h"

namespace depengine {
namespace {
// Parallel loops open in kernels right now (ParallelRegion); lingering drainers watch it.
std::atomic<int> g_parallel_regions{0};
}  // namespace

ParallelRegion::ParallelRegion() noexcept {
  g_parallel_regions.fetch_add(1, std::memory_order_relaxed);
}
ParallelRegion::~ParallelRegion() { g_parallel_regions.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace depengine

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

// Never destroyed: a core destroyed on a thread of its own (see engine_core.h) may release
// its pool while the process exits.
ParallelismRegistry& registry() {
  static auto* r = new ParallelismRegistry;
  return *r;
}

// What an enqueued oneTBB task carries: the pool whose queues it drains. oneTBB's library
// is not built with TSan, so the copy into oneTBB's task object and the run on a worker are
// annotated (tsan_annotations.h); the acquire in the copy pairs with the release of the task
// that last used the same recycled memory.
class PoolTask {
 public:
  explicit PoolTask(CpuPool* pool) noexcept : pool_(pool) {}
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): assigned after the acquire
  PoolTask(const PoolTask& o) noexcept {
    tsan_acquire(this);
    pool_ = o.pool_;
    tsan_release(this);
  }
  PoolTask& operator=(const PoolTask&) = delete;
  void operator()() const {
    auto* self = const_cast<PoolTask*>(this);
    tsan_acquire(self);
    CpuPool* pool = pool_;
    tsan_release(self);
    CpuPool::drain(pool);
  }

 private:
  // No default member initializer: the copy constructor must not write before its acquire.
  CpuPool* pool_;
};

}  // namespace

CpuPool::CpuPool(int threads, CpuRunner& runner)
    : threads_(threads),
      runner_(runner),
      parallelism_(registry().require(threads)),
      arena_(threads + 1, 1) {
  arena_.initialize();
}

CpuPool::~CpuPool() {
  while (alive_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void CpuPool::submit(Op* op) {
  const int prio = op->opts.lane == Lane::priority ? std::max(op->opts.priority, 1)
                                                   : op->opts.priority;
  if (prio == 0) {
    normal_.push(op);
  } else if (prio > 0) {
    high_.push(op);
    high_size_.fetch_add(1, std::memory_order_release);
  } else {
    low_.push(op);
    low_size_.fetch_add(1, std::memory_order_release);
  }
  queued_.fetch_add(1, std::memory_order_seq_cst);
  spawn_drainer_if_needed();
}

void CpuPool::spawn_drainer_if_needed() {
  // A lingering drainer will take the op (see linger()).
  if (lingering_.load(std::memory_order_seq_cst) > 0) return;
  int n = drainers_.load(std::memory_order_seq_cst);
  while (n < threads_) {
    if (drainers_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst)) {
      alive_.fetch_add(1, std::memory_order_relaxed);
      arena_.enqueue(PoolTask(this));
      return;
    }
  }
}

Op* CpuPool::pop() {
  Op* op = nullptr;
  if (high_size_.load(std::memory_order_acquire) > 0 && high_.try_pop(op)) {
    high_size_.fetch_sub(1, std::memory_order_relaxed);
  } else if (normal_.try_pop(op)) {
  } else if (low_size_.load(std::memory_order_acquire) > 0 && low_.try_pop(op)) {
    low_size_.fetch_sub(1, std::memory_order_relaxed);
  } else {
    return nullptr;
  }
  queued_.fetch_sub(1, std::memory_order_relaxed);
  return op;
}

bool CpuPool::linger() {
  // A drainer that runs out of ops waits a little for the next one before it leaves: a
  // frontend that pushes small ops one by one then finds workers awake instead of paying a
  // oneTBB enqueue and a wake-up per op (a wake-up costs tens of microseconds on some
  // virtual machines). It yields while it waits, so it does not starve the frontend of a
  // core on a small machine, and it stops as soon as a kernel opens a parallel loop
  // (ParallelRegion): back in oneTBB's scheduler it can take that loop's chunks.
  lingering_.fetch_add(1, std::memory_order_seq_cst);
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + kLinger;
  bool found = false;
  while (!found && g_parallel_regions.load(std::memory_order_relaxed) == 0 &&
         Clock::now() < until) {
    std::this_thread::yield();
    found = queued_.load(std::memory_order_seq_cst) != 0;
  }
  lingering_.fetch_sub(1, std::memory_order_seq_cst);
  // Seen after leaving too: a submit that saw a lingering drainer did not spawn one.
  return found || queued_.load(std::memory_order_seq_cst) != 0;
}

namespace {
bool& helping_here() noexcept {
  thread_local bool here = false;
  return here;
}
}  // namespace

bool CpuPool::helped_elsewhere() const noexcept {
  return helped_.load(std::memory_order_acquire) && !helping_here();
}

void CpuPool::help(const std::function<bool()>& done) {
  if (helped_.exchange(true, std::memory_order_acq_rel)) return;
  helping_here() = true;
  struct Release {
    std::atomic<bool>& flag;
    ~Release() {
      helping_here() = false;
      flag.store(false, std::memory_order_release);
    }
  } release{helped_};
  arena_.execute([&] {
    using Clock = std::chrono::steady_clock;
    auto idle_until = Clock::now() + kLinger;
    while (!done()) {
      if (Op* op = pop()) {
        while (op) op = runner_.run_cpu(op, threads_);
        idle_until = Clock::now() + kLinger;
      } else if (Clock::now() < idle_until) {
        std::this_thread::yield();
      } else {
        break;  // nothing to run lately: the caller sleeps until the engine drains
      }
    }
  });
}

void CpuPool::drain(CpuPool* pool) {
  // Slot 0 is kept for a helping thread, so workers hold slots 1..threads: index slot - 1.
  const int slot = oneapi::tbb::this_task_arena::current_thread_index();
  const int worker = (slot + pool->threads_ - 1) % pool->threads_;
  for (;;) {
    while (Op* op = pool->pop()) {
      while (op) op = pool->runner_.run_cpu(op, worker);
    }
    if (pool->linger()) continue;
    // Leave, then look again: a submit that saw every drainer busy before the decrement
    // relies on this re-check (both sides use seq_cst on queued_ and drainers_).
    pool->drainers_.fetch_sub(1, std::memory_order_seq_cst);
    if (pool->queued_.load(std::memory_order_seq_cst) == 0) break;
    int n = pool->drainers_.load(std::memory_order_seq_cst);
    bool rejoined = false;
    while (n < pool->threads_ && !rejoined) {
      rejoined = pool->drainers_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst);
    }
    if (!rejoined) break;
  }
  pool->alive_.fetch_sub(1, std::memory_order_release);
}

}  // namespace depengine::detail
