// A var read at push, then dropped or deleted: the read credits its pushes took (VarQueue::
// read_credits; the queue's own tests are in invariant_test.cc) go back, so that the var is
// freed, and a delete that only frees memory runs its callback.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <depengine/engine.h>

#include "op.h"
#include "record_pool.h"
#include "test_util.h"
#include "var_state.h"

namespace depengine::detail {
namespace {

using test::kRecordPoolBypassed;

// Stand-ins for ops: the queue keeps only their addresses (with the access kind in the low
// bits), so aligned storage does.
struct alignas(64) FakeOp {
  char bytes[64];
};

Access access(VarState* v, FakeOp& op, AccessKind kind) {
  return make_access(v, reinterpret_cast<Op*>(&op), kind);
}

// The last handle's release gives the credits back, so a var read at push and then dropped
// is freed (var_state.cc). The freed block is the next the pool hands out on this thread.
TEST(VarCredits, AVarReadAtPushIsFreedWhenItsLastHandleGoes) {
  if (kRecordPoolBypassed) {
    GTEST_SKIP() << "the pool is bypassed under ASan and TSan (LeakSanitizer checks it there)";
  }
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
