// The engine's invariant checks (engine/src/invariant.h) on a var queue: consistent use
// passes, and in debug and sanitizer builds a release that no grant matches aborts naming
// what broke (in release builds the checks are compiled out).
#include <gtest/gtest.h>

#include "var_queue.h"

namespace depengine::detail {
namespace {

Access access(AccessKind kind) { return make_access(nullptr, nullptr, kind); }

TEST(VarQueue, GrantsReadsTogetherAndAWriteAlone) {
  VarQueue q;
  Access r1 = access(AccessKind::read), r2 = access(AccessKind::read);
  Access w = access(AccessKind::write), r3 = access(AccessKind::read);
  EXPECT_TRUE(q.grant_or_enqueue(r1));
  EXPECT_TRUE(q.grant_or_enqueue(r2));
  EXPECT_FALSE(q.grant_or_enqueue(w));   // waits for both reads
  EXPECT_FALSE(q.grant_or_enqueue(r3));  // waits behind the write
  EXPECT_EQ(q.release(AccessKind::read), nullptr);
  Access* granted = q.release(AccessKind::read);
  ASSERT_EQ(granted, &w);
  EXPECT_EQ(granted->next, nullptr);
  granted = q.release(AccessKind::write);
  ASSERT_EQ(granted, &r3);
  EXPECT_EQ(q.release(AccessKind::read), nullptr);
  EXPECT_EQ(q.running_reads, 0);
  EXPECT_FALSE(q.write_active);
}

// Issue 14: a run of consecutive commute (or reduce) accesses is granted together once what
// came before is done; the next access of another kind (or another run kind) waits for the
// whole run; a run keeps growing while nothing waits behind it.
TEST(VarQueue, GrantsARunOfCommuteOrReduceAccessesTogether) {
  VarQueue q;
  Access w = access(AccessKind::write), c1 = access(AccessKind::commute),
      c2 = access(AccessKind::commute), red = access(AccessKind::reduce),
      c3 = access(AccessKind::commute), r = access(AccessKind::read);
  EXPECT_TRUE(q.grant_or_enqueue(w));
  EXPECT_FALSE(q.grant_or_enqueue(c1));
  EXPECT_FALSE(q.grant_or_enqueue(c2));
  EXPECT_FALSE(q.grant_or_enqueue(red));  // another run kind: after the commute run
  Access* granted = q.release(AccessKind::write);
  ASSERT_EQ(granted, &c1);
  ASSERT_EQ(granted->next, &c2);
  EXPECT_EQ(c2.next, nullptr);
  EXPECT_EQ(q.group_running, 2);
  EXPECT_EQ(q.release(AccessKind::commute), nullptr);
  EXPECT_EQ(q.release(AccessKind::commute), &red);
  EXPECT_EQ(q.group_kind, AccessKind::reduce);
  EXPECT_EQ(q.release(AccessKind::reduce), nullptr);
  // Nothing waits: a commute access is granted at once, and joins the run it starts.
  EXPECT_TRUE(q.grant_or_enqueue(c3));
  EXPECT_TRUE(q.grant_or_enqueue(c1));
  EXPECT_FALSE(q.grant_or_enqueue(r));
  EXPECT_FALSE(q.grant_or_enqueue(c2));  // behind the waiting read: a run of its own
  EXPECT_EQ(q.release(AccessKind::commute), nullptr);
  EXPECT_EQ(q.release(AccessKind::commute), &r);
  EXPECT_EQ(q.release(AccessKind::read), &c2);
  EXPECT_EQ(q.release(AccessKind::commute), nullptr);
  EXPECT_EQ(q.group_running, 0);
}

#ifndef NDEBUG
TEST(VarQueueDeathTest, ReleasingAReadThatWasNotGrantedAborts) {
  EXPECT_DEATH(
      {
        VarQueue q;
        q.release(AccessKind::read);
      },
      "engine invariant broken.*no running read");
}

TEST(VarQueueDeathTest, ReleasingAWriteThatWasNotGrantedAborts) {
  EXPECT_DEATH(
      {
        VarQueue q;
        Access r = access(AccessKind::read);
        q.grant_or_enqueue(r);
        q.release(AccessKind::write);
      },
      "engine invariant broken.*no active write");
}
#else
TEST(VarQueueDeathTest, ChecksAreCompiledOutInReleaseBuilds) {
  GTEST_SKIP() << "invariant checks are on in debug and sanitizer builds only";
}
#endif

}  // namespace
}  // namespace depengine::detail
