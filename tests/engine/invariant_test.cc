// The engine's invariant checks (engine/src/invariant.h) on a var queue: consistent use
// passes, and in debug and sanitizer builds a release that no grant matches aborts naming
// what broke (in release builds the checks are compiled out).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

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
  EXPECT_EQ(q.reads_running(), 0);
  EXPECT_FALSE(q.write_active);
}

// Issue 26: a read that others of its version outlast is released without the lock; the
// last one is not (it may grant), and the count never reaches zero outside the lock.
TEST(VarQueue, ReleasesAReadWithoutTheLockOnlyWhileOthersRun) {
  VarQueue q;
  Access r1 = access(AccessKind::read), r2 = access(AccessKind::read),
      r3 = access(AccessKind::read), w = access(AccessKind::write);
  EXPECT_TRUE(q.grant_or_enqueue(r1));
  EXPECT_TRUE(q.grant_or_enqueue(r2));
  EXPECT_TRUE(q.grant_or_enqueue(r3));
  EXPECT_FALSE(q.grant_or_enqueue(w));
  EXPECT_TRUE(q.release_shared_read());
  EXPECT_TRUE(q.release_shared_read());
  EXPECT_EQ(q.reads_running(), 1);
  EXPECT_FALSE(q.release_shared_read());  // the last: left to release(), which grants
  EXPECT_EQ(q.reads_running(), 1);
  EXPECT_EQ(q.release(AccessKind::read), &w);
  EXPECT_FALSE(q.release_shared_read());  // none running
  EXPECT_EQ(q.release(AccessKind::write), nullptr);
  EXPECT_TRUE(q.idle());
}

// Many threads release the reads of one version at once, some without the lock and the
// last under it, while another keeps queueing: exactly one release grants the waiting write,
// after every read was released (TSan checks the ordering of the readers' data).
TEST(VarQueue, ConcurrentReadReleasesGrantTheWriteOnce) {
  constexpr int kReaders = 8, kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    VarQueue q;
    std::vector<Access> reads(kReaders, access(AccessKind::read));
    Access w = access(AccessKind::write);
    for (Access& r : reads) ASSERT_TRUE(q.grant_or_enqueue(r));
    {
      std::lock_guard lk(q.lock);
      ASSERT_FALSE(q.grant_or_enqueue(w));
    }
    int data[kReaders] = {};
    std::atomic<int> grants{0};
    std::atomic<int> done_before_grant{-1};
    std::vector<std::thread> threads;
    std::atomic<int> released{0};
    for (int i = 0; i < kReaders; ++i) {
      threads.emplace_back([&, i] {
        data[i] = i + 1;  // the reader's work, ordered before the write's grant
        released.fetch_add(1, std::memory_order_relaxed);
        if (q.release_shared_read()) return;
        std::lock_guard lk(q.lock);
        if (Access* g = q.release(AccessKind::read)) {
          EXPECT_EQ(g, &w);
          done_before_grant.store(released.load(std::memory_order_relaxed));
          int sum = 0;
          for (int d : data) sum += d;
          EXPECT_EQ(sum, kReaders * (kReaders + 1) / 2);
          grants.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(grants.load(), 1);
    EXPECT_EQ(done_before_grant.load(), kReaders);
    EXPECT_TRUE(q.write_active);
    EXPECT_EQ(q.reads_running(), 0);
  }
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
