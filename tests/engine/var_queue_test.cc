// Direct tests of a var's queue (engine/src/var_queue.h): the read credits a pushing thread
// takes when it grants a read at push, and that it gives back before anything else is
// queued or granted on the var, or when the var goes. The engine-level tests at the end show
// what a credit never given back would break: a var deleted or dropped after it was read.
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <depengine/engine.h>

#include "op.h"
#include "record_pool.h"
#include "var_state.h"

namespace depengine::detail {
namespace {

constexpr bool kPoolBypassed =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

// Stand-ins for ops: the queue keeps only their addresses (with the access kind in the low
// bits), so aligned storage does.
struct alignas(64) FakeOp {
  char bytes[64];
};

Access access(VarState* v, FakeOp& op, AccessKind kind) {
  return make_access(v, reinterpret_cast<Op*>(&op), kind);
}

class VarQueueCredits : public ::testing::Test {
 protected:
  VarQueueCredits() : var_(new_var_state(1)) {}
  // Every test ends with nothing granted or waiting, so the var is freed here.
  ~VarQueueCredits() override { var_release(var_); }
  VarQueue& q() { return var_->queue; }
  // As the threaded engine's push: unlocked for a read if it can be, else under the lock.
  bool push(FakeOp& op, AccessKind kind) {
    const Access a = access(var_, op, kind);
    q().make_room(1);
    if (q().grant_read_unlocked(a)) return true;
    std::lock_guard lk(q().lock);
    return q().grant_or_enqueue(a);
  }
  // As a finishing op's release; returns what it granted.
  std::vector<Op*> release(AccessKind kind) {
    if (kind == AccessKind::read && q().release_shared_read()) return {};
    Granted granted;
    {
      std::lock_guard lk(q().lock);
      q().release(kind, granted);
    }
    std::vector<Op*> ops;
    for (Waiting w : granted) ops.push_back(w.op());
    return ops;
  }

  VarState* var_;
  FakeOp r1_, r2_, r3_, w_;
};

TEST_F(VarQueueCredits, TheFirstReadGrantedAtPushTakesCreditsForTheNext) {
  ASSERT_TRUE(push(r1_, AccessKind::read));
  EXPECT_EQ(q().reads_running(), 1 + VarQueue::kReadCredits);
  EXPECT_EQ(q().read_credits.load(), VarQueue::kReadCredits);
  ASSERT_TRUE(push(r2_, AccessKind::read));
  ASSERT_TRUE(push(r3_, AccessKind::read));
  // Granted on credit: the count of running reads was not touched again.
  EXPECT_EQ(q().reads_running(), 1 + VarQueue::kReadCredits);
  EXPECT_EQ(q().read_credits.load(), VarQueue::kReadCredits - 2);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(release(AccessKind::read).empty());
}

TEST_F(VarQueueCredits, ReadsReleasedWhileCreditsAreHeldNeverTakeTheLock) {
  ASSERT_TRUE(push(r1_, AccessKind::read));
  ASSERT_TRUE(push(r2_, AccessKind::read));
  // Neither is the last: the credits still count.
  EXPECT_TRUE(q().release_shared_read());
  EXPECT_TRUE(q().release_shared_read());
  EXPECT_FALSE(q().idle());
  EXPECT_TRUE(q().idle_but_for_credits());
}

TEST_F(VarQueueCredits, AWriteAfterFinishedReadsGivesTheCreditsBackAndIsGrantedAtOnce) {
  ASSERT_TRUE(push(r1_, AccessKind::read));
  ASSERT_TRUE(push(r2_, AccessKind::read));
  EXPECT_TRUE(release(AccessKind::read).empty());
  EXPECT_TRUE(release(AccessKind::read).empty());
  EXPECT_TRUE(push(w_, AccessKind::write));
  EXPECT_EQ(q().read_credits.load(), 0);
  EXPECT_EQ(q().reads_running(), 0);
  EXPECT_TRUE(q().writing());
  EXPECT_TRUE(release(AccessKind::write).empty());
  EXPECT_TRUE(q().idle());
}

TEST_F(VarQueueCredits, AWriteWaitsForTheReadsStillRunningAndTheLastGrantsIt) {
  ASSERT_TRUE(push(r1_, AccessKind::read));
  ASSERT_TRUE(push(r2_, AccessKind::read));
  EXPECT_TRUE(release(AccessKind::read).empty());
  EXPECT_FALSE(push(w_, AccessKind::write));  // r2 still runs
  EXPECT_EQ(q().reads_running(), 1);
  // A read pushed behind the waiting write waits too, and takes no credit.
  EXPECT_FALSE(push(r3_, AccessKind::read));
  EXPECT_EQ(q().read_credits.load(), 0);
  const std::vector<Op*> granted = release(AccessKind::read);
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_EQ(granted[0], reinterpret_cast<Op*>(&w_));
  const std::vector<Op*> after_write = release(AccessKind::write);
  ASSERT_EQ(after_write.size(), 1u);
  EXPECT_EQ(after_write[0], reinterpret_cast<Op*>(&r3_));
  // Granted by a release, not at push: no credit was taken for it either.
  EXPECT_EQ(q().reads_running(), 1);
  EXPECT_TRUE(release(AccessKind::read).empty());
  EXPECT_TRUE(q().idle());
}

TEST_F(VarQueueCredits, CommuteAndReduceAccessesGiveTheCreditsBackToo) {
  ASSERT_TRUE(push(r1_, AccessKind::read));
  EXPECT_TRUE(release(AccessKind::read).empty());
  EXPECT_TRUE(push(w_, AccessKind::commute));
  EXPECT_EQ(q().read_credits.load(), 0);
  EXPECT_EQ(q().reads_running(), 0);
  EXPECT_TRUE(release(AccessKind::commute).empty());
  EXPECT_TRUE(q().idle());
}

// The last handle's release gives the credits back, so a var read at push and then dropped
// is freed (var_state.cc). The freed block is the next the pool hands out on this thread.
TEST(VarCredits, AVarReadAtPushIsFreedWhenItsLastHandleGoes) {
  if (kPoolBypassed) GTEST_SKIP() << "the pool is bypassed under ASan and TSan (LeakSanitizer checks it there)";
  VarState* v = new_var_state(1);
  FakeOp op;
  v->queue.make_room(1);
  ASSERT_TRUE(v->queue.grant_read_unlocked(access(v, op, AccessKind::read)));
  ASSERT_TRUE(v->queue.release_shared_read());
  var_release(v);
  void* next = record_pool::allocate(record_pool::Record::var_state);
  EXPECT_EQ(next, static_cast<void*>(v)) << "the var read on credit was not freed";
  record_pool::release(record_pool::Record::var_state, next);
}

// A delete that only frees memory, of a var whose reads were granted at push: the callback
// runs (the queue is idle once the credits are back), where a credit kept would have left it
// pending for a release that never comes.
TEST(VarCredits, AMemoryOnlyDeleteOfAVarReadAtPushRunsItsCallback) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var v = e->new_var();
  Var out = e->new_var();
  for (int i = 0; i < 3; ++i) e->push([] {}, {v}, {out});
  e->wait_all();
  std::atomic<bool> deleted{false};
  e->delete_var(v, [&] { deleted = true; }, {.frees_memory_only = true});
  v = Var();
  e->wait_all();
  EXPECT_TRUE(deleted.load());
}

// The same with reads still running when the delete comes: the last of them runs it.
TEST(VarCredits, AMemoryOnlyDeleteOfAVarStillBeingReadRunsItsCallbackAfterTheReads) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  Var v = e->new_var();
  std::atomic<bool> release_reads{false};
  std::atomic<int> reads_done{0};
  std::vector<Var> outs;
  for (int i = 0; i < 3; ++i) {
    outs.push_back(e->new_var());
    e->push(
        [&] {
          while (!release_reads.load()) std::this_thread::yield();
          reads_done.fetch_add(1);
        },
        {v}, {outs.back()});
  }
  std::atomic<int> reads_at_delete{-1};
  e->delete_var(v, [&] { reads_at_delete = reads_done.load(); }, {.frees_memory_only = true});
  v = Var();
  release_reads = true;
  e->wait_all();
  EXPECT_EQ(reads_at_delete.load(), 3);
}

}  // namespace
}  // namespace depengine::detail
