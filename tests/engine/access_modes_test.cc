// commute(v) and reduce(v) accesses (depengine/var.h, depengine/reduction.h) on every engine
// kind and several worker counts: commute updates run one at a time in any order, between
// the accesses around their run; reduce contributions run concurrently into private buffers
// and are combined before the next other access. Each test names what it checks.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <depengine/reduction.h>

#include "test_util.h"

namespace depengine::test {
namespace {

class AccessModes : public testing::TestWithParam<EngineParam> {
 protected:
  std::unique_ptr<Engine> e_ = make_engine(GetParam());
  bool parallel() const { return GetParam().kind == "threaded" && GetParam().threads >= 2; }
};


// Counts overlaps of the ops that enter it: two at once is a violation.
struct Exclusive {
  std::atomic<bool> inside{false};
  std::atomic<int> overlaps{0};
  void enter() {
    if (inside.exchange(true)) overlaps.fetch_add(1);
  }
  void leave() { inside.store(false); }
};

Reduction sum_into(long* target, std::atomic<int>* identities = nullptr) {
  return {.identity =
              [identities] {
                if (identities) identities->fetch_add(1);
                return std::make_shared<long>(0);
              },
          .combine = [](void* into,
                        const void* from) { *static_cast<long*>(into) += *static_cast<const long*>(from); },
          .target = target};
}

// commute: the ops of a run never overlap, and every update lands.
TEST_P(AccessModes, CommuteUpdatesNeverOverlap) {
  Var v = e_->new_var();
  Exclusive ex;
  long sum = 0;
  for (int i = 0; i < 400; ++i) {
    e_->push([&, i] {
      ex.enter();
      for (int k = 0; k < 50; ++k) std::this_thread::yield();
      sum += i;
      ex.leave();
    }, {}, {commute(v)});
  }
  e_->wait_to_read(v);
  EXPECT_EQ(ex.overlaps.load(), 0);
  EXPECT_EQ(sum, 400L * 399 / 2);
}

// commute: any order. The first op of the run waits for an input that only the second one
// can release; with write semantics (push order) this could never finish.
TEST_P(AccessModes, CommuteRunsInAnyOrder) {
  if (!parallel()) GTEST_SKIP() << "needs 2+ workers (the gate holds one)";
  Var v = e_->new_var(), gate = e_->new_var();
  std::atomic<bool> second_ran{false};
  std::atomic<bool> gate_saw_second{false};
  e_->push([&] { gate_saw_second = eventually([&] { return second_ran.load(); }); }, {}, {gate});
  std::vector<int> order;
  e_->push([&] { order.push_back(1); }, {gate}, {commute(v)});
  e_->push([&] {
    order.push_back(2);
    second_ran = true;
  }, {}, {commute(v)});
  e_->wait_all();
  EXPECT_TRUE(gate_saw_second.load());
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
}

// commute: a run is ordered after the accesses pushed before it and before the next other
// one (reads see the value before or after the whole run; a write replaces it after).
TEST_P(AccessModes, CommuteRunIsOrderedWithItsNeighbours) {
  Var v = e_->new_var();
  long x = 0;
  std::vector<long> seen(4, -1);
  e_->push([&] { x = 7; }, {}, {v});
  e_->push([&] { seen[0] = x; }, {v}, {});
  for (int i = 1; i <= 100; ++i) e_->push([&, i] { x += i; }, {}, {commute(v)});
  e_->push([&] { seen[1] = x; }, {v}, {});
  e_->push([&] { x *= 3; }, {}, {v});
  for (int i = 1; i <= 10; ++i) e_->push([&] { x += 1; }, {v}, {commute(v)});  // read + commute
  e_->push([&] { seen[2] = x; }, {v}, {});
  e_->wait_all();  // the readers too (wait_to_read waits for writes)
  EXPECT_EQ(seen[0], 7);
  EXPECT_EQ(seen[1], 7 + 5050);
  EXPECT_EQ(seen[2], (7 + 5050) * 3 + 10);
}

// commute: several commute vars, taken in different orders by different ops, never
// deadlock, and each var stays exclusive.
TEST_P(AccessModes, SeveralCommuteVarsDoNotDeadlock) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var();
  Exclusive ea, eb, ec;
  long na = 0, nb = 0, nc = 0;
  for (int i = 0; i < 300; ++i) {
    auto body = [&] {
      ea.enter();
      eb.enter();
      ++na;
      ++nb;
      eb.leave();
      ea.leave();
    };
    if (i % 3 == 0) e_->push(body, {}, {commute(a), commute(b)});
    if (i % 3 == 1) e_->push(body, {}, {commute(b), commute(a)});
    if (i % 3 == 2) {
      e_->push([&] {
        eb.enter();
        ec.enter();
        ++nb;
        ++nc;
        ec.leave();
        eb.leave();
      }, {}, {commute(c), commute(b)});
    }
  }
  e_->wait_all();
  EXPECT_EQ(ea.overlaps.load() + eb.overlaps.load() + ec.overlaps.load(), 0);
  EXPECT_EQ(na, 200);
  EXPECT_EQ(nb, 300);
  EXPECT_EQ(nc, 100);
}

// commute: an op waiting for a held commute var does not hold a worker. With two workers,
// one runs the holder (which lets go only once an unrelated op has run) and the other must
// get past the waiting op to run it. The test thread does not wait in the engine, so it
// cannot run that op itself.
TEST_P(AccessModes, WaitingForACommuteVarDoesNotBlockAWorker) {
  if (!parallel()) GTEST_SKIP() << "needs 2+ workers";
  Var v = e_->new_var();
  std::atomic<bool> holding{false}, other_ran{false}, holder_saw{false};
  e_->push([&] {
    holding = true;
    holder_saw = eventually([&] { return other_ran.load(); });
  }, {}, {commute(v)});
  ASSERT_TRUE(eventually([&] { return holding.load(); }));
  for (int i = 0; i < 4; ++i) e_->push([] {}, {}, {commute(v)});
  e_->push([&] { other_ran = true; }, {}, {});
  EXPECT_TRUE(eventually([&] { return other_ran.load(); }));
  e_->wait_all();
  EXPECT_TRUE(holder_saw.load());
}

// commute: a failure poisons the var like a write: later readers are skipped and waits
// rethrow it, until a write-only access clears it. The other ops of the run still run
// (they may have gone before the failing one; none sees another's failure), and the
// earliest failure in push order stays, whatever order the run took.
TEST_P(AccessModes, CommuteFailurePoisonsLikeAWrite) {
  Var v = e_->new_var(), out = e_->new_var(), after = e_->new_var();
  std::atomic<int> ran{0};
  std::atomic<bool> reader_ran{false};
  e_->push([&] { ran.fetch_add(1); }, {}, {commute(v)});
  e_->push([] { throw std::runtime_error("first"); }, {}, {commute(v)});
  e_->push([&] { ran.fetch_add(1); }, {}, {commute(v), out});
  e_->push([] { throw std::logic_error("second"); }, {}, {commute(v)});
  e_->push([&] { reader_ran = true; }, {v}, {after});
  EXPECT_THROW(e_->wait_to_read(v), std::runtime_error);
  EXPECT_THROW(e_->wait_to_read(after), std::runtime_error);
  EXPECT_NO_THROW(e_->wait_to_read(out));
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(reader_ran.load());
  e_->push([] {}, {}, {v});
  EXPECT_NO_THROW(e_->wait_to_read(v));
}

// commute: delete_var is a write after the run: its callback sees every update.
TEST_P(AccessModes, DeleteAfterCommuteRunsLast) {
  Var v = e_->new_var();
  std::atomic<long> n{0};
  long at_delete = -1;
  for (int i = 0; i < 200; ++i) e_->push([&] { n.fetch_add(1); }, {}, {commute(v)});
  e_->delete_var(v, [&] { at_delete = n.load(); });
  e_->wait_all();
  EXPECT_EQ(at_delete, 200);
  EXPECT_THROW(e_->push([] {}, {}, {commute(v)}), Error);
}

// commute: async ops hold their commute vars until done() is called.
TEST_P(AccessModes, AsyncCommuteHoldsTheVarUntilDone) {
  Var v = e_->new_var();
  Exclusive ex;
  std::vector<std::thread> completers;
  std::mutex mu;
  for (int i = 0; i < 20; ++i) {
    e_->push_async([&](Completion done) {
      ex.enter();
      std::lock_guard lk(mu);
      completers.emplace_back([&ex, done]() mutable {
        ex.leave();
        done();
      });
    }, {}, {commute(v)});
  }
  e_->wait_all();
  for (auto& t : completers) t.join();
  EXPECT_EQ(ex.overlaps.load(), 0);
}

// commute on host-simulated GPUs: ops of a run on different GPUs and lanes launch in any
// order, and their device work (chained by events behind the previous op of the run) never
// overlaps; a CPU commute op in the same run waits for the device work before it.
TEST_P(AccessModes, CommuteOnSimulatedGpusNeverOverlaps) {
  auto e = Engine::create(GetParam().kind, {.cpu_threads = GetParam().threads, .sim_gpus = 2});
  Var v = e->new_var();
  Exclusive ex;
  long sum = 0;
  auto update = [&ex, &sum](long i) {
    ex.enter();
    for (int k = 0; k < 20; ++k) std::this_thread::yield();
    sum += i;
    ex.leave();
  };
  for (int i = 0; i < 120; ++i) {
    if (i % 3 == 2) {
      e->push([update, i] { update(i); }, {}, {commute(v)});
      continue;
    }
    const PushOptions on{.device = Device::gpu(i % 2),
                         .lane = i % 4 == 0 ? Lane::compute : Lane::copy_to_device};
    e->push([update, i](const RunContext& ctx) { ctx.stream->enqueue_host([update, i] { update(i); }); },
            {}, {commute(v)}, on);
  }
  e->wait_to_read(v);
  EXPECT_EQ(ex.overlaps.load(), 0);
  EXPECT_EQ(sum, 120L * 119 / 2);
}

// reduce: the result equals the sequential one, with writes and reads between runs.
TEST_P(AccessModes, ReduceEqualsTheSequentialResult) {
  Var v = e_->new_var();
  long total = 0;
  e_->set_reduction(v, sum_into(&total));
  std::vector<long> seen(2, -1);
  e_->push([&] { total = 5; }, {}, {v});
  for (int i = 1; i <= 1000; ++i) {
    e_->push([v, i] { *reduction_buffer<long>(v) += i; }, {}, {reduce(v)});
  }
  e_->push([&] { seen[0] = total; }, {v}, {});
  e_->push([&] { total *= 2; }, {}, {v});
  for (int i = 1; i <= 100; ++i) e_->push([v] { *reduction_buffer<long>(v) += 1; }, {}, {reduce(v)});
  e_->wait_to_read(v);
  EXPECT_EQ(seen[0], 5 + 500500);
  EXPECT_EQ(total, (5 + 500500) * 2 + 100);
}

// reduce: contributions run concurrently (two of them meet), each into its own thread's
// buffer; at most one buffer per thread of the engine.
TEST_P(AccessModes, ReduceContributionsRunConcurrently) {
  if (!parallel()) GTEST_SKIP() << "needs 2+ workers";
  Var v = e_->new_var();
  long total = 0;
  std::atomic<int> identities{0}, arrived{0};
  std::atomic<bool> met{true};
  e_->set_reduction(v, sum_into(&total, &identities));
  for (int r = 0; r < 2; ++r) {
    e_->push([&, v] {
      arrived.fetch_add(1);
      if (!eventually([&] { return arrived.load() >= 2; })) met = false;
      *reduction_buffer<long>(v) += 1;
    }, {}, {reduce(v)});
  }
  e_->wait_to_read(v);
  EXPECT_TRUE(met.load());
  EXPECT_EQ(total, 2);
  EXPECT_EQ(identities.load(), 2);
}

// reduce: at most one private buffer per thread (workers, plus a thread helping in a wait).
TEST_P(AccessModes, ReduceMakesOneBufferPerThread) {
  Var v = e_->new_var();
  long total = 0;
  std::atomic<int> identities{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  e_->set_reduction(v, sum_into(&total, &identities));
  for (int i = 0; i < 500; ++i) {
    e_->push([&, v] {
      *reduction_buffer<long>(v) += 2;
      std::lock_guard lk(mu);
      threads.insert(std::this_thread::get_id());
    }, {}, {reduce(v)});
  }
  e_->wait_to_read(v);
  EXPECT_EQ(total, 1000);
  const int expect = GetParam().kind == "naive" ? 500 : static_cast<int>(threads.size());
  EXPECT_EQ(identities.load(), expect);  // naive: one reduction per op, combined at once
}

// reduce: wait_all combines the open reductions, so the target is complete after it.
TEST_P(AccessModes, WaitAllCombinesOpenReductions) {
  Var a = e_->new_var(), b = e_->new_var();
  long ta = 0, tb = 0;
  e_->set_reduction(a, sum_into(&ta));
  e_->set_reduction(b, sum_into(&tb));
  for (int i = 0; i < 300; ++i) {
    e_->push([a, b] {
      *reduction_buffer<long>(a) += 1;
      *reduction_buffer<long>(b) += 3;
    }, {}, {reduce(a), reduce(b)});
  }
  e_->wait_all();
  EXPECT_EQ(ta, 300);
  EXPECT_EQ(tb, 900);
}

// reduce: a failed contribution fails the var (wait_to_read rethrows; wait_all reports it
// once); a skipped one passes its input's failure on; a write-only access clears it.
TEST_P(AccessModes, ReduceFailurePoisonsTheVar) {
  Var v = e_->new_var(), bad = e_->new_var();
  long total = 0;
  e_->set_reduction(v, sum_into(&total));
  for (int i = 0; i < 50; ++i) e_->push([v] { *reduction_buffer<long>(v) += 1; }, {}, {reduce(v)});
  e_->push([] { throw std::runtime_error("contribution failed"); }, {}, {reduce(v)});
  EXPECT_THROW(e_->wait_to_read(v), std::runtime_error);
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
  EXPECT_NO_THROW(e_->wait_all());
  e_->push([&] { total = 0; }, {}, {v});
  EXPECT_NO_THROW(e_->wait_to_read(v));
  e_->push([] { throw std::logic_error("upstream"); }, {}, {bad});
  e_->push([v] { *reduction_buffer<long>(v) += 1; }, {bad}, {reduce(v)});
  EXPECT_THROW(e_->wait_to_read(v), std::logic_error);
  EXPECT_THROW(e_->wait_all(), std::logic_error);
}

// reduce: destroying the engine finishes pending work, the open reductions included.
TEST_P(AccessModes, ShutdownCombinesOpenReductions) {
  Var v = e_->new_var();
  long total = 0;
  e_->set_reduction(v, sum_into(&total));
  for (int i = 0; i < 64; ++i) e_->push([v] { *reduction_buffer<long>(v) += 1; }, {}, {reduce(v)});
  e_.reset();
  EXPECT_EQ(total, 64);
}

// reduce: a var whose every handle is gone still has its reduction combined at wait_all
// (the engine keeps it alive until then).
TEST_P(AccessModes, ReductionOfADroppedVarIsCombined) {
  long total = 0;
  {
    Var v = e_->new_var();
    e_->set_reduction(v, sum_into(&total));
    for (int i = 0; i < 32; ++i) e_->push([v] { *reduction_buffer<long>(v) += 2; }, {}, {reduce(v)});
  }
  e_->wait_all();
  EXPECT_EQ(total, 64);
}

// reduce: delete_var comes after the final combine.
TEST_P(AccessModes, DeleteAfterReduceSeesTheCombinedValue) {
  Var v = e_->new_var();
  long total = 0, at_delete = -1;
  e_->set_reduction(v, sum_into(&total));
  for (int i = 0; i < 100; ++i) e_->push([v] { *reduction_buffer<long>(v) += 1; }, {}, {reduce(v)});
  e_->delete_var(v, [&] { at_delete = total; });
  e_->wait_all();
  EXPECT_EQ(at_delete, 100);
}

// Misuse gets an Error at the call, and nothing is pushed.
TEST_P(AccessModes, MisuseIsRefused) {
  Var v = e_->new_var(), w = e_->new_var();
  EXPECT_THROW(e_->push([] {}, {commute(v)}, {}), Error);
  EXPECT_THROW(e_->push([] {}, {reduce(v)}, {}), Error);
  EXPECT_THROW(e_->push([] {}, {}, {reduce(v)}), Error);  // no hooks
  long t = 0;
  EXPECT_THROW(e_->set_reduction(v, {.identity = {}, .combine = {}, .target = &t}), Error);
  EXPECT_THROW(e_->set_reduction(Var{}, sum_into(&t)), Error);
  // A null target (the field's default) would be combined into at the first wait_all.
  EXPECT_THROW(e_->set_reduction(v, sum_into(nullptr)), Error);
  e_->set_reduction(v, sum_into(&t));
  EXPECT_THROW(e_->push([] {}, {v}, {reduce(v)}), Error);
  EXPECT_THROW(e_->push([] {}, {}, {reduce(v), commute(v)}), Error);
  EXPECT_THROW(e_->push_async([](Completion done) { done(); }, {}, {reduce(v)}), Error);
  EXPECT_THROW(reduction_buffer<long>(v), Error);
  e_->push([w] { (void)reduction_buffer<long>(w); }, {}, {w});
  EXPECT_THROW(e_->wait_to_read(w), Error);
  EXPECT_THROW(e_->wait_all(), Error);
  e_->delete_var(v);
  EXPECT_THROW(e_->set_reduction(v, sum_into(&t)), Error);
  e_->wait_all();
  EXPECT_EQ(t, 0);
}

// Observers see the modes; the threaded engine reports the combining op as a write.
TEST_P(AccessModes, ObserversSeeTheModes) {
  struct Modes final : Observer {
    std::mutex mu;
    std::vector<std::pair<std::string, AccessMode>> seen;
    void on_push(const OpInfo& op) override {
      std::lock_guard lk(mu);
      for (const VarAccess& a : op.accesses) seen.emplace_back(std::string(op.name), a.mode);
    }
    void on_ready(std::uint64_t) override {}
    void on_start(std::uint64_t, int) override {}
    void on_end(std::uint64_t, bool, bool) override {}
  };
  auto obs = std::make_shared<Modes>();
  e_->set_observer(obs);
  Var v = e_->new_var(), r = e_->new_var();
  long t = 0;
  e_->set_reduction(r, sum_into(&t));
  e_->push([] {}, {}, {commute(v)}, {.name = "c"});
  e_->push([r] { *reduction_buffer<long>(r) += 1; }, {}, {reduce(r)}, {.name = "r"});
  e_->wait_all();
  std::vector<std::pair<std::string, AccessMode>> expect{{"c", AccessMode::commute},
                                                          {"r", AccessMode::reduce}};
  if (GetParam().kind == "threaded") expect.emplace_back("reduce_combine", AccessMode::read_write);
  EXPECT_EQ(obs->seen, expect);
  EXPECT_EQ(t, 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, AccessModes, kAllEngines, param_name);

}  // namespace
}  // namespace depengine::test
