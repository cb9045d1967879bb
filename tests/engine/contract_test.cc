// The contract of docs/design.md, point by point, on every engine kind and several worker
// counts. Each test names the point it checks.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

class Contract : public testing::TestWithParam<EngineParam> {
 protected:
  std::unique_ptr<Engine> e_ = make_engine(GetParam());
  bool threaded() const { return GetParam().kind == "threaded"; }
  bool parallel() const { return threaded() && GetParam().threads >= 2; }

  // Runs `scenario` on a thread of its own and fails if it does not finish in a generous
  // time, so that a regression to a hang fails instead of stalling the suite. The hung
  // thread and its engine cannot be reclaimed, so the process then exits at once.
  static void finishes_in_time(const std::function<void()>& scenario) {
    std::promise<void> finished;
    std::future<void> f = finished.get_future();
    std::thread runner([&] {
      scenario();
      finished.set_value();
    });
    if (f.wait_for(60s) != std::future_status::ready) {
      std::fprintf(stderr, "FAILED: the scenario hung (not finished after 60 s)\n");
      std::fflush(stderr);
      std::_Exit(1);
    }
    runner.join();
  }

  // Pushes an async op writing `v` whose body stores its Completion in `held` and returns,
  // and waits until the body has run: the Completion is then called (or dropped) only by
  // this thread, after push_async returned.
  void push_held_async(const Var& v, std::optional<Completion>& held, std::atomic<int>* value) {
    std::atomic<bool> ready{false};
    e_->push_async([&, value](Completion done) {
      if (value) *value = 42;
      held.emplace(std::move(done));
      ready = true;
    }, {}, {v});
    while (!ready) std::this_thread::yield();
  }
};

// Point 1: a chain of non-commutative updates gives the sequential result.
TEST_P(Contract, P1_WritesApplyInPushOrder) {
  Var v = e_->new_var();
  long x = 1;
  for (int i = 0; i < 2000; ++i) e_->push([&x, i] { x = (x * 3 + i) % 1000003; }, {}, {v});
  e_->wait_to_read(v);
  long expect = 1;
  for (int i = 0; i < 2000; ++i) expect = (expect * 3 + i) % 1000003;
  EXPECT_EQ(x, expect);
}

// Point 2: reads of the same version run concurrently (two readers meet).
TEST_P(Contract, P2_ReadsOfOneVersionRunConcurrently) {
  if (!parallel()) GTEST_SKIP() << "needs 2+ workers";
  Var v = e_->new_var();
  std::atomic<int> arrived{0};
  std::atomic<bool> met{true};
  for (int r = 0; r < 2; ++r) {
    e_->push([&] {
      arrived.fetch_add(1);
      auto deadline = std::chrono::steady_clock::now() + 10s;
      while (arrived.load() < 2) {
        if (std::chrono::steady_clock::now() > deadline) {
          met = false;
          return;
        }
        std::this_thread::yield();
      }
    }, {v}, {});
  }
  e_->wait_all();
  EXPECT_TRUE(met.load());
}

// Point 2 for runs longer than a release takes at once (Granted: 64, the rest in parts
// behind the releaser's token): every read of a hub sees the write before it, and the next
// write waits for all of them, with the first reads already finishing while the release
// still takes the rest. Fans of 1, 63, 64, 65, 129 and 700 reads, some reads also writing a
// var of their own, a commute run of 300 between them.
TEST_P(Contract, P2_LongRunsOfReadsSeeTheirWriteAndHoldTheNextOne) {
  Var hub = e_->new_var();
  Var total = e_->new_var();
  constexpr int kOwn = 700;
  std::vector<Var> own;
  for (int i = 0; i < kOwn; ++i) own.push_back(e_->new_var());
  int value = 0;
  std::atomic<int> readers_left{0};
  std::atomic<int> wrong{0};
  std::vector<int> seen(kOwn, 0);
  long sum = 0;
  int expected_version = 0;
  for (int fan : {1, 63, 64, 65, 129, 700, 65}) {
    ++expected_version;
    e_->push([&, fan, expected_version] {
      if (readers_left.load() != 0) wrong.fetch_add(1);  // the reads before are all done
      value = expected_version;
      readers_left.store(fan);
    }, {}, {hub});
    for (int r = 0; r < fan; ++r) {
      const bool writes_own = r % 3 == 0;
      auto body = [&, r, expected_version] {
        if (value != expected_version) wrong.fetch_add(1);
        seen[r] = expected_version;
        readers_left.fetch_sub(1);
      };
      if (writes_own) {
        e_->push(body, {hub}, {own[r]});
      } else {
        e_->push([&, r, expected_version] {
          if (value != expected_version) wrong.fetch_add(1);
          readers_left.fetch_sub(1);
        }, {hub}, {});
      }
    }
    // A run of commute accesses to another var, longer than a release takes at once.
    for (int c = 0; c < 300; ++c) {
      e_->push([&sum, expected_version] { sum += expected_version; }, {}, {commute(total)});
    }
  }
  e_->wait_all();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(readers_left.load(), 0);
  EXPECT_EQ(value, expected_version);
  // Own vars are written by the reads r % 3 == 0 of each fan; the last fan of 65 wrote 0..63.
  for (int r = 0; r < 65; r += 3) EXPECT_EQ(seen[r], expected_version) << r;
  EXPECT_EQ(sum, 300L * (1 + 2 + 3 + 4 + 5 + 6 + 7));
}

// Point 4, as oneTBB's wait_for_all and OpenMP's taskwait do: the thread waiting in
// wait_all runs queued ops meanwhile. The only worker is held by an op that lets go once
// another op has run; only the waiting thread can run that one.
TEST(ContractWaitAll, TheWaitingThreadRunsQueuedOps) {
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var a = e->new_var(), b = e->new_var();
  std::atomic<bool> started{false}, released{false};
  std::atomic<bool> held_until_released{true};
  e->push([&] {
    started = true;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!released.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        held_until_released = false;
        return;
      }
      std::this_thread::yield();
    }
  }, {}, {a});
  // Once the worker holds the first op, the second one stays queued.
  while (!started.load()) std::this_thread::yield();
  std::thread::id ran_on;
  int worker = -1;
  e->push([&](const RunContext& ctx) {
    ran_on = std::this_thread::get_id();
    worker = ctx.worker;
    released = true;
  }, {}, {b});
  e->wait_all();
  EXPECT_TRUE(held_until_released.load()) << "the queued op ran only after the 10 s deadline";
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(worker, 1);  // the helper's index: cpu_threads()
}

// Point 2: a write waits for every earlier read, and later reads wait for the write (WAR,
// RAW, WAW).
TEST_P(Contract, P2_WriteWaitsForEarlierReadsAndWrites) {
  Var v = e_->new_var();
  std::atomic<int> reads_done{0};
  std::atomic<int> value{0};
  std::vector<int> seen(8, -1);
  e_->push([&] { value = 1; }, {}, {v});
  for (int r = 0; r < 4; ++r) {
    e_->push([&, r] {
      std::this_thread::sleep_for(2ms);
      seen[r] = value.load();
      reads_done.fetch_add(1);
    }, {v}, {});
  }
  int reads_at_write = -1;
  e_->push([&] {
    reads_at_write = reads_done.load();
    value = 2;
  }, {}, {v});
  for (int r = 4; r < 8; ++r) e_->push([&, r] { seen[r] = value.load(); }, {v}, {});
  e_->push([&] { value = 3; }, {}, {v});
  e_->wait_all();
  EXPECT_EQ(reads_at_write, 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(seen[r], 1) << r;
  for (int r = 4; r < 8; ++r) EXPECT_EQ(seen[r], 2) << r;
  EXPECT_EQ(value.load(), 3);
}

// Point 3: push returns before the op runs.
TEST_P(Contract, P3_PushDoesNotWaitForTheOperation) {
  if (!threaded()) GTEST_SKIP() << "the naive engine runs ops inside push";
  Var v = e_->new_var();
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> ran{false};
  e_->push([gate, &ran] {
    gate.wait();
    ran = true;
  }, {}, {v});
  EXPECT_FALSE(ran.load());
  release.set_value();
  e_->wait_to_read(v);
  EXPECT_TRUE(ran.load());
}

// Point 3: with a bound on operations in flight, push blocks until one finishes.
TEST_P(Contract, P3_BackPressureBoundsOperationsInFlight) {
  if (!threaded()) GTEST_SKIP() << "the naive engine never has ops in flight";
  auto e = make_engine(GetParam(), {.max_inflight = 3});
  ASSERT_EQ(e->max_inflight(), 3u);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  Var v = e->new_var();
  for (int i = 0; i < 3; ++i) e->push([gate] { gate.wait(); }, {v}, {});
  std::atomic<bool> fourth_pushed{false};
  std::thread frontend([&] {
    e->push([] {}, {v}, {});
    fourth_pushed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(fourth_pushed.load());
  EXPECT_LE(e->pending(), 3u);
  release.set_value();
  frontend.join();
  EXPECT_TRUE(fourth_pushed.load());
  e->wait_all();
  EXPECT_LE(e->peak_pending(), 3u);
}

// Point 4: wait_to_read waits for the writes of that var only; wait_all for everything.
TEST_P(Contract, P4_WaitToReadWaitsForEarlierWrites) {
  Var a = e_->new_var(), b = e_->new_var();
  std::atomic<int> a_val{0};
  for (int i = 0; i < 100; ++i) e_->push([&] { a_val.fetch_add(1); }, {}, {a});
  e_->wait_to_read(a);
  EXPECT_EQ(a_val.load(), 100);

  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) {
    e_->push([&] {
      std::this_thread::sleep_for(50us);
      done.fetch_add(1);
    }, {a}, {b});
  }
  e_->wait_all();
  EXPECT_EQ(done.load(), 50);
  EXPECT_EQ(e_->pending(), 0u);
}

// Point 4: a wait_to_read right after a write never returns before the write is done
// (a read must not be granted while a write runs).
TEST_P(Contract, P4_WaitToReadRightAfterAWriteSeesIt) {
  int stale = 0;
  for (int i = 0; i < 300; ++i) {
    Var v = e_->new_var();
    int x = 0;
    e_->push([&x] {
      std::this_thread::sleep_for(20us);
      x = 1;
    }, {}, {v});
    e_->wait_to_read(v);
    stale += x != 1;
    e_->delete_var(v);
  }
  EXPECT_EQ(stale, 0);
}

// Point 5: a failure poisons what the op writes, skips its readers, reaches the waits with
// its type and message, and a later write-only op clears it.
TEST_P(Contract, P5_FailurePropagatesAndIsRethrownWithItsType) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var();
  std::atomic<bool> reader_ran{false};
  e_->push([] { throw std::out_of_range("boom in producer"); }, {}, {a});
  e_->push([&] { reader_ran = true; }, {a}, {b});
  EXPECT_THROW(e_->wait_to_read(a), std::out_of_range);
  try {
    e_->wait_to_read(b);
    FAIL() << "b should hold a's failure";
  } catch (const std::out_of_range& ex) {
    EXPECT_STREQ(ex.what(), "boom in producer");
  }
  EXPECT_FALSE(reader_ran.load());
  // Unrelated work still runs.
  int c_val = 0;
  e_->push([&] { c_val = 7; }, {}, {c});
  e_->wait_to_read(c);
  EXPECT_EQ(c_val, 7);
  // wait_all reports the failure once, then forgets it; the vars stay failed.
  EXPECT_THROW(e_->wait_all(), std::out_of_range);
  EXPECT_NO_THROW(e_->wait_all());
  EXPECT_THROW(e_->wait_to_read(b), std::out_of_range);
  // A successful write-only access clears the failure.
  e_->push([] {}, {}, {a});
  EXPECT_NO_THROW(e_->wait_to_read(a));
  EXPECT_THROW(e_->wait_to_read(b), std::out_of_range);
}

// Point 5: a read-write access of a failed var is skipped, as a read is.
TEST_P(Contract, P5_ReadWriteOfFailedVarIsSkipped) {
  Var a = e_->new_var();
  e_->push([] { throw std::runtime_error("first"); }, {}, {a});
  bool ran = false;
  e_->push([&] { ran = true; }, {a}, {a});
  EXPECT_THROW(e_->wait_to_read(a), std::runtime_error);
  EXPECT_FALSE(ran);
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
}

// Point 5: wait_all rethrows the first failure in push order since the previous wait_all.
TEST_P(Contract, P5_WaitAllRethrowsTheFirstFailureInPushOrder) {
  Var a = e_->new_var(), b = e_->new_var();
  e_->push([] {
    std::this_thread::sleep_for(5ms);
    throw std::runtime_error("first");
  }, {}, {a});
  e_->push([] { throw std::logic_error("second"); }, {}, {b});
  try {
    e_->wait_all();
    FAIL() << "expected a failure";
  } catch (const std::runtime_error& ex) {
    EXPECT_STREQ(ex.what(), "first");
  }
  EXPECT_NO_THROW(e_->wait_all());
}

// Point 5: an op reading two failed vars passes on the failure of the earliest-pushed op
// that threw, so the outcome does not depend on which failure landed first.
TEST_P(Contract, P5_ReaderOfSeveralFailedVarsPassesTheEarliestOriginOn) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var(), d = e_->new_var();
  // b's failure is made first in time: a's op waits until b's has thrown.
  std::atomic<bool> b_failed{false};
  e_->push([&] {
    while (!b_failed.load() && GetParam().kind != "naive" && GetParam().threads > 1) {
      std::this_thread::yield();
    }
    throw std::runtime_error("a");
  }, {}, {a});
  e_->push([&] {
    b_failed = true;
    throw std::runtime_error("b");
  }, {}, {b});
  e_->push([] {}, {b, a}, {c});
  e_->push([] {}, {a}, {d});
  try {
    e_->wait_to_read(c);
    FAIL() << "expected a failure";
  } catch (const std::runtime_error& ex) {
    EXPECT_STREQ(ex.what(), "a");
  }
  try {
    e_->wait_all();
    FAIL() << "expected a failure";
  } catch (const std::runtime_error& ex) {
    EXPECT_STREQ(ex.what(), "a");
  }
}

// Point 6: deleting a var is a write: it runs after the earlier accesses.
TEST_P(Contract, P6_DeleteRunsAfterEarlierAccesses) {
  Var v = e_->new_var();
  std::atomic<int> readers{0};
  std::atomic<int> readers_at_delete{-1};
  for (int i = 0; i < 10; ++i) {
    e_->push([&] {
      std::this_thread::sleep_for(100us);
      readers.fetch_add(1);
    }, {v}, {});
  }
  e_->delete_var(v, [&] { readers_at_delete = readers.load(); });
  e_->wait_all();
  EXPECT_EQ(readers_at_delete.load(), 10);
}

// Point 6, a var nothing pending uses (every earlier op on it has finished): the threaded
// engine deletes it at once, on the calling thread, without an op; later use is refused as
// after any delete, and what on_deleted throws is reported by the next wait_all.
TEST_P(Contract, P6_DeletingAnIdleVarRunsOnDeletedAtOnce) {
  Var v = e_->new_var();
  int value = 0;
  e_->push([&] { value = 7; }, {}, {v});
  e_->wait_to_read(v);
  // wait_to_read returns once the write has released v, which may be just before its op
  // leaves the count of ops in flight; wait_all returns after.
  e_->wait_all();
  std::thread::id ran_on;
  int seen = -1;
  e_->delete_var(v, [&] {
    ran_on = std::this_thread::get_id();
    seen = value;
  });
  // The naive engine runs every op on the calling thread; the threaded engine now does too
  // for this one, and has nothing pending once delete_var returns.
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(seen, 7);
  EXPECT_EQ(e_->pending(), 0u);
  expect_error([&] { e_->push([] {}, {v}, {}); }, "was deleted");
  expect_error([&] { e_->delete_var(v); }, "was already deleted");
  e_->wait_all();

  Var w = e_->new_var();
  e_->delete_var(w, [] { throw std::runtime_error("on_deleted threw"); });
  try {
    e_->wait_all();
    ADD_FAILURE() << "wait_all did not report what on_deleted threw";
  } catch (const std::runtime_error& ex) {
    EXPECT_STREQ(ex.what(), "on_deleted threw");
  }
  EXPECT_NO_THROW(e_->wait_all());
}

// The same delete with an access still pending takes the op: it waits for that access.
TEST_P(Contract, P6_DeletingABusyVarWaitsForItsAccess) {
  if (!threaded()) GTEST_SKIP() << "the naive engine runs the read before push returns";
  Var v = e_->new_var();
  std::atomic<bool> release{false}, ran{false};
  std::atomic<bool> deleted_before_release{false};
  e_->push([&] {
    while (!release) std::this_thread::yield();
    ran = true;
  }, {v}, {});
  e_->delete_var(v, [&] { deleted_before_release = !release.load(); });
  EXPECT_GE(e_->pending(), 1u);
  release = true;
  e_->wait_all();
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(deleted_before_release.load());
}

// Point 6, a busy var whose on_deleted only frees memory (DeleteOptions): the threaded
// engine deletes it without an op; the callback runs on the thread that finishes the var's
// last pending access, after it and before wait_all returns. Later use is refused at once.
TEST_P(Contract, P6_DeletingABusyVarThatOnlyFreesMemoryTakesNoOp) {
  if (!threaded()) GTEST_SKIP() << "the naive engine runs the write before push returns";
  Var v = e_->new_var();
  std::atomic<bool> release{false};
  std::thread::id wrote_on, freed_on;
  int value = 0, seen = -1;
  e_->push([&] {
    while (!release) std::this_thread::yield();
    value = 7;
    wrote_on = std::this_thread::get_id();
  }, {}, {v});
  e_->delete_var(v, [&] {
    seen = value;
    freed_on = std::this_thread::get_id();
  }, {.frees_memory_only = true});
  // One op pending, the write: the delete added none (an op-backed delete counts two).
  EXPECT_EQ(e_->pending(), 1u);
  expect_error([&] { e_->push([] {}, {v}, {}); }, "was deleted");
  expect_error([&] { e_->delete_var(v); }, "was already deleted");
  release = true;
  e_->wait_all();
  EXPECT_EQ(seen, 7);
  EXPECT_EQ(freed_on, wrote_on);

  // What it throws anyway is reported by wait_all.
  Var w = e_->new_var();
  std::atomic<bool> go{false};
  e_->push([&] { while (!go) std::this_thread::yield(); }, {w}, {});
  e_->delete_var(w, [] { throw std::runtime_error("freeing threw"); },
                 {.frees_memory_only = true});
  go = true;
  try {
    e_->wait_all();
    ADD_FAILURE() << "wait_all did not report what on_deleted threw";
  } catch (const std::runtime_error& ex) {
    EXPECT_STREQ(ex.what(), "freeing threw");
  }
  EXPECT_NO_THROW(e_->wait_all());
}

// The frontend's pattern at full speed: push a write, delete the var (freeing only) and drop
// its last handle while the write may be finishing on a worker; every callback runs once,
// after its write, and nothing is freed twice or read after it is freed (ASan, TSan).
TEST_P(Contract, P6_DroppingVarsWhoseFreeingDeletesArePending) {
  constexpr int kVars = 3000;
  std::atomic<int> freed{0}, early{0};
  for (int i = 0; i < kVars; ++i) {
    auto written = std::make_shared<std::atomic<bool>>(false);
    Var v = e_->new_var();
    e_->push([written] { written->store(true); }, {}, {v});
    if (i % 3 == 0) e_->push([] {}, {v}, {});  // the last access a read, sometimes
    e_->delete_var(v, [written, &freed, &early] {
      if (!written->load()) early.fetch_add(1);
      freed.fetch_add(1);
    }, {.frees_memory_only = true});
  }  // each v's last handle goes here
  e_->wait_all();
  EXPECT_EQ(freed.load(), kVars);
  EXPECT_EQ(early.load(), 0);
}

// A var last used by a replayed segment: the release of the segment's gate on it runs the
// pending delete, after the segment's op on it.
TEST_P(Contract, P6_FreeingDeleteAfterAReplayRunsOnceTheReplayIsDone) {
  Var v = e_->new_var();
  std::atomic<bool> hold{false}, release{false};
  std::atomic<int> writes{0};
  Segment seg = e_->record([&] {
    e_->push([&] {
      while (hold && !release) std::this_thread::yield();
      writes.fetch_add(1);
    }, {}, {v});
  });
  e_->wait_all();
  if (threaded()) {
    EXPECT_TRUE(seg.precomputed()) << "a segment of one CPU op replays by its plan";
    hold = true;  // the naive engine would run it inside replay()
  }
  e_->replay(seg);
  int at_delete = -1;
  e_->delete_var(v, [&] { at_delete = writes.load(); }, {.frees_memory_only = true});
  if (threaded()) {
    EXPECT_EQ(e_->pending(), 1u);
  }
  release = true;
  e_->wait_all();
  EXPECT_EQ(at_delete, 2);
}

// Point 7: several frontend threads push at once; each thread's order is kept.
TEST_P(Contract, P7_PushFromSeveralThreads) {
  constexpr int kThreads = 4, kOps = 2000;
  std::vector<Var> vars;
  for (int t = 0; t < kThreads; ++t) vars.push_back(e_->new_var());
  Var shared = e_->new_var();
  std::vector<long> x(kThreads, 0);
  long total = 0;
  std::vector<std::thread> frontends;
  for (int t = 0; t < kThreads; ++t) {
    frontends.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        e_->push([&x, t, i] { x[t] = (x[t] * 7 + i) % 1000003; }, {}, {vars[t]});
        if (i % 16 == 0) e_->push([&total] { ++total; }, {vars[t]}, {shared});
      }
    });
  }
  for (auto& f : frontends) f.join();
  e_->wait_all();
  long expect = 0;
  for (int i = 0; i < kOps; ++i) expect = (expect * 7 + i) % 1000003;
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(x[t], expect) << t;
  EXPECT_EQ(total, kThreads * ((kOps + 15) / 16));
}

// Point 8: duplicates are merged: a var twice in one list counts once, and a var in both
// lists is one read-write access. Neither deadlocks.
TEST_P(Contract, P8_DuplicateVarsAreMerged) {
  Var a = e_->new_var(), b = e_->new_var();
  int av = 2, bv = 0;
  e_->push([&] { bv = av + av; }, {a, a}, {b, b});
  e_->push([&] { bv += av; }, {b, a}, {b});
  e_->push([&] { av *= bv; }, {a, b, a}, {a, a});
  e_->wait_all();
  EXPECT_EQ(bv, 6);
  EXPECT_EQ(av, 12);
}

// The same merge for lists longer than 16 vars (merged through a sort): duplicates count once,
// a var in both lists is one read-write access, and the ordering follows.
TEST_P(Contract, P8_LongListsAreMergedLikeShortOnes) {
  constexpr int kVars = 24;
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e_->new_var());
  std::vector<long> value(kVars, 1);
  // Reads every var twice and writes three of them (also read): each op sums all into its
  // writes, so the result depends on every op seeing the one before it.
  for (int step = 0; step < 20; ++step) {
    std::vector<Var> reads = vars;
    reads.insert(reads.end(), vars.begin(), vars.end());
    const int w0 = step % kVars, w1 = (step * 7 + 3) % kVars, w2 = (step * 5 + 11) % kVars;
    std::vector<Var> writes = {vars[w0], vars[w1], vars[w0], vars[w2]};
    e_->push([&value, w0, w1, w2] {
      long sum = 0;
      for (long v : value) sum = (sum + v) % 1000003;
      value[w0] = (value[w0] + sum) % 1000003;
      value[w1] = (value[w1] * 3 + sum) % 1000003;
      value[w2] = (value[w2] * 5 + sum) % 1000003;
    }, reads, writes);
  }
  e_->wait_all();
  std::vector<long> expect(kVars, 1);
  for (int step = 0; step < 20; ++step) {
    const int w0 = step % kVars, w1 = (step * 7 + 3) % kVars, w2 = (step * 5 + 11) % kVars;
    long sum = 0;
    for (long v : expect) sum = (sum + v) % 1000003;
    expect[w0] = (expect[w0] + sum) % 1000003;
    expect[w1] = (expect[w1] * 3 + sum) % 1000003;
    expect[w2] = (expect[w2] * 5 + sum) % 1000003;
  }
  EXPECT_EQ(value, expect);
}

// Async ops: completed from another thread, ordered like sync ops, failures reported.
TEST_P(Contract, AsyncOpCompletedFromAnotherThread) {
  Var a = e_->new_var(), b = e_->new_var();
  std::atomic<int> av{0};
  std::vector<std::thread> helpers;
  std::mutex helpers_mu;
  for (int i = 0; i < 20; ++i) {
    e_->push_async([&, i](Completion done) {
      std::lock_guard lk(helpers_mu);
      helpers.emplace_back([&av, i, done] {
        av = av * 2 + i;
        done();
      });
    }, {}, {a});
  }
  int seen = -1;
  e_->push([&] { seen = av.load(); }, {a}, {b});
  e_->wait_to_read(b);
  int expect = 0;
  for (int i = 0; i < 20; ++i) expect = expect * 2 + i;
  EXPECT_EQ(seen, expect);
  std::lock_guard lk(helpers_mu);
  for (auto& h : helpers) h.join();
}

TEST_P(Contract, AsyncOpFailureThroughCompletion) {
  Var a = e_->new_var();
  std::thread helper;
  std::mutex helper_mu;  // done() may run before the assignment to `helper` completes
  e_->push_async([&](Completion done) {
    std::lock_guard lk(helper_mu);
    helper = std::thread([done] {
      try {
        throw std::invalid_argument("async failure");
      } catch (...) {
        done(std::current_exception());
      }
    });
  }, {}, {a});
  EXPECT_THROW(e_->wait_to_read(a), std::invalid_argument);
  {
    std::lock_guard lk(helper_mu);
    helper.join();
  }
  EXPECT_THROW(e_->wait_all(), std::invalid_argument);
}

TEST_P(Contract, AsyncOpThatThrowsBeforeCompletingFails) {
  Var a = e_->new_var();
  e_->push_async([](Completion) { throw std::runtime_error("thrown by async body"); }, {}, {a});
  EXPECT_THROW(e_->wait_to_read(a), std::runtime_error);
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
}

TEST_P(Contract, AsyncOpThatDropsItsCompletionFailsInsteadOfHanging) {
  Var a = e_->new_var();
  e_->push_async([](Completion) {}, {}, {a});
  EXPECT_THROW(e_->wait_to_read(a), Error);
  EXPECT_THROW(e_->wait_all(), Error);
}

TEST_P(Contract, CompletionCalledTwiceIsAnError) {
  Var a = e_->new_var();
  std::promise<bool> second_threw;
  e_->push_async([&](Completion done) {
    done();
    try {
      done();
      second_threw.set_value(false);
    } catch (const Error&) {
      second_threw.set_value(true);
    }
  }, {}, {a});
  EXPECT_TRUE(second_threw.get_future().get());
  e_->wait_all();
}

// done() may be called from any thread, the pushing one included, after push_async returned:
// no engine may wait for it inside push_async.
TEST_P(Contract, AsyncOpCompletedByThePushingThreadAfterPushReturns) {
  finishes_in_time([&] {
    Var a = e_->new_var();
    std::optional<Completion> held;
    push_held_async(a, held, nullptr);
    (*held)();
    held.reset();
    e_->wait_all();
  });
}

// Ops pushed while an async op waits for its completion run after it: a reader of its output
// sees its result, and on the naive engine nothing runs before done(), then all in push order.
TEST_P(Contract, OpsPushedAfterAnUncompletedAsyncOpRunAfterItsCompletion) {
  finishes_in_time([&] {
    Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var();
    std::atomic<int> value{0};
    std::optional<Completion> held;
    std::mutex log_mu;
    std::vector<std::string> log;
    int seen = -1;
    push_held_async(a, held, &value);
    e_->push([&] {
      seen = value.load();
      std::lock_guard lk(log_mu);
      log.push_back("reader");
    }, {a}, {b});
    e_->push([&] {
      std::lock_guard lk(log_mu);
      log.push_back("independent");
    }, {}, {c});
    if (!threaded()) {
      std::lock_guard lk(log_mu);
      EXPECT_TRUE(log.empty()) << "an op ran before the async op ahead of it completed";
    }
    (*held)();
    held.reset();
    e_->wait_all();
    EXPECT_EQ(seen, 42);
    std::lock_guard lk(log_mu);
    ASSERT_EQ(log.size(), 2u);
    if (!threaded()) {
      EXPECT_EQ(log[0], "reader");
      EXPECT_EQ(log[1], "independent");
    }
  });
}

TEST_P(Contract, AsyncFailureFromDoneAfterPushReturnsIsRethrown) {
  finishes_in_time([&] {
    Var a = e_->new_var(), b = e_->new_var();
    std::optional<Completion> held;
    push_held_async(a, held, nullptr);
    std::atomic<bool> reader_ran{false};
    e_->push([&] { reader_ran = true; }, {a}, {b});
    (*held)(std::make_exception_ptr(std::invalid_argument("async failure")));
    held.reset();
    EXPECT_THROW(e_->wait_to_read(b), std::invalid_argument);
    EXPECT_THROW(e_->wait_all(), std::invalid_argument);
    EXPECT_FALSE(reader_ran.load());
  });
}

TEST_P(Contract, CompletionDroppedUncalledAfterPushReturnsFailsInsteadOfHanging) {
  finishes_in_time([&] {
    Var a = e_->new_var();
    std::optional<Completion> held;
    push_held_async(a, held, nullptr);
    held.reset();
    try {
      e_->wait_all();
      ADD_FAILURE() << "wait_all did not report the dropped Completion";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dropped its Completion"), std::string::npos)
          << e.what();
    }
  });
}

// Priorities: among waiting ready ops, higher priority starts first.
TEST_P(Contract, HigherPriorityRunsFirstAmongWaitingOps) {
  if (GetParam().threads != 1 || !threaded()) GTEST_SKIP() << "order is defined on 1 worker";
  Var gate_var = e_->new_var();
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::vector<int> order;
  std::mutex mu;
  e_->push([gate] { gate.wait(); }, {}, {gate_var});  // occupies the only worker
  auto record = [&](int tag) {
    std::lock_guard lk(mu);
    order.push_back(tag);
  };
  std::vector<Var> vars;
  for (int i = 0; i < 6; ++i) vars.push_back(e_->new_var());
  for (int i = 0; i < 3; ++i) e_->push([&, i] { record(i); }, {}, {vars[i]});
  e_->push([&] { record(100); }, {}, {vars[3]}, {.priority = 5});
  e_->push([&] { record(50); }, {}, {vars[4]}, {.priority = 1});
  e_->push([&] { record(200); }, {}, {vars[5]}, {.lane = Lane::priority, .priority = 9});
  release.set_value();
  // Neither wait_all nor wait_to_read: a thread in either runs queued ops too, and with two
  // threads taking ops the order would no longer be defined.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto recorded = [&] {
    std::lock_guard lk(mu);
    return order.size();
  };
  while (recorded() < 6 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  e_->wait_all();
  ASSERT_EQ(order.size(), 6u);
  EXPECT_EQ(order[0], 200);
  EXPECT_EQ(order[1], 100);
  EXPECT_EQ(order[2], 50);
}

// Destroying an engine with pending work finishes that work.
TEST_P(Contract, DestructionFinishesPendingWork) {
  std::atomic<int> ran{0};
  {
    auto e = make_engine(GetParam());
    Var v = e->new_var();
    for (int i = 0; i < 500; ++i) {
      e->push([&] {
        std::this_thread::sleep_for(10us);
        ran.fetch_add(1);
      }, {}, {v});
    }
  }
  EXPECT_EQ(ran.load(), 500);
}

// Var handles may be dropped while ops that use them are pending.
TEST_P(Contract, VarHandlesDroppedWhilePending) {
  std::atomic<int> ran{0};
  for (int i = 0; i < 200; ++i) {
    Var v = e_->new_var();
    e_->push([&] { ran.fetch_add(1); }, {}, {v});
    e_->push([&] { ran.fetch_add(1); }, {v}, {});
  }
  e_->wait_all();
  EXPECT_EQ(ran.load(), 400);
}

// The threaded engine's ops hold no reference on their vars: a var whose last handle goes
// while accesses to it are still queued, granted, parked on a commute exclusion or failed
// must live until the last of them has finished, and then be freed (the sanitizer builds
// report a use after free or a leak).
TEST_P(Contract, VarWithoutHandlesLivesUntilItsAccessesFinish) {
  Var gate = e_->new_var();
  std::optional<Completion> held;
  push_held_async(gate, held, nullptr);
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    Var v = e_->new_var(), w = e_->new_var();
    e_->push([&] { ran.fetch_add(1); }, {gate}, {v});  // queued behind the held gate
    for (int k = 0; k < 3; ++k) e_->push([&] { ran.fetch_add(1); }, {v}, {});
    for (int k = 0; k < 2; ++k) e_->push([&] { ran.fetch_add(1); }, {}, {commute(v)});
    e_->push([] { throw std::runtime_error("failed op"); }, {gate}, {w});
    e_->push([&] { ran.fetch_add(1); }, {w}, {v});  // skipped: reads a failed var
  }  // every handle to v and w gone, all their accesses pending
  (*held)();
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
  EXPECT_EQ(ran.load(), 50 * 6);
}

// Issue 26: reads of one version are released without the var's lock while others still
// run, and only the last one, under the lock, may free a var whose handles are gone. Many
// short readers of each orphaned var, some behind a pending delete that frees memory only,
// finish together on every worker: the var is freed once, after all of them (the sanitizer
// builds report a use after free, a double free or a leak), and every reader ran.
TEST_P(Contract, ManyReadersOfAnOrphanedVarFreeItOnce) {
  std::atomic<int> ran{0}, freed{0};
  for (int round = 0; round < 40; ++round) {
    Var v = e_->new_var();
    e_->push([&] { ran.fetch_add(1); }, {}, {v});
    for (int k = 0; k < 64; ++k) e_->push([&] { ran.fetch_add(1); }, {v}, {});
    if (round % 2 == 1) {
      e_->delete_var(v, [&] { freed.fetch_add(1); }, {.frees_memory_only = true});
    }
  }  // every handle gone, the readers pending or running
  e_->wait_all();
  EXPECT_EQ(ran.load(), 40 * 65);
  EXPECT_EQ(freed.load(), 20);
}

// An op may push further ops; they run after it, in push order.
TEST_P(Contract, NestedPushRunsAfterThePushingOp) {
  Var v = e_->new_var();
  std::vector<int> order;
  e_->push([&] {
    e_->push([&] { order.push_back(2); }, {}, {v});
    order.push_back(1);
  }, {}, {v});
  e_->wait_all();
  e_->wait_to_read(v);
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], 1);
  EXPECT_EQ(order[1], 2);
}

INSTANTIATE_TEST_SUITE_P(Engines, Contract, kAllEngines, param_name);

TEST(EngineDefault, GetReturnsOneProcessWideEngine) {
  Engine& a = Engine::get();
  Engine& b = Engine::get();
  EXPECT_EQ(&a, &b);
  Var v = a.new_var();
  int x = 0;
  a.push([&] { x = 5; }, {}, {v});
  a.wait_to_read(v);
  EXPECT_EQ(x, 5);
}

}  // namespace
}  // namespace depengine::test
