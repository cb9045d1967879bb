#include "scheduler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <oneapi/tbb/global_control.h>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include "depengine/parallel_region.h"
#include "tsan_annotations.h"

namespace depengine {
namespace {
// Parallel loops open in kernels right now (ParallelRegion); idle drain tasks watch it.
std::atomic<int> g_parallel_regions{0};

// The live schedulers, whose parked drain tasks a ParallelRegion calls back. Never
// destroyed: a core destroyed on a thread of its own (see engine_core.h) may release its
// scheduler while the process exits.
struct SchedulerList {
  std::mutex mu;
  std::vector<detail::Scheduler*> live;
};
SchedulerList& schedulers() {
  static auto* list = new SchedulerList;
  return *list;
}
}  // namespace

ParallelRegion::ParallelRegion() noexcept {
  g_parallel_regions.fetch_add(1, std::memory_order_seq_cst);
  SchedulerList& list = schedulers();
  std::lock_guard lk(list.mu);
  for (detail::Scheduler* s : list.live) s->call_back_parked();
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

// What an enqueued oneTBB task carries: the scheduler whose queues it drains. oneTBB's library
// is not built with TSan, so the copy into oneTBB's task object and the run on a worker are
// annotated (tsan_annotations.h); the acquire in the copy pairs with the release of the task
// that last used the same recycled memory.
class PoolTask {
 public:
  explicit PoolTask(Scheduler* pool) noexcept : pool_(pool) {}
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
    Scheduler* pool = pool_;
    tsan_release(self);
    Scheduler::drain(pool);
  }

 private:
  // No default member initializer: the copy constructor must not write before its acquire.
  Scheduler* pool_;
};

}  // namespace

Scheduler::Scheduler(int threads, CpuRunner& runner)
    : threads_(threads),
      runner_(runner),
      max_lingering_(
          std::clamp(static_cast<int>(std::thread::hardware_concurrency()) - 1, 1, threads)),
      parallelism_(registry().require(threads)),
      parkers_(std::make_unique<Parker[]>(static_cast<std::size_t>(threads) + 1)),
      arena_(threads + 1, 1) {
  arena_.initialize();
  SchedulerList& list = schedulers();
  std::lock_guard lk(list.mu);
  list.live.push_back(this);
}

Scheduler::~Scheduler() {
  {
    SchedulerList& list = schedulers();
    std::lock_guard lk(list.mu);
    std::erase(list.live, this);
  }
  stopping_.store(true, std::memory_order_seq_cst);
  wake_all_parked();
  // Drain tasks leave promptly once they see stopping_; their last touch of the scheduler
  // is the decrement of alive_.
  while (alive_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void Scheduler::submit(Op* op) {
  const int r = rank(*op);
  if (r > 0) {
    high_.push(op);
    high_size_.fetch_add(1, std::memory_order_release);
  } else if (r < 0) {
    low_.push(op);
    low_size_.fetch_add(1, std::memory_order_release);
  }
  bool lingering;
  {
    std::lock_guard lk(normal_.lock);
    if (r == 0) normal_.fifo.push(op);
    lingering = count_queued_locked(1);
  }
  if (!lingering) spawn_drainer_if_needed();
}

void Scheduler::submit_rank0(Op* const* ops, std::size_t n) {
  bool lingering;
  {
    std::lock_guard lk(normal_.lock);
    normal_.fifo.push(ops, n);
    lingering = count_queued_locked(static_cast<long>(n));
  }
  if (!lingering) spawn_drainer_if_needed();
}

bool Scheduler::count_queued_locked(long n) noexcept {
  normal_.queued.store(normal_.queued.load(std::memory_order_relaxed) + n,
                       std::memory_order_relaxed);
  // A lingering drain task will take the ops: the common case, read here under the lock
  // that a task takes to stop lingering, so that either this sees it lingering or it sees
  // these ops (wait_for_work()). One task is enough for many ops: one that finds more
  // queued behind the op it took starts another (drain()). Else the caller decides whom to
  // wake after letting go of the lock (spawn_drainer_if_needed): a task parks, and leaves,
  // announcing it and checking this count under the same lock, so those loads need no
  // barrier of their own either.
  return normal_.lingering.load(std::memory_order_relaxed) > 0;
}

bool Scheduler::keep_continuation(const Op& next) const noexcept {
  if (high_size_.load(std::memory_order_acquire) > 0) return false;
  return rank(next) >= 0 || normal_.queued.load(std::memory_order_acquire) == 0;
}

void Scheduler::spawn_drainer_if_needed() {
  // A lingering drain task will take the op (see wait_for_work()); so will one woken for an
  // earlier op, which lingers before it can sleep again; else a parked one, once woken.
  if (normal_.lingering.load(std::memory_order_seq_cst) > 0) return;
  if (wakes_pending_.load(std::memory_order_seq_cst) > 0) return;
  if (parked_.load(std::memory_order_seq_cst) > 0 && wake_one_parked()) return;
  int n = drainers_.load(std::memory_order_seq_cst);
  while (n < threads_) {
    if (drainers_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst)) {
      alive_.fetch_add(1, std::memory_order_relaxed);
      arena_.enqueue(PoolTask(this));
      return;
    }
  }
}

Op* Scheduler::pop() {
  // An idle thread looks without taking the queue's lock, which the submitting thread may
  // hold (and, on a machine with more threads than cores, be preempted holding).
  if (normal_.queued.load(std::memory_order_acquire) == 0) return nullptr;
  Op* op = nullptr;
  Op* behind = nullptr;
  if (high_size_.load(std::memory_order_acquire) > 0 && high_.try_pop(op)) {
    high_size_.fetch_sub(1, std::memory_order_relaxed);
  } else {
    {
      std::lock_guard lk(normal_.lock);
      op = normal_.fifo.try_pop(behind);
      if (op) count_queued_locked(-1);
    }
    if (op) {
      // The op after it is most likely this thread's next: its record comes over while
      // this one runs. Another thread may take, run and free it meanwhile; a prefetch of
      // freed memory does no harm (it never faults or writes, and neither ASan nor TSan
      // counts it as an access), and Op::prefetch_record takes an address, not an op.
      if (behind) Op::prefetch_record(behind);
      return op;
    }
    if (low_size_.load(std::memory_order_acquire) == 0 || !low_.try_pop(op)) return nullptr;
    low_size_.fetch_sub(1, std::memory_order_relaxed);
  }
  std::lock_guard lk(normal_.lock);
  count_queued_locked(-1);
  return op;
}

std::size_t Scheduler::pop_some(Op** out, std::size_t max) {
  if (normal_.queued.load(std::memory_order_acquire) == 0) return 0;
  if (high_size_.load(std::memory_order_acquire) == 0) {
    std::size_t n;
    {
      std::lock_guard lk(normal_.lock);
      const std::size_t share = normal_.fifo.size() / static_cast<std::size_t>(threads_ + 1);
      n = normal_.fifo.try_pop(out, std::clamp<std::size_t>(share, 1, max));
      if (n) count_queued_locked(-static_cast<long>(n));
    }
    if (n) return n;
  }
  Op* op = pop();
  if (!op) return 0;
  out[0] = op;
  return 1;
}

void Scheduler::run_from(Op* op, int worker) {
  while (op) {
    Op* next = runner_.run_cpu(op, worker);
    if (next && !keep_continuation(*next)) {
      submit(next);
      next = nullptr;
    }
    op = next;
  }
}

bool Scheduler::must_leave() const noexcept {
  return stopping_.load(std::memory_order_seq_cst) ||
         g_parallel_regions.load(std::memory_order_seq_cst) != 0;
}

bool Scheduler::wait_for_work(Parker& self) {
  // A drain task that runs out of ops first spins a little for the next one: a frontend that
  // pushes small ops one by one then finds workers awake (waking a thread costs tens of
  // microseconds on some virtual machines). It yields while it spins, and at most cores - 1
  // tasks spin at once: one is enough to catch the next op (submit then wakes no one), and
  // the frontend keeps a core; a task beyond them goes straight to parking.
  using Clock = std::chrono::steady_clock;
  const auto park_until = Clock::now() + kPark;
  bool claimed = false;
  for (;;) {
    // Lingering is announced and ended under the queue's lock, which a submit holds while it
    // queues its op and reads the count: a submit that sees this task lingering wakes no
    // one, and this task, leaving the count, sees that submit's op.
    int before;
    {
      std::lock_guard lk(normal_.lock);
      before = normal_.lingering.load(std::memory_order_relaxed);
      normal_.lingering.store(before + 1, std::memory_order_relaxed);
    }
    // A claimed task ends its wake under way only once it counts as lingering: a submit
    // always sees one of the two (spawn_drainer_if_needed), and this task's checks below
    // come after both.
    if (claimed) wakes_pending_.fetch_sub(1, std::memory_order_seq_cst);
    const auto spin_until =
        Clock::now() + (before < max_lingering_ ? kLinger : std::chrono::microseconds(0));
    while (normal_.queued.load(std::memory_order_relaxed) == 0 && !must_leave() &&
           Clock::now() < spin_until) {
      std::this_thread::yield();
    }
    bool queued;
    {
      std::lock_guard lk(normal_.lock);
      normal_.lingering.store(normal_.lingering.load(std::memory_order_relaxed) - 1,
                              std::memory_order_relaxed);
      queued = normal_.queued.load(std::memory_order_relaxed) != 0;
    }
    if (queued) return true;
    if (must_leave()) return false;
    // Then it parks, until a submit claims it (and it lingers again) or kPark has passed
    // without one; it leaves oneTBB's thread to other work then, and at once when a kernel
    // opens a parallel loop.
    claimed = park(self, park_until);
    if (!claimed) return normal_.queued.load(std::memory_order_seq_cst) != 0;
  }
}

bool Scheduler::park(Parker& self, std::chrono::steady_clock::time_point deadline) {
  bool none_queued;
  {
    std::lock_guard lk(parked_mu_);
    self.next = parked_top_;
    parked_top_ = &self;
    // Listed and checked under the queue's lock: a submit either sees this task listed
    // (it counts its op under the same lock before it looks), or its op is seen here.
    std::lock_guard qlk(normal_.lock);
    parked_.fetch_add(1, std::memory_order_seq_cst);
    none_queued = normal_.queued.load(std::memory_order_relaxed) == 0;
  }
  // Listed first, checked after: a stop or a parallel loop either sees this task listed
  // (wake_all_parked) or is seen here.
  bool wait = none_queued && !must_leave();
  if (wait && self.woken.wait_until(deadline)) return true;
  // Not woken (an op came meanwhile, or the deadline passed): off the list, unless a submit
  // has claimed this task already; its wake-up is then on its way, and taken.
  {
    std::lock_guard lk(parked_mu_);
    for (Parker** p = &parked_top_; *p; p = &(*p)->next) {
      if (*p == &self) {
        *p = self.next;
        parked_.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
    }
  }
  self.woken.wait();
  return true;
}

bool Scheduler::wake_one_parked() {
  Parker* p;
  {
    std::lock_guard lk(parked_mu_);
    p = parked_top_;
    // None listed any more: the tasks claimed meanwhile (they linger before sleeping again)
    // are on their way, else the caller starts one.
    if (!p) return wakes_pending_.load(std::memory_order_seq_cst) > 0;
    parked_top_ = p->next;
    parked_.fetch_sub(1, std::memory_order_relaxed);
    wakes_pending_.fetch_add(1, std::memory_order_seq_cst);
  }
  wake_ups_.fetch_add(1, std::memory_order_relaxed);
  // The parker belongs to the scheduler (parkers_), so it outlives this call even if its
  // task has already woken and gone.
  p->woken.wake();
  return true;
}

void Scheduler::wake_all_parked() {
  std::lock_guard lk(parked_mu_);
  while (Parker* p = parked_top_) {
    parked_top_ = p->next;
    parked_.fetch_sub(1, std::memory_order_relaxed);
    wakes_pending_.fetch_add(1, std::memory_order_seq_cst);
    p->woken.wake();
  }
}

namespace {
bool& helping_here() noexcept {
  thread_local bool here = false;
  return here;
}
}  // namespace

bool Scheduler::helped_elsewhere() const noexcept {
  return helped_.load(std::memory_order_acquire) && !helping_here();
}

namespace {
// Takes the slot of the thread lent by a wait (Scheduler::helped_) for a scope, unless
// another thread holds it.
class LentSlot {
 public:
  explicit LentSlot(std::atomic<bool>& flag) noexcept
      : flag_(flag), held_(!flag.exchange(true, std::memory_order_acq_rel)) {
    if (held_) helping_here() = true;
  }
  ~LentSlot() {
    if (!held_) return;
    helping_here() = false;
    flag_.store(false, std::memory_order_release);
  }
  LentSlot(const LentSlot&) = delete;
  LentSlot& operator=(const LentSlot&) = delete;
  bool held() const noexcept { return held_; }

 private:
  std::atomic<bool>& flag_;
  const bool held_;
};
}  // namespace

bool Scheduler::run_here(Op* op) {
  const LentSlot slot(helped_);
  if (!slot.held()) return false;
  arena_.execute([&] { run_from(op, threads_); });
  return true;
}

void Scheduler::help(const std::function<bool()>& done) {
  const LentSlot slot(helped_);
  if (!slot.held()) return;
  arena_.execute([&] {
    using Clock = std::chrono::steady_clock;
    // The waiting thread takes a few ops at a time when many are queued: each take brings
    // the queue's line over from the workers' cores.
    Op* batch[kHelpBatch];
    bool idle = false;
    Clock::time_point idle_until;
    while (!done()) {
      if (const std::size_t n = pop_some(batch, kHelpBatch)) {
        for (std::size_t i = 0; i < n; ++i) run_from(batch[i], threads_);
        idle = false;
      } else if (!idle) {
        idle = true;
        idle_until = Clock::now() + kLinger;
      } else if (Clock::now() < idle_until) {
        std::this_thread::yield();
      } else {
        break;  // nothing to run lately: the caller sleeps until its condition holds
      }
    }
  });
}

namespace {
// Marks the calling pool thread SCHED_BATCH (once per thread): Linux then never lets it
// preempt a thread that woke it. A frontend that submits an op and wakes a parked drain task
// keeps its core; the woken task takes an idle core, or waits for the frontend's time slice
// to end. Without it, on a machine with as many workers as cores, each wake-up could cost
// the frontend a context switch. A thread that cannot be changed keeps its policy.
void prefer_waker() noexcept {
  thread_local bool done = false;
  if (std::exchange(done, true)) return;
#ifdef __linux__
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
#endif
}
}  // namespace

void Scheduler::drain(Scheduler* s) {
  prefer_waker();
  // Slot 0 is kept for a helping thread, so workers hold slots 1..threads: index slot - 1.
  const int slot = oneapi::tbb::this_task_arena::current_thread_index();
  const int worker = (slot + s->threads_ - 1) % s->threads_;
  for (;;) {
    while (Op* op = s->pop()) {
      // More ops queued behind this one: another task must come for them. The submits made
      // while this task was being woken woke nobody (it was on its way); with no submit
      // after them they would wait for this op, however long it runs, beside an idle core.
      if (s->normal_.queued.load(std::memory_order_seq_cst) != 0) s->spawn_drainer_if_needed();
      s->run_from(op, worker);
    }
    s->runner_.ran_out();
    if (s->wait_for_work(s->parkers_[slot])) continue;
    // Leave, then look again: a submit that saw every drain task busy before the decrement
    // relies on this re-check. Both under the queue's lock, which a submit holds while it
    // counts its op, before it reads drainers_.
    bool none_queued;
    {
      std::lock_guard lk(s->normal_.lock);
      s->drainers_.fetch_sub(1, std::memory_order_seq_cst);
      none_queued = s->normal_.queued.load(std::memory_order_relaxed) == 0;
    }
    if (none_queued) break;
    int n = s->drainers_.load(std::memory_order_seq_cst);
    bool rejoined = false;
    while (n < s->threads_ && !rejoined) {
      rejoined = s->drainers_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst);
    }
    if (!rejoined) break;
  }
  s->alive_.fetch_sub(1, std::memory_order_release);
}

}  // namespace depengine::detail
