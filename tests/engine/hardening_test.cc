// The boundaries around user callbacks, shutdown and identity (issue 11): nothing an
// observer, an async body, a completing thread or a destructor does may hang, abort or
// corrupt the engine. Every test here hung, crashed or failed before its fix; the ctest
// timeout turns a hang into a failure.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/graph.h>

#include "test_util.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

// Throws from one chosen event, every time.
class ThrowingObserver final : public Observer {
 public:
  explicit ThrowingObserver(std::string event) : event_(std::move(event)) {}
  void on_push(const OpInfo&) override { maybe_throw("on_push"); }
  void on_ready(std::uint64_t) override { maybe_throw("on_ready"); }
  void on_start(std::uint64_t, int) override { maybe_throw("on_start"); }
  void on_end(std::uint64_t, bool, bool) override { maybe_throw("on_end"); }

 private:
  void maybe_throw(const char* event) {
    if (event_ == event) throw std::runtime_error(std::string("observer broke in ") + event);
  }
  std::string event_;
};

struct ObserverCase {
  EngineParam engine;
  std::string event;
};

class ThrowingObservers : public testing::TestWithParam<ObserverCase> {};

// The op runs, its readers run, wait_all reports the observer's exception once (naming the
// event), nothing stays pending, and the engine keeps working and shuts down.
TEST_P(ThrowingObservers, AreContainedAndReported) {
  auto e = make_engine(GetParam().engine);
  e->set_observer(std::make_shared<ThrowingObserver>(GetParam().event));
  Var a = e->new_var(), b = e->new_var();
  int x = 0, y = 0;
  e->push([&] { x = 1; }, {}, {a});
  e->push([&] { y = x + 1; }, {a}, {b});
  expect_error([&] { e->wait_all(); }, "Observer::" + GetParam().event);
  EXPECT_EQ(y, 2);
  EXPECT_EQ(e->pending(), 0u);
  EXPECT_NO_THROW(e->wait_to_read(b));
  e->set_observer(nullptr);
  e->push([&] { y = 10; }, {}, {b});
  e->wait_to_read(b);
  EXPECT_EQ(y, 10);
  EXPECT_NO_THROW(e->wait_all());
  // delete_var goes through the same push path: it must not be refused by the observer.
  e->set_observer(std::make_shared<ThrowingObserver>(GetParam().event));
  std::atomic<bool> deleted{false};
  e->delete_var(b, [&] { deleted = true; });
  EXPECT_THROW(e->wait_all(), Error);
  EXPECT_TRUE(deleted.load());
}

std::vector<ObserverCase> observer_cases() {
  std::vector<ObserverCase> cases;
  for (const EngineParam& p : {EngineParam{"naive", 1}, EngineParam{"threaded", 1},
                               EngineParam{"threaded", 2}}) {
    for (const char* ev : {"on_push", "on_ready", "on_start", "on_end"}) cases.push_back({p, ev});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Engines, ThrowingObservers, testing::ValuesIn(observer_cases()),
                         [](const testing::TestParamInfo<ObserverCase>& p) {
                           return p.param.engine.kind + "_" +
                                  std::to_string(p.param.engine.threads) + "_" +
                                  p.param.event;
                         });

class Hardening : public testing::TestWithParam<EngineParam> {};

// One recorder on two engines: the second engine's op ids repeat the first's, and the
// recorder's on_push throws. Both engines go on.
TEST_P(Hardening, OneRecorderOnTwoEngines) {
  auto recorder = std::make_shared<GraphRecorder>();
  auto e1 = make_engine(GetParam());
  auto e2 = make_engine(GetParam());
  e1->set_observer(recorder);
  e2->set_observer(recorder);
  Var v1 = e1->new_var(), v2 = e2->new_var();
  std::atomic<int> ran{0};
  e1->push([&] { ++ran; }, {}, {v1});
  e2->push([&] { ++ran; }, {}, {v2});
  EXPECT_NO_THROW(e1->wait_all());
  expect_error([&] { e2->wait_all(); }, "on_push");
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(e2->pending(), 0u);
}

// An observer that calls back into the engine is told so; nothing deadlocks.
TEST_P(Hardening, ObserverCallingTheEngineIsRefused) {
  auto e = make_engine(GetParam());
  class Pushing final : public Observer {
   public:
    explicit Pushing(Engine& e) : e_(e) {}
    void on_push(const OpInfo&) override { e_.push([] {}, {}, {}); }
    void on_ready(std::uint64_t) override {}
    void on_start(std::uint64_t, int) override {}
    void on_end(std::uint64_t, bool, bool) override {}

   private:
    Engine& e_;
  };
  e->set_observer(std::make_shared<Pushing>(*e));
  Var v = e->new_var();
  int x = 0;
  e->push([&] { x = 1; }, {}, {v});
  expect_error([&] { e->wait_all(); }, "observers must not call the engine");
  EXPECT_EQ(x, 1);
}

// The naive engine used to leave its thread marked as draining after an exception escaped
// a push, so that thread's later pushes were queued and never ran.
TEST_P(Hardening, PushesAfterAThrowingObserverStillRun) {
  auto e = make_engine(GetParam());
  e->set_observer(std::make_shared<ThrowingObserver>("on_start"));
  Var v = e->new_var();
  int x = 0;
  e->push([&] { x = 1; }, {}, {v});
  e->set_observer(nullptr);
  e->push([&] { x = 2; }, {v}, {v});
  EXPECT_THROW(e->wait_all(), Error);
  EXPECT_EQ(x, 2);
}

// Identity: a var of a destroyed engine is refused by a new engine, even one made at the
// same address (the old check compared addresses).
TEST_P(Hardening, VarOfADestroyedEngineIsRefusedEvenAtTheSameAddress) {
  auto first = make_engine(GetParam());
  const void* address = first.get();
  Var v = first->new_var();
  first.reset();
  std::unique_ptr<Engine> reused;
  std::vector<std::unique_ptr<Engine>> others;
  for (int i = 0; i < 64 && !reused; ++i) {
    auto e = make_engine(GetParam());
    if (e.get() == address) {
      reused = std::move(e);
    } else {
      others.push_back(std::move(e));
    }
  }
  auto& e = reused ? *reused : *others.front();
  expect_error([&] { e.push([] {}, {v}, {}); }, "belongs to another engine");
  expect_error([&] { e.wait_to_read(v); }, "belongs to another engine");
  expect_error([&] { e.delete_var(v); }, "belongs to another engine");
  EXPECT_EQ(e.pending(), 0u);
}

// The oracle accepts what the threaded engine accepts: a thread that completes an async op
// and pushes follow-up work before calling done() (the naive engine held its lock while
// waiting for the completion, and deadlocked). The follow-up runs after the async op.
TEST_P(Hardening, CompleterThatPushesBeforeDone) {
  auto e = make_engine(GetParam());
  Var a = e->new_var(), b = e->new_var();
  std::vector<int> order;
  std::mutex mu;
  std::thread completer;
  Engine* raw = e.get();
  e->push_async([&](Completion done) {
    std::lock_guard held(mu);  // until `completer` is assigned, before done() can run
    completer = std::thread([&, done] {
      raw->push([&] {
        std::lock_guard lk(mu);
        order.push_back(2);
      }, {a}, {b});
      {
        std::lock_guard lk(mu);
        order.push_back(1);
      }
      done();
    });
  }, {}, {a});
  e->wait_to_read(a);  // done() has been called, so the follow-up was pushed before it
  e->wait_to_read(b);
  {
    std::lock_guard lk(mu);
    completer.join();
  }
  e->wait_all();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

// Back-pressure with async ops whose completing threads push before done(): the bound is
// full of ops that only those threads can finish, so their pushes must go through.
TEST_P(Hardening, BackPressureDoesNotDeadlockCompleters) {
  auto e = make_engine(GetParam(), {.max_inflight = 2});
  Engine* raw = e.get();
  std::atomic<int> followups{0};
  std::vector<std::thread> completers(6);
  std::mutex mu;
  for (int i = 0; i < 6; ++i) {
    Var v = e->new_var();
    e->push_async([&, raw, v, i](Completion done) {
      std::lock_guard lk(mu);
      completers[static_cast<std::size_t>(i)] = std::thread([&followups, raw, v, done] {
        std::this_thread::sleep_for(2ms);
        raw->push([&followups] { ++followups; }, {}, {v});
        done();
      });
    }, {}, {v});
  }
  e->wait_all();
  {
    std::lock_guard lk(mu);
    for (auto& t : completers) t.join();
  }
  e->wait_all();
  EXPECT_EQ(followups.load(), 6);
}

// wait_all waits for what was pushed before it, not for a thread that keeps pushing: here
// one async op is always in flight while the other thread runs (10 s at most).
TEST_P(Hardening, WaitAllIsNotHeldByLaterPushes) {
  auto e = make_engine(GetParam());
  if (GetParam().kind == "naive") GTEST_SKIP() << "naive push_async waits for done()";
  Var mine = e->new_var();
  std::atomic<bool> stop{false}, started{false}, gave_up{false};
  std::thread churn([&] {
    // Independent async ops, each completed only once the next one's body has run, so that
    // one is always in flight.
    std::mutex mu;
    std::vector<Completion> held;
    int pushed = 0, completed = 0;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!stop.load()) {
      if (std::chrono::steady_clock::now() > until) {
        gave_up = true;
        break;
      }
      Var v = e->new_var();
      e->push_async([&](Completion done) {
        std::lock_guard lk(mu);
        held.push_back(std::move(done));
      }, {}, {v});
      ++pushed;
      for (;;) {
        std::unique_lock lk(mu);
        if (static_cast<int>(held.size()) + completed == pushed) break;
        lk.unlock();
        std::this_thread::yield();
      }
      std::vector<Completion> now;
      {
        std::lock_guard lk(mu);
        while (held.size() > 1) {
          now.push_back(std::move(held.front()));
          held.erase(held.begin());
        }
      }
      for (Completion& d : now) {
        d();
        ++completed;
      }
      started = true;
      std::this_thread::sleep_for(1ms);
    }
    std::lock_guard lk(mu);
    for (Completion& d : held) d();
  });
  while (!started.load()) std::this_thread::sleep_for(1ms);
  int x = 0;
  e->push([&] { x = 1; }, {}, {mine});
  e->wait_all();
  const bool held_until_gave_up = gave_up.load();
  stop = true;
  churn.join();
  EXPECT_FALSE(held_until_gave_up) << "wait_all waited for ops pushed after it";
  EXPECT_EQ(x, 1);
  e->wait_all();
}

// Devices and lanes that do not exist are refused at push, and nothing stays registered.
TEST_P(Hardening, UnknownDeviceKindsAndLanesAreRefused) {
  auto e = make_engine(GetParam(), {.sim_gpus = 1});
  Var v = e->new_var();
  Device bad_kind{static_cast<Device::Kind>(7), 0};
  expect_error([&] { e->push([] {}, {}, {v}, {.device = bad_kind}); }, "unknown device kind");
  expect_error([&] { e->push([] {}, {}, {v}, {.device = Device{Device::Kind::cpu, 3}}); },
               "unknown device cpu(3)");
  for (int lane : {4, 17, 255}) {
    expect_error(
        [&] {
          e->push([] {}, {}, {v}, {.device = Device::gpu(0), .lane = static_cast<Lane>(lane)});
        },
        "unknown lane " + std::to_string(lane));
  }
  EXPECT_EQ(e->pending(), 0u);
  EXPECT_NO_THROW(e->wait_all());
  int x = 0;
  e->push([&] { x = 1; }, {}, {v});
  e->wait_to_read(v);
  EXPECT_EQ(x, 1);
}

// An exception thrown by an async body after done() — a second done() included — is not
// dropped: the op has finished, and wait_all reports it.
TEST_P(Hardening, ThrowAfterDoneIsReported) {
  auto e = make_engine(GetParam());
  Var v = e->new_var(), w = e->new_var();
  e->push_async([](Completion done) {
    done();
    throw std::logic_error("after done");
  }, {}, {v});
  EXPECT_NO_THROW(e->wait_to_read(v));
  try {
    e->wait_all();
    ADD_FAILURE() << "expected the exception thrown after done()";
  } catch (const std::logic_error& ex) {
    EXPECT_STREQ(ex.what(), "after done");
  }
  e->push_async([](Completion done) {
    done();
    done();
  }, {}, {w});
  expect_error([&] { e->wait_all(); }, "called twice");
}

// Sets its flag when the engine that holds it is gone (the engine's last reference to its
// observer goes then): a test that deletes an engine from inside an op waits for that, so
// that the process does not end while the engine stops.
struct Gone final : Observer {
  explicit Gone(std::shared_ptr<std::atomic<bool>> f) : flag(std::move(f)) {}
  ~Gone() override { *flag = true; }
  void on_push(const OpInfo&) override {}
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {}
  void on_end(std::uint64_t, bool, bool) override {}
  std::shared_ptr<std::atomic<bool>> flag;
};

// True once `flag` is set, false if 20 s pass first.
bool set_within_20s(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!flag.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  return flag.load();
}

// Deleting an engine from inside one of its own ops used to deadlock (the destructor waited
// for the op that called it). Now the destructor returns, and the engine finishes the work
// pushed before on a thread of its own: every op runs, nothing is freed under it (ASan).
TEST_P(Hardening, DeletingTheEngineFromItsOwnOp) {
  auto gone = std::make_shared<std::atomic<bool>>(false);
  auto e = make_engine(GetParam());
  e->set_observer(std::make_shared<Gone>(gone));
  auto ran = std::make_shared<std::atomic<int>>(0);
  Var v = e->new_var();
  Engine* raw = e.release();
  for (int i = 0; i < 20; ++i) raw->push([ran] { ++*ran; }, {}, {v});
  raw->push([raw, ran] {
    delete raw;
    ++*ran;
  }, {}, {v});
  EXPECT_TRUE(set_within_20s(*gone)) << "the engine was not destroyed";
  EXPECT_EQ(ran->load(), 21);
}

// A pool thread holds back the retirements of the ops it finishes (HeldRetires, accounting.h).
// Deleting the engine from inside an op waits for every other op to leave; the deleting op's
// own thread held those of the independent ops it ran before, which kept activity up: it
// must let them go first, or the delete waits for itself.
TEST(HeldRetires, DeletingTheEngineFromAnOpAfterIndependentOps) {
  auto gone = std::make_shared<std::atomic<bool>>(false);
  Engine* raw = Engine::create("threaded", {.cpu_threads = 1}).release();
  raw->set_observer(std::make_shared<Gone>(gone));
  auto ran = std::make_shared<std::atomic<int>>(0);
  Var gate = raw->new_var();
  // The worker waits on the first op until every other is queued, then runs them in order.
  auto go = std::make_shared<std::atomic<bool>>(false);
  raw->push([go] {
    while (!go->load()) std::this_thread::yield();
  }, {}, {gate});
  std::vector<Var> vars;
  for (int i = 0; i < 20; ++i) {
    vars.push_back(raw->new_var());
    raw->push([ran] { ++*ran; }, {}, {vars.back()});
  }
  raw->push([raw, ran] {
    delete raw;
    ++*ran;
  }, {}, {raw->new_var()});
  vars.clear();
  *go = true;
  EXPECT_TRUE(set_within_20s(*gone)) << "deleting the engine from its op did not return";
  EXPECT_EQ(ran->load(), 21);
}

// A wait_all waits for its epoch. The one worker finishes the epoch's last op, holds its
// retirement, and takes an op pushed after the wait_all began, which runs until that wait
// returns: the held retirement must go before the later op runs, or neither ends.
TEST(HeldRetires, AnOpOfALaterEpochDoesNotKeepAnEarlierWaitAllWaiting) {
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var a = e->new_var(), b = e->new_var();
  std::atomic<bool> go{false}, returned{false}, timed_out{false};
  e->push([&] {
    while (!go.load()) std::this_thread::yield();
  }, {}, {a});
  std::thread waiter([&] {
    e->wait_all();
    returned = true;
  });
  // Until the waiter has begun its wait (and opened the next epoch) and gone to sleep: the
  // op below is then of a later epoch, and the waiter does not run it itself.
  std::this_thread::sleep_for(100ms);
  e->push([&] {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!returned.load()) {
      if (std::chrono::steady_clock::now() > until) {
        timed_out = true;
        return;
      }
      std::this_thread::yield();
    }
  }, {}, {b});
  go = true;
  waiter.join();
  e->wait_all();
  EXPECT_FALSE(timed_out.load()) << "the earlier wait_all waited for the later op";
}

// One frontend keeps writing (and failing) a var while another waits on it. The naive engine
// no longer holds its lock while ops run, so the failures it stores must still be ordered
// with the waiter's read of them (TSan saw the race).
TEST_P(Hardening, WaitingWhileAnotherFrontendFailsTheVar) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  std::thread writer([&] {
    for (int i = 0; i < 2000; ++i) {
      e->push([i] {
        if (i % 3 == 0) throw std::runtime_error("odd write");
      }, {}, {v});
    }
  });
  // The exceptions are not read here: their last reference may be dropped by a worker, and
  // libstdc++'s reference count is invisible to TSan. What is checked is the var's failure
  // itself, read by the waiter while the engine replaces it.
  int waited = 0;
  for (int i = 0; i < 500; ++i) {
    try {
      e->wait_to_read(v);
    } catch (const std::runtime_error&) {
    }
    ++waited;
  }
  writer.join();
  EXPECT_THROW(e->wait_all(), std::runtime_error);
  EXPECT_EQ(waited, 500);
}

// A var whose last handle goes while a long run of its reads is still being granted, in
// parts (Granted holds 64): the releasing thread's token keeps it from going idle, so it is
// freed by the last read's release, never under the releaser (ASan would see it). Some reads
// finish before the next part is taken, some after; repeated for the interleavings.
// (The threaded engine's: the naive one runs each op as it is pushed.)
TEST(LongRuns, AVarDroppedWhileALongRunOfItsReadsIsGrantedInParts) {
  for (int threads : {1, 2, 4}) {
    auto e = Engine::create("threaded", {.cpu_threads = threads});
    for (int round = 0; round < 10; ++round) {
      Var v = e->new_var();
      std::atomic<bool> go{false};
      std::atomic<int> reads{0};
      e->push([&] {
        while (!go.load()) std::this_thread::yield();
      }, {}, {v});
      constexpr int kReads = 300;
      for (int r = 0; r < kReads; ++r) {
        e->push([&, r] {
          if (r % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
          reads.fetch_add(1);
        }, {v}, {});
      }
      v = Var();  // the last handle: the ops' accesses hold none
      go = true;
      e->wait_all();
      ASSERT_EQ(reads.load(), kReads) << threads << " threads, round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, Hardening, kAllEngines, param_name);

// Strict back-pressure with many pushing threads: the bound counts places taken by
// compare-and-swap, so 8 threads never hold more than the bound in flight (it reached 11
// with a bound of 4).
TEST(BackPressure, BoundHoldsWithManyPushingThreads) {
  auto e = Engine::create("threaded", {.cpu_threads = 2, .max_inflight = 4});
  std::vector<std::thread> pushers;
  for (int t = 0; t < 8; ++t) {
    pushers.emplace_back([&] {
      Var v = e->new_var();
      for (int i = 0; i < 20; ++i) {
        e->push([] { std::this_thread::sleep_for(1ms); }, {}, {v});
      }
    });
  }
  for (auto& t : pushers) t.join();
  e->wait_all();
  EXPECT_LE(e->peak_pending(), 4u);
}

// A frontend blocked at a large bound resumes once the ops in flight have fallen by an
// eighth of the bound, not at the first op that finishes: woken at each retirement, it was
// woken and blocked again for almost every push (4,500 times per 100,000 pushes at a bound of
// 8,192), a context switch each on a machine with as many workers as cores.
TEST(BackPressure, ABlockedFrontendResumesAnEighthBelowTheBound) {
  constexpr int kBound = 64;
  auto e = Engine::create("threaded", {.cpu_threads = 2, .max_inflight = kBound});
  // Each op waits for its own flag, so the ops finish one at a time, when the test says.
  std::vector<std::atomic<bool>> go(kBound);
  std::vector<Var> vars;
  for (int i = 0; i < kBound; ++i) {
    vars.push_back(e->new_var());
    e->push([&go, i] {
      while (!go[static_cast<std::size_t>(i)].load()) std::this_thread::yield();
    }, {}, {vars.back()});
  }
  std::atomic<bool> pushed{false};
  std::thread frontend([&] {
    e->push([] {}, {}, {e->new_var()});
    pushed = true;
  });
  // Blocked at the bound (given the time to get there before any op finishes).
  std::this_thread::sleep_for(50ms);
  const bool at_bound = !pushed.load();
  // Seven ops finished (their retirements counted, or the frontend through): still blocked,
  // as an eighth of 64 is 8.
  for (int i = 0; i < 7; ++i) go[static_cast<std::size_t>(i)] = true;
  for (int k = 0; k < 10000 && !pushed && e->pending() > kBound - 7; ++k) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);
  const bool early = pushed.load();
  // The eighth: through.
  go[7] = true;
  for (int k = 0; k < 10000 && !pushed; ++k) std::this_thread::sleep_for(1ms);
  const bool through = pushed.load();
  for (auto& g : go) g = true;
  frontend.join();
  e->wait_all();
  EXPECT_TRUE(at_bound);
  EXPECT_FALSE(early) << "the frontend resumed before the ops in flight fell by 8";
  EXPECT_TRUE(through);
  EXPECT_LE(e->peak_pending(), static_cast<std::size_t>(kBound));
}

// The naive engine holds the bound too: pushes from other threads while one drains were
// queued without it (a peak of 500 with a bound of 4, of 28,430 with a bound of 1).
TEST(BackPressure, NaiveBoundHoldsWithSeveralPushingThreads) {
  for (const long bound : {1L, 4L}) {
    auto e = Engine::create("naive", {.cpu_threads = 2, .max_inflight = bound});
    std::vector<std::thread> pushers;
    for (int t = 0; t < 4; ++t) {
      pushers.emplace_back([&] {
        Var v = e->new_var();
        for (int i = 0; i < 2000; ++i) e->push([] {}, {}, {v});
      });
    }
    for (auto& t : pushers) t.join();
    e->wait_all();
    EXPECT_LE(e->peak_pending(), static_cast<std::size_t>(bound)) << "bound " << bound;
  }
}

// With a bound of 1 and an async op suspended (its body returned, done() not yet called),
// the pushing thread's next push goes through instead of waiting for the done() that only
// it will call.
TEST(BackPressure, NaiveSuspendedAsyncOpDoesNotHoldTheBound) {
  auto e = Engine::create("naive", {.cpu_threads = 2, .max_inflight = 1});
  Var a = e->new_var(), b = e->new_var();
  std::optional<Completion> held;
  e->push_async([&](Completion done) { held.emplace(std::move(done)); }, {}, {a});
  std::atomic<bool> ran{false};
  e->push([&] { ran = true; }, {a}, {b});  // would wait forever for the bound
  EXPECT_FALSE(ran.load());
  (*held)();
  held.reset();
  e->wait_all();
  EXPECT_TRUE(ran.load());
}

// Shutdown with an async CPU body that calls done() and then pushes a GPU op (it is still
// inside its op, so the push is admitted) on a simulated GPU: the destructor waits for the
// body, then stops the lanes and event pools (before, it destroyed them under the running
// body, which then made a lane in a destroyed vector).
TEST(Shutdown, WaitsForAsyncBodiesStillRunningAfterDone) {
  for (int round = 0; round < 20; ++round) {
    auto ran = std::make_shared<std::atomic<int>>(0);
    {
      auto e = Engine::create("threaded", {.cpu_threads = 2, .sim_gpus = 1});
      Var a = e->new_var(), b = e->new_var();
      Engine* raw = e.get();
      e->push_async([raw, a, b, ran](Completion done) {
        done();
        std::this_thread::sleep_for(2ms);
        raw->push([ran](const RunContext& ctx) {
          ctx.stream->enqueue_host([ran] { ++*ran; });
        }, {a}, {b}, {.device = Device::gpu(0)});
      }, {}, {a});
    }
    EXPECT_EQ(ran->load(), 1) << "round " << round;
  }
}

// Threads completing async ops push into an engine being destroyed: their pushes are
// accepted or refused with Error, never raced (TSan) or lost; the destructor waits for the
// ops, so every accepted push runs. No sleeps stand in for "the destructor has started".
TEST(Shutdown, CompletersRacingTheDestructorAreRefusedCleanly) {
  std::atomic<int> accepted{0}, ran{0}, refused{0};
  std::vector<std::thread> completers(4);
  std::mutex mu;
  {
    auto e = Engine::create("threaded", {.cpu_threads = 2});
    Engine* raw = e.get();
    for (int i = 0; i < 4; ++i) {
      Var v = e->new_var();
      e->push_async([&, raw, v, i](Completion done) {
        std::lock_guard lk(mu);
        completers[static_cast<std::size_t>(i)] = std::thread([&, raw, v, done] {
          for (;;) {
            try {
              raw->push([&] { ++ran; }, {}, {v});
              ++accepted;
            } catch (const Error& err) {
              if (std::string(err.what()).find("shutting down") != std::string::npos) ++refused;
              break;
            }
            std::this_thread::yield();
          }
          done();
        });
      }, {}, {v});
    }
  }
  std::lock_guard lk(mu);
  for (auto& t : completers) t.join();
  EXPECT_EQ(refused.load(), 4);
  EXPECT_EQ(ran.load(), accepted.load());
}

}  // namespace
}  // namespace depengine::test
