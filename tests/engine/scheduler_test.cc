// The scheduler's rules (engine/src/scheduler.h): priorities hold across continuations,
// a thread waiting in wait_to_read runs queued ops as one in wait_all does, the rank-0
// queue keeps push order as it grows, pool threads never preempt the thread that woke
// them, a burst of submits wakes each parked worker once, and wait_all calls from many
// threads at once each wait for exactly their ops, and the waiting thread takes no more
// than its share of the queue at once. Each test
// waits for the points it needs by retrying until it observes them, never by sleeping.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include "ready_fifo.h"
#include "scheduler.h"
#include "test_util.h"

namespace depengine::test {
namespace {


// A finishing worker keeps the next op of its chain only when nothing more urgent is ready:
// a priority-10 op pushed while op 5 of a 200-op chain runs on the only worker runs right
// after op 5, not after the whole chain.
TEST(SchedulerPriority, UrgentOpOvertakesARunningChain) {
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var chain = e->new_var(), other = e->new_var();
  constexpr int kChain = 200;
  std::mutex mu;
  std::vector<int> order;  // chain ops by index, the urgent op as -1
  std::atomic<bool> at_op5{false}, urgent_pushed{false};
  std::atomic<int> done{0};
  auto record = [&](int tag) {
    std::lock_guard lk(mu);
    order.push_back(tag);
  };
  for (int i = 0; i < kChain; ++i) {
    e->push([&, i] {
      // Op 5 holds the worker until the urgent op is queued behind it.
      if (i == 5) {
        at_op5 = true;
        if (!eventually([&] { return urgent_pushed.load(); })) record(-2);
      }
      record(i);
      done.fetch_add(1);
    }, {}, {chain});
  }
  // Pushed once op 5 has started: the worker is inside the chain.
  ASSERT_TRUE(eventually([&] { return at_op5.load(); }));
  e->push([&] {
    record(-1);
    done.fetch_add(1);
  }, {}, {other}, {.priority = 10});
  urgent_pushed = true;
  // Not wait_all: its thread would run queued ops too and blur the order on one worker.
  ASSERT_TRUE(eventually([&] { return done.load() == kChain + 1; }));
  e->wait_all();
  std::lock_guard lk(mu);
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kChain + 1));
  const auto urgent = std::find(order.begin(), order.end(), -1) - order.begin();
  EXPECT_EQ(urgent, 6) << "the priority-10 op ran after " << urgent << " chain ops";
}

// The same for an op of the priority lane (priority 0 but urgent by placement).
TEST(SchedulerPriority, PriorityLaneOpOvertakesARunningChain) {
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var chain = e->new_var(), other = e->new_var();
  constexpr int kChain = 50;
  std::atomic<int> ran{0};
  std::atomic<bool> started{false}, urgent_pushed{false};
  std::atomic<int> urgent_after{-1};
  for (int i = 0; i < kChain; ++i) {
    e->push([&, i] {
      if (i == 0) {
        started = true;
        eventually([&] { return urgent_pushed.load(); });
      }
      ran.fetch_add(1);
    }, {}, {chain});
  }
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  e->push([&] { urgent_after = ran.load(); }, {}, {other}, {.lane = Lane::priority});
  urgent_pushed = true;
  ASSERT_TRUE(eventually([&] { return urgent_after.load() >= 0 && ran.load() == kChain; }));
  e->wait_all();
  EXPECT_EQ(urgent_after.load(), 1);
}

// wait_to_read lends its thread as wait_all does: with the only worker held by an op that
// lets go once another op has run, only the thread waiting in wait_to_read can run it.
TEST(SchedulerWaitToRead, TheWaitingThreadRunsQueuedOps) {
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var a = e->new_var(), b = e->new_var();
  std::atomic<bool> started{false}, released{false};
  std::atomic<bool> held_until_released{true};
  e->push([&] {
    started = true;
    if (!eventually([&] { return released.load(); })) held_until_released = false;
  }, {}, {a});
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  std::thread::id ran_on;
  int worker = -1;
  e->push([&](const RunContext& ctx) {
    ran_on = std::this_thread::get_id();
    worker = ctx.worker;
    released = true;
  }, {}, {b});
  e->wait_to_read(b);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(worker, 1);  // the helper's index: cpu_threads()
  e->wait_all();
  EXPECT_TRUE(held_until_released.load()) << "the queued op ran only after the 10 s deadline";
}

// wait_to_read still rethrows the failure of the write it waited for when its own thread
// ran that write.
TEST(SchedulerWaitToRead, RethrowsAFailureItRanItself) {
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var a = e->new_var(), b = e->new_var();
  std::atomic<bool> started{false}, released{false};
  e->push([&] {
    started = true;
    eventually([&] { return released.load(); });
  }, {}, {a});
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  e->push([&] {
    released = true;
    throw std::runtime_error("boom");
  }, {}, {b});
  EXPECT_THROW(e->wait_to_read(b), std::runtime_error);
  EXPECT_THROW(e->wait_all(), std::runtime_error);
}

// Parked workers come back for ops pushed one at a time after the engine went idle.
TEST(SchedulerWakeUp, IdleWorkersRunLaterPushes) {
  for (int threads : {1, 2, 4}) {
    auto e = Engine::create("threaded", {.cpu_threads = threads});
    Var v = e->new_var();
    long x = 0;
    for (int round = 0; round < 200; ++round) {
      e->push([&x] { ++x; }, {}, {v});
      e->wait_to_read(v);
      EXPECT_EQ(x, round + 1);
    }
  }
}


// A parked drain task is woken once, however many ops the frontend submits while it gets its
// core back: the submits that find a wake-up under way leave the op to that task. (With one
// shared notifier each such submit woke again, a futex call each, which set the per-op cost
// of the engine in about one process in two.) Ops block until released, so each drain task
// is claimed at most once: two tasks, two wake-ups, for 1,000 submits; then every op runs.
TEST(SchedulerWakeUp, ABurstOfSubmitsWakesEachParkedTaskOnce) {
  struct Runner final : detail::CpuRunner {
    std::atomic<bool> open{false};
    std::atomic<int> started{0}, ran{0};
    detail::Op* run_cpu(detail::Op* op, int) override {
      started.fetch_add(1);
      while (!open.load()) std::this_thread::yield();
      ran.fetch_add(1);
      op->release();
      return nullptr;
    }
  } runner;
  constexpr int kThreads = 2, kOps = 1000;
  detail::Scheduler sched(kThreads, runner);
  // A failed assertion returns with ops held: they are let go before the scheduler stops.
  struct Release {
    Runner& r;
    ~Release() { r.open = true; }
  } release{runner};
  auto make = [] { return new detail::Op(nullptr, detail::OpKind::body, PushOptions{}); };
  // Two drain tasks started (each runs one op, both held until released), then parked. A
  // task parks for kPark (2 ms) and then leaves the pool: on a loaded machine this thread
  // may not look within that window, so the pair is started again until both are seen
  // parked at once (an attempt takes about kPark: 500 of them wait up to a second, for a
  // machine busy enough that 50 were missed under ctest -j2).
  int held = 0;
  bool both_parked = false;
  for (int attempt = 0; attempt < 500 && !both_parked; ++attempt) {
    runner.open = false;
    sched.submit(make());
    sched.submit(make());
    held += 2;
    ASSERT_TRUE(eventually([&] { return runner.started.load() == held; }));
    runner.open = true;
    ASSERT_TRUE(eventually([&] { return runner.ran.load() == held; }));
    const auto until = std::chrono::steady_clock::now() + detail::Scheduler::kPark;
    while (!both_parked && std::chrono::steady_clock::now() < until) {
      both_parked = sched.parked() == kThreads;
    }
  }
  ASSERT_TRUE(both_parked) << "never saw both drain tasks parked at once";
  runner.open = false;
  const long before = sched.wake_ups();
  for (int i = 0; i < kOps; ++i) sched.submit(make());
  // Both tasks (woken, or started anew if they had left the pool meanwhile) hold an op.
  ASSERT_TRUE(eventually([&] { return runner.started.load() == held + kThreads; }));
  EXPECT_LE(sched.wake_ups() - before, kThreads);
  runner.open = true;
  EXPECT_TRUE(eventually([&] { return runner.ran.load() == held + kOps; }));
}


// The rank-0 ready queue is FIFO, across the growth of its ring and with pops interleaved,
// and each pop names the op queued behind the one it returns.
TEST(SchedulerReadyFifo, KeepsPushOrderAcrossGrowth) {
  detail::ReadyFifo fifo;
  detail::Op* behind = nullptr;
  EXPECT_EQ(fifo.try_pop(behind), nullptr);
  // Fake, never dereferenced op addresses: 1, 2, 3, ... (scaled to look like pointers).
  auto op = [](std::size_t i) { return reinterpret_cast<detail::Op*>((i + 1) * 64); };
  std::size_t pushed = 0, popped = 0;
  auto pop_next = [&] {
    ASSERT_EQ(fifo.try_pop(behind), op(popped));
    ++popped;
    EXPECT_EQ(behind, popped < pushed ? op(popped) : nullptr);
  };
  for (int round = 0; round < 4; ++round) {
    for (int k = 0; k < 3000; ++k) fifo.push(op(pushed++));  // grows past 1024 and 2048
    for (int k = 0; k < 1000; ++k) pop_next();
  }
  while (popped < pushed) pop_next();
  EXPECT_EQ(fifo.try_pop(behind), nullptr);
}

// Pushes of several ops at once keep the FIFO order too, a batch larger than the ring
// included (it grows as often as it must).
TEST(SchedulerReadyFifo, BatchPushesKeepPushOrder) {
  detail::ReadyFifo fifo;
  detail::Op* behind = nullptr;
  auto op = [](std::size_t i) { return reinterpret_cast<detail::Op*>((i + 1) * 64); };
  std::size_t pushed = 0, popped = 0;
  std::vector<detail::Op*> batch;
  for (std::size_t n : {1u, 7u, 32u, 1000u, 5000u, 3u}) {
    batch.clear();
    for (std::size_t k = 0; k < n; ++k) batch.push_back(op(pushed++));
    fifo.push(batch.data(), batch.size());
    for (std::size_t k = 0; k < n / 2; ++k) {
      ASSERT_EQ(fifo.try_pop(behind), op(popped));
      ++popped;
    }
  }
  while (popped < pushed) {
    ASSERT_EQ(fifo.try_pop(behind), op(popped));
    ++popped;
  }
  EXPECT_EQ(fifo.try_pop(behind), nullptr);
}

// Taking several ops at once keeps the FIFO order too, across the ring's growth, and takes
// no more than are queued.
TEST(SchedulerReadyFifo, BatchPopsKeepPushOrder) {
  detail::ReadyFifo fifo;
  auto op = [](std::size_t i) { return reinterpret_cast<detail::Op*>((i + 1) * 64); };
  detail::Op* out[8];
  EXPECT_EQ(fifo.try_pop(out, 8), 0u);
  std::size_t pushed = 0, popped = 0;
  for (int round = 0; round < 4; ++round) {
    for (int k = 0; k < 1500; ++k) fifo.push(op(pushed++));
    for (std::size_t max : {1u, 3u, 8u, 5u}) {
      const std::size_t n = fifo.try_pop(out, max);
      ASSERT_EQ(n, max);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], op(popped++));
    }
    EXPECT_EQ(fifo.size(), pushed - popped);
  }
  while (std::size_t n = fifo.try_pop(out, 8)) {
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], op(popped++));
  }
  EXPECT_EQ(popped, pushed);
  EXPECT_EQ(fifo.size(), 0u);
}

// A CPU runner that counts the ops it runs and frees each.
struct CountingRunner final : detail::CpuRunner {
  std::atomic<int> ran{0};
  detail::Op* run_cpu(detail::Op* op, int) override {
    ran.fetch_add(1);
    op->release();
    return nullptr;
  }
};

// Ops queued together (a release that made many ready at once) all run, whether the drain
// tasks were parked, lingering or busy when they came.
TEST(SchedulerWakeUp, OpsQueuedTogetherAllRun) {
  auto make = [] { return new detail::Op(nullptr, detail::OpKind::body, PushOptions{}); };
  for (int threads : {1, 2, 4}) {
    CountingRunner runner;
    detail::Scheduler sched(threads, runner);
    int total = 0;
    for (int round = 0; round < 50; ++round) {
      std::vector<detail::Op*> ops;
      for (int k = 0; k < 1 + round % 40; ++k) ops.push_back(make());
      sched.submit_rank0(ops.data(), ops.size());
      total += static_cast<int>(ops.size());
      // Every few rounds the tasks are given time to run out of ops and park (the test
      // holds whether they did or not: the sleep only varies what the batch finds).
      if (round % 10 == 9) {
        ASSERT_TRUE(eventually([&] { return runner.ran.load() == total; }));
        std::this_thread::sleep_for(detail::Scheduler::kPark);
      }
    }
    EXPECT_TRUE(eventually([&] { return runner.ran.load() == total; })) << threads << " threads";
  }
}

// Single ops submitted from two threads at gaps around the drain tasks' lingering (kLinger)
// and parking (kPark) times all run: every submit finds each task busy, lingering, parking,
// parked or leaving at some point, and whichever it finds, either the submit sees the task's
// announcement or the task sees the op (the submit reads them after counting its op under
// the queue's lock). The last op of a round has no later submit to rescue it if both missed.
TEST(SchedulerWakeUp, OpsSubmittedAsTasksLingerParkAndLeaveAllRun) {
  using std::chrono::microseconds;
  const microseconds gaps[] = {microseconds(0),   microseconds(20),   microseconds(45),
                               microseconds(55),  microseconds(300),  microseconds(1900),
                               microseconds(2100), microseconds(2600)};
  constexpr int kGaps = static_cast<int>(std::size(gaps));
  for (int threads : {1, 2}) {
    CountingRunner runner;
    detail::Scheduler sched(threads, runner);
    int total = 0;
    for (int round = 0; round < 12; ++round) {
      auto submitter = [&](int seed) {
        for (int k = 0; k < 6; ++k) {
          std::this_thread::sleep_for(gaps[(seed * 5 + k * 3 + round) % kGaps]);
          sched.submit(new detail::Op(nullptr, detail::OpKind::body, PushOptions{}));
        }
      };
      std::thread a(submitter, 1), b(submitter, 2);
      a.join();
      b.join();
      total += 12;
      ASSERT_TRUE(eventually([&] { return runner.ran.load() == total; }))
          << threads << " threads, round " << round << ": " << runner.ran.load() << " of "
          << total << " ran";
    }
  }
}

// A runner whose pool thread holds the first op it runs until told, and that records which
// ops the thread lent by a wait (worker index `threads`) ran, by seq.
struct HoldingRunner final : detail::CpuRunner {
  explicit HoldingRunner(int pool_threads) : threads(pool_threads) {}
  detail::Op* run_cpu(detail::Op* op, int worker) override {
    if (worker < threads) {
      if (!holding.exchange(true)) {
        held = true;
        if (!eventually([&] { return let_go.load(); })) timed_out = true;
      }
    } else {
      std::lock_guard lk(mu);
      helper_ran.push_back(op->seq);
    }
    ran.fetch_add(1);
    op->release();
    return nullptr;
  }
  std::vector<std::uint64_t> ran_by_helper() {
    std::lock_guard lk(mu);
    return helper_ran;
  }
  const int threads;
  std::atomic<bool> holding{false}, held{false}, let_go{false}, timed_out{false};
  std::atomic<int> ran{0};
  std::mutex mu;
  std::vector<std::uint64_t> helper_ran;
};

// The thread lent by a wait takes ops a few at a time when many are queued, in queue order,
// but never more than a share that leaves as many for each pool thread, at most kHelpBatch;
// and an op of a higher rank alone. Each call below returns after its first batch (its
// condition holds once it has run an op), so what it ran is what it took.
TEST(SchedulerWaitAll, TheWaitingThreadTakesAtMostItsShareOfTheQueue) {
  auto make = [](std::uint64_t seq, int priority = 0) {
    auto* op = new detail::Op(nullptr, detail::OpKind::body, PushOptions{.priority = priority});
    op->seq = seq;
    return op;
  };
  HoldingRunner runner(1);
  detail::Scheduler sched(1, runner);
  sched.submit(make(0));  // holds the only pool thread
  ASSERT_TRUE(eventually([&] { return runner.held.load(); }));
  std::uint64_t next = 1;
  auto queue = [&](int n) {
    for (int k = 0; k < n; ++k) sched.submit(make(next++));
  };
  auto help_once = [&] {
    const std::size_t before = runner.ran_by_helper().size();
    sched.help([&] { return runner.ran_by_helper().size() > before; });
    const std::vector<std::uint64_t> all = runner.ran_by_helper();
    return std::vector<std::uint64_t>(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
  };
  using Seqs = std::vector<std::uint64_t>;
  // 40 queued, two threads: a share of 20, capped at kHelpBatch.
  static_assert(detail::Scheduler::kHelpBatch == 8);
  queue(40);
  EXPECT_EQ(help_once(), (Seqs{1, 2, 3, 4, 5, 6, 7, 8}));
  // 32 left: the cap again; then 24, 16 (8 each); 8 left: a share of 4; 4: 2; 2: 1; 1: 1.
  EXPECT_EQ(help_once().size(), 8u);
  EXPECT_EQ(help_once().size(), 8u);
  EXPECT_EQ(help_once(), (Seqs{25, 26, 27, 28, 29, 30, 31, 32}));
  EXPECT_EQ(help_once(), (Seqs{33, 34, 35, 36}));
  EXPECT_EQ(help_once(), (Seqs{37, 38}));
  EXPECT_EQ(help_once(), (Seqs{39}));
  EXPECT_EQ(help_once(), (Seqs{40}));
  // An urgent op is taken alone, ahead of the rank-0 ops queued before it.
  queue(20);
  auto* urgent = make(next++, 5);
  sched.submit(urgent);
  EXPECT_EQ(help_once(), (Seqs{61}));
  EXPECT_EQ(help_once().size(), 8u);  // 20 queued: a share of 10, capped
  runner.let_go = true;
  EXPECT_TRUE(eventually([&] { return runner.ran.load() == 62; }));
  EXPECT_FALSE(runner.timed_out.load());
}

// A small op (PushOptions::small) that its push finds ready in an otherwise idle engine
// runs on the pushing thread, as worker index cpu_threads(), before push returns.
TEST(SchedulerSmallOps, AReadySmallOpOnAnIdleEngineRunsOnThePushingThread) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var a = e->new_var(), b = e->new_var();
  e->push([] {}, {}, {a});
  e->wait_all();
  std::thread::id ran_on;
  int worker = -1;
  e->push([&](const RunContext& ctx) {
    ran_on = std::this_thread::get_id();
    worker = ctx.worker;
  }, {a}, {b}, {.small = true});
  // No wait: the body ran inside the push.
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(worker, 2);
  e->wait_all();
}

// EngineOptions::inline_small_ops = -1, or DEPENGINE_INLINE_SMALL_OPS=0, hands every op to
// a worker, small ones included.
TEST(SchedulerSmallOps, AnEngineMadeNotToRunSmallOpsInThePushHandsThemToWorkers) {
  const std::thread::id me = std::this_thread::get_id();
  auto ran_in_push = [&](Engine& e) {
    Var a = e.new_var();
    std::atomic<bool> pushing{true}, in_push{false};
    e.push([&] {
      if (std::this_thread::get_id() == me && pushing.load()) in_push = true;
    }, {}, {a}, {.small = true});
    pushing = false;
    e.wait_all();
    return in_push.load();
  };
  EXPECT_FALSE(ran_in_push(*Engine::create("threaded", {.cpu_threads = 2,
                                                        .inline_small_ops = -1})));
  ::setenv("DEPENGINE_INLINE_SMALL_OPS", "0", 1);
  auto from_env = Engine::create("threaded", {.cpu_threads = 2});
  ::unsetenv("DEPENGINE_INLINE_SMALL_OPS");
  EXPECT_FALSE(ran_in_push(*from_env));
  EXPECT_TRUE(ran_in_push(*Engine::create("threaded", {.cpu_threads = 2})));
}

// The pushing thread runs a small op only when it can start it at once and nothing else
// runs: a small op pushed while another op runs, one that must wait for an earlier write,
// and an op not marked small are all left to the workers (or to a wait that helps).
TEST(SchedulerSmallOps, OnlyAReadySmallOpOfAnIdleEngineRunsInThePush) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var held = e->new_var(), free_var = e->new_var(), out = e->new_var();
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<bool> pushing{false}, in_push{false};
  // True if a body runs on this thread while a push of it is under way.
  auto note = [&] {
    if (std::this_thread::get_id() == me && pushing.load()) in_push = true;
  };
  auto push = [&](auto fn, VarList reads, VarList writes, PushOptions o) {
    pushing = true;
    e->push(fn, reads, writes, std::move(o));
    pushing = false;
  };
  // Not marked small, on an idle engine.
  push(note, {}, {out}, {});
  e->wait_all();
  EXPECT_FALSE(in_push.load()) << "an op not marked small ran inside its push";
  // Small, while another op runs.
  std::atomic<bool> started{false}, release{false};
  e->push([&] {
    started = true;
    eventually([&] { return release.load(); });
  }, {}, {held});
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  push(note, {free_var}, {out}, {.small = true});
  // Small, but waiting for the running write of `held`.
  push(note, {held}, {out}, {.small = true});
  release = true;
  e->wait_all();
  EXPECT_FALSE(in_push.load()) << "a small op ran inside its push while another op ran";
}

// What a small op run inside its push throws is its failure, as on a worker: the push
// returns, and wait_all and a read of its output rethrow it.
TEST(SchedulerSmallOps, ASmallOpThatThrowsFailsItsOutputNotItsPush) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var out = e->new_var();
  bool ran = false;
  EXPECT_NO_THROW(e->push([&] {
    ran = true;
    throw std::runtime_error("small and broken");
  }, {}, {out}, {.small = true}));
  EXPECT_TRUE(ran);
  EXPECT_THROW(e->wait_to_read(out), std::runtime_error);
  EXPECT_THROW(e->wait_all(), std::runtime_error);
}

// A small op pushed by a running op goes to the workers: the push is inside an op, and the
// engine is not idle.
TEST(SchedulerSmallOps, ASmallOpPushedInsideAnOpIsNotRunByItsPush) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var a = e->new_var(), b = e->new_var();
  std::atomic<bool> inner_in_push{false}, pushing{false};
  std::thread::id outer_thread;
  e->push([&] {
    outer_thread = std::this_thread::get_id();
    pushing = true;
    e->push([&] {
      if (std::this_thread::get_id() == outer_thread && pushing.load()) inner_in_push = true;
    }, {}, {b}, {.small = true});
    pushing = false;
  }, {}, {a});
  e->wait_all();
  EXPECT_FALSE(inner_in_push.load());
}

#ifdef __linux__
// Pool threads run SCHED_BATCH, so that waking one never preempts the frontend that woke it.
TEST(SchedulerWakeUp, PoolThreadsDoNotPreemptTheirWaker) {
  // Where the policy cannot be set at all (a locked-down sandbox), the engine keeps the
  // thread's policy; the test then has nothing to check.
  bool settable = false;
  std::thread([&] {
    sched_param p{};
    settable = pthread_setschedparam(pthread_self(), SCHED_BATCH, &p) == 0;
  }).join();
  if (!settable) GTEST_SKIP() << "SCHED_BATCH cannot be set here";
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var v = e->new_var();
  int policy = -1;
  e->push([&policy] { policy = sched_getscheduler(0); }, {}, {v});
  e->wait_all();  // may run the op itself: then push again until a pool thread ran one
  for (int i = 0; i < 1000 && policy != SCHED_BATCH; ++i) {
    std::atomic<bool> ran{false};
    e->push([&] { policy = sched_getscheduler(0); ran = true; }, {}, {v});
    ASSERT_TRUE(eventually([&] { return ran.load(); }));  // a worker, not this thread
  }
  e->wait_all();
  EXPECT_EQ(policy, SCHED_BATCH);
}
#endif

// Many threads in wait_all at once, each with its own op still running: the engine keeps
// one epoch per wait_all (more than the seven it counts on its hot cache line), and each
// call returns only once every op pushed before it has finished. Repeated, so that epochs
// are freed and their slots reused.
TEST(SchedulerWaitAll, ManyConcurrentWaitsEachWaitForTheirOps) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  constexpr int kThreads = 12;
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> gate{false};
    std::atomic<int> finished{0};
    std::atomic<int> early{0};  // wait_all calls that returned before their op finished
    std::atomic<int> pushed{0};
    std::vector<std::thread> waiters;
    for (int t = 0; t < kThreads; ++t) {
      waiters.emplace_back([&, t] {
        Var v = e->new_var();
        std::atomic<bool> mine{false};
        e->push([&] {
          // The first ops hold the workers until every thread has pushed.
          if (t < 2) eventually([&] { return gate.load(); });
          mine = true;
          finished.fetch_add(1);
        }, {}, {v});
        pushed.fetch_add(1);
        e->wait_all();
        if (!mine.load()) early.fetch_add(1);
      });
    }
    EXPECT_TRUE(eventually([&] { return pushed.load() == kThreads; }));
    gate = true;
    for (std::thread& w : waiters) w.join();
    EXPECT_EQ(early.load(), 0) << "round " << round;
    EXPECT_EQ(finished.load(), kThreads);
    EXPECT_EQ(e->pending(), 0u);
  }
}

}  // namespace
}  // namespace depengine::test
