// The engine's invariant checks (engine/src/invariant.h) on a var queue: consistent use
// passes, and in debug and sanitizer builds a release that no grant matches aborts naming
// what broke (in release builds the checks are compiled out).
#include <gtest/gtest.h>

#include "var_queue.h"

namespace depengine::detail {
namespace {

TEST(VarQueue, GrantsReadsTogetherAndAWriteAlone) {
  VarQueue q;
  Access r1{.kind = AccessKind::read}, r2{.kind = AccessKind::read};
  Access w{.kind = AccessKind::write}, r3{.kind = AccessKind::read};
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
        Access r{.kind = AccessKind::read};
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
