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

// Distinct op addresses, aligned as ops are, for telling grants apart (never dereferenced).
Op* fake_op(int i) {
  alignas(64) static char storage[512][64];
  return reinterpret_cast<Op*>(storage[i]);
}
// An access of `kind` by fake op `id`, with room made for it in `q`'s ring.
Access access(AccessKind kind, int id = 0) { return make_access(nullptr, fake_op(id), kind); }
bool enqueue(VarQueue& q, const Access& a) {
  q.make_room(1);
  return q.grant_or_enqueue(a);
}
// Releases an access of `kind` and returns the ops it granted, in order (a long run in
// parts, as the engine's release_access takes it).
std::vector<Op*> release(VarQueue& q, AccessKind kind) {
  Granted run;
  q.release(kind, run);
  std::vector<Op*> granted;
  for (Waiting w : run) granted.push_back(w.op());
  while (run.continues()) {
    q.continue_run(run);
    for (Waiting w : run) granted.push_back(w.op());
  }
  return granted;
}
using Ops = std::vector<Op*>;

TEST(VarQueue, GrantsReadsTogetherAndAWriteAlone) {
  VarQueue q;
  Access r1 = access(AccessKind::read, 1), r2 = access(AccessKind::read, 2);
  Access w = access(AccessKind::write, 3), r3 = access(AccessKind::read, 4);
  EXPECT_TRUE(enqueue(q, r1));
  EXPECT_TRUE(enqueue(q, r2));
  EXPECT_FALSE(enqueue(q, w));   // waits for both reads
  EXPECT_FALSE(enqueue(q, r3));  // waits behind the write
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_EQ(release(q, AccessKind::read), Ops{w.op});
  EXPECT_EQ(release(q, AccessKind::write), Ops{r3.op});
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_EQ(q.reads_running(), 0);
  EXPECT_FALSE(q.writing());
}

// Issue 26: a read that others of its version outlast is released without the lock; the
// last one is not (it may grant), and the count never reaches zero outside the lock.
TEST(VarQueue, ReleasesAReadWithoutTheLockOnlyWhileOthersRun) {
  VarQueue q;
  Access r1 = access(AccessKind::read, 1), r2 = access(AccessKind::read, 2),
      r3 = access(AccessKind::read, 3), w = access(AccessKind::write, 4);
  EXPECT_TRUE(enqueue(q, r1));
  EXPECT_TRUE(enqueue(q, r2));
  EXPECT_TRUE(enqueue(q, r3));
  EXPECT_FALSE(enqueue(q, w));
  EXPECT_TRUE(q.release_shared_read());
  EXPECT_TRUE(q.release_shared_read());
  EXPECT_EQ(q.reads_running(), 1);
  EXPECT_FALSE(q.release_shared_read());  // the last: left to release(), which grants
  EXPECT_EQ(q.reads_running(), 1);
  EXPECT_EQ(release(q, AccessKind::read), Ops{w.op});
  EXPECT_FALSE(q.release_shared_read());  // none running
  EXPECT_EQ(release(q, AccessKind::write), Ops{});
  EXPECT_TRUE(q.idle());
}

// Many threads release the reads of one version at once, some without the lock and the
// last under it, while another keeps queueing: exactly one release grants the waiting write,
// after every read was released (TSan checks the ordering of the readers' data).
TEST(VarQueue, ConcurrentReadReleasesGrantTheWriteOnce) {
  constexpr int kReaders = 8, kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    VarQueue q;
    std::vector<Access> reads(kReaders, access(AccessKind::read, 1));
    Access w = access(AccessKind::write, 2);
    for (Access& r : reads) ASSERT_TRUE(enqueue(q, r));
    q.make_room(1);
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
        if (const Ops g = release(q, AccessKind::read); !g.empty()) {
          EXPECT_EQ(g, Ops{w.op});
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
    EXPECT_TRUE(q.writing());
    EXPECT_EQ(q.reads_running(), 0);
  }
}

// Issue 26: a push grants a read without the var's lock only when nothing waits and no write
// or commute/reduce run holds the var; otherwise it leaves the queue as it was, for the
// locked path (grant_or_enqueue), which keeps push order.
TEST(VarQueue, GrantsAReadWithoutTheLockOnlyWhenNothingWaitsOrHoldsTheVar) {
  VarQueue q;
  Access r1 = access(AccessKind::read, 1), r2 = access(AccessKind::read, 2),
      w = access(AccessKind::write, 3), r3 = access(AccessKind::read, 4),
      c = access(AccessKind::commute, 5), rw = access(AccessKind::read_write, 6);
  EXPECT_TRUE(q.grant_read_unlocked(r1));  // idle
  EXPECT_TRUE(q.grant_read_unlocked(r2));  // beside a running read, on r1's credit
  EXPECT_EQ(q.reads_running(), 1 + VarQueue::kReadCredits);
  EXPECT_FALSE(q.grant_read_unlocked(w));   // not a read
  EXPECT_FALSE(q.grant_read_unlocked(rw));  // a read that writes
  EXPECT_FALSE(enqueue(q, w));              // waits for both reads
  EXPECT_EQ(q.reads_running(), 2);          // the credits given back first
  EXPECT_FALSE(q.grant_read_unlocked(r3));  // a write waits: r3 must queue behind it
  EXPECT_EQ(q.reads_running(), 2);
  EXPECT_FALSE(enqueue(q, r3));
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_EQ(release(q, AccessKind::read), Ops{w.op});
  EXPECT_FALSE(q.grant_read_unlocked(r1));  // the write holds the var (r3 waits too)
  EXPECT_EQ(release(q, AccessKind::write), Ops{r3.op});
  EXPECT_TRUE(q.grant_read_unlocked(r1));   // r3 runs, nothing waits
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_TRUE(enqueue(q, c));               // a commute run holds the var
  EXPECT_FALSE(q.grant_read_unlocked(r1));
  EXPECT_EQ(release(q, AccessKind::commute), Ops{});
  Access gate = access(AccessKind::read, 7);
  gate.gate = true;
  EXPECT_FALSE(q.grant_read_unlocked(gate));  // a replay's gate takes the locked path
  EXPECT_TRUE(q.idle());
}

// Read credits (VarQueue::read_credits): a read granted at push counts kReadCredits more,
// granted to the next reads pushed without touching the count; the pusher gives them back
// before it queues or grants anything else under the lock.
// As the threaded engine's push: unlocked for a read where it may, else under the lock.
bool push(VarQueue& q, const Access& a) {
  q.make_room(1);
  if (q.grant_read_unlocked(a)) return true;
  std::lock_guard lk(q.lock);
  return q.grant_or_enqueue(a);
}
// As a finishing op's release: a read others outlast without the lock, else under it.
Ops finish(VarQueue& q, AccessKind kind) {
  if (kind == AccessKind::read && q.release_shared_read()) return {};
  std::lock_guard lk(q.lock);
  return release(q, kind);
}

TEST(VarQueueCredits, TheFirstReadGrantedAtPushTakesCreditsForTheNext) {
  VarQueue q;
  ASSERT_TRUE(push(q, access(AccessKind::read, 1)));
  EXPECT_EQ(q.reads_running(), 1 + VarQueue::kReadCredits);
  EXPECT_EQ(q.read_credits.load(), VarQueue::kReadCredits);
  ASSERT_TRUE(push(q, access(AccessKind::read, 2)));
  ASSERT_TRUE(push(q, access(AccessKind::read, 3)));
  EXPECT_EQ(q.reads_running(), 1 + VarQueue::kReadCredits);  // not touched again
  EXPECT_EQ(q.read_credits.load(), VarQueue::kReadCredits - 2);
  // Released while credits are held, none is the last: none takes the lock.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.release_shared_read());
  EXPECT_FALSE(q.idle());
  EXPECT_TRUE(q.idle_but_for_credits());
  {
    std::lock_guard lk(q.lock);
    q.return_read_credits();
  }
  EXPECT_TRUE(q.idle());
}

TEST(VarQueueCredits, AWriteAfterFinishedReadsGivesTheCreditsBackAndIsGrantedAtOnce) {
  VarQueue q;
  ASSERT_TRUE(push(q, access(AccessKind::read, 1)));
  ASSERT_TRUE(push(q, access(AccessKind::read, 2)));
  EXPECT_EQ(finish(q, AccessKind::read), Ops{});
  EXPECT_EQ(finish(q, AccessKind::read), Ops{});
  EXPECT_TRUE(push(q, access(AccessKind::write, 3)));
  EXPECT_EQ(q.read_credits.load(), 0);
  EXPECT_EQ(q.reads_running(), 0);
  EXPECT_TRUE(q.writing());
  EXPECT_EQ(finish(q, AccessKind::write), Ops{});
  EXPECT_TRUE(q.idle());
}

TEST(VarQueueCredits, AWriteWaitsForTheReadsStillRunningAndTheLastGrantsIt) {
  VarQueue q;
  const Access w = access(AccessKind::write, 3), r3 = access(AccessKind::read, 4);
  ASSERT_TRUE(push(q, access(AccessKind::read, 1)));
  ASSERT_TRUE(push(q, access(AccessKind::read, 2)));
  EXPECT_EQ(finish(q, AccessKind::read), Ops{});
  EXPECT_FALSE(push(q, w));  // the second read still runs
  EXPECT_EQ(q.reads_running(), 1);
  EXPECT_FALSE(push(q, r3));  // behind the waiting write, and no credit taken
  EXPECT_EQ(q.read_credits.load(), 0);
  EXPECT_EQ(finish(q, AccessKind::read), Ops{w.op});
  EXPECT_EQ(finish(q, AccessKind::write), Ops{r3.op});
  EXPECT_EQ(q.reads_running(), 1);  // granted by a release: no credit either
  EXPECT_EQ(finish(q, AccessKind::read), Ops{});
  EXPECT_TRUE(q.idle());
}

TEST(VarQueueCredits, CommuteAndReduceAccessesGiveTheCreditsBackToo) {
  for (AccessKind k : {AccessKind::commute, AccessKind::reduce}) {
    VarQueue q;
    ASSERT_TRUE(push(q, access(AccessKind::read, 1)));
    EXPECT_EQ(finish(q, AccessKind::read), Ops{});
    EXPECT_TRUE(push(q, access(k, 2)));
    EXPECT_EQ(q.read_credits.load(), 0);
    EXPECT_EQ(q.reads_running(), 0);
    EXPECT_EQ(finish(q, k), Ops{});
    EXPECT_TRUE(q.idle());
  }
}

// One thread pushes reads (without the lock where it may) while others release them (without
// the lock while others run, else under it), then pushes a write: exactly one release
// grants it, after every read's work (TSan checks that ordering), and nothing is granted
// twice or lost.
TEST(VarQueue, ReadsGrantedWithoutTheLockDuringReleasesAllComeBeforeTheWrite) {
  constexpr int kReads = 400, kReleasers = 3, kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    VarQueue q;
    const Access r = access(AccessKind::read, 1), w = access(AccessKind::write, 2);
    std::vector<int> data(kReads, 0);
    std::atomic<int> handed{0};     // reads granted so far (the pusher publishes them)
    std::atomic<int> taken{0};      // reads claimed by a releaser
    std::atomic<int> released{0};   // reads whose work is done
    std::atomic<int> unlocked{0};   // grants made without the lock
    std::atomic<int> grants{0};
    std::atomic<int> done_before_grant{-1};
    bool write_at_once = false;
    auto grant_write = [&](const Ops& g) {
      if (g.empty()) return;
      EXPECT_EQ(g, Ops{w.op});
      done_before_grant.store(released.load());
      long sum = 0;
      for (int d : data) sum += d;
      EXPECT_EQ(sum, long{kReads} * (kReads + 1) / 2);
      grants.fetch_add(1);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kReleasers; ++t) {
      threads.emplace_back([&] {
        for (;;) {
          int i = taken.load();
          if (i == kReads) return;
          if (i >= handed.load(std::memory_order_acquire)) continue;
          if (!taken.compare_exchange_weak(i, i + 1)) continue;
          data[i] = i + 1;  // the read's work, ordered before the write's grant
          released.fetch_add(1);
          if (q.release_shared_read()) continue;
          std::lock_guard lk(q.lock);
          grant_write(release(q, AccessKind::read));
        }
      });
    }
    for (int i = 0; i < kReads; ++i) {
      if (q.grant_read_unlocked(r)) {
        unlocked.fetch_add(1, std::memory_order_relaxed);
      } else {
        q.make_room(1);
        std::lock_guard lk(q.lock);
        ASSERT_TRUE(q.grant_or_enqueue(r));  // nothing waits: a read is granted
      }
      handed.store(i + 1, std::memory_order_release);
    }
    q.make_room(1);
    {
      std::lock_guard lk(q.lock);
      write_at_once = q.grant_or_enqueue(w);
    }
    for (auto& t : threads) t.join();
    if (write_at_once) {
      EXPECT_EQ(grants.load(), 0);
    } else {
      EXPECT_EQ(grants.load(), 1);
      EXPECT_EQ(done_before_grant.load(), kReads);
    }
    EXPECT_EQ(unlocked.load(), kReads);  // nothing ever waited: every read went unlocked
    EXPECT_TRUE(q.writing());
    EXPECT_EQ(q.reads_running(), 0);
    EXPECT_EQ(release(q, AccessKind::write), Ops{});
    EXPECT_TRUE(q.idle());
  }
}

// Issue 14: a run of consecutive commute (or reduce) accesses is granted together once what
// came before is done; the next access of another kind (or another run kind) waits for the
// whole run; a run keeps growing while nothing waits behind it.
TEST(VarQueue, GrantsARunOfCommuteOrReduceAccessesTogether) {
  VarQueue q;
  Access w = access(AccessKind::write, 1), c1 = access(AccessKind::commute, 2),
      c2 = access(AccessKind::commute, 3), red = access(AccessKind::reduce, 4),
      c3 = access(AccessKind::commute, 5), r = access(AccessKind::read, 6);
  EXPECT_TRUE(enqueue(q, w));
  EXPECT_FALSE(enqueue(q, c1));
  EXPECT_FALSE(enqueue(q, c2));
  EXPECT_FALSE(enqueue(q, red));  // another run kind: after the commute run
  EXPECT_EQ(release(q, AccessKind::write), (Ops{c1.op, c2.op}));
  EXPECT_EQ(q.group_now(), 2);
  EXPECT_EQ(release(q, AccessKind::commute), Ops{});
  EXPECT_EQ(release(q, AccessKind::commute), Ops{red.op});
  EXPECT_EQ(q.group_kind, AccessKind::reduce);
  EXPECT_EQ(release(q, AccessKind::reduce), Ops{});
  // Nothing waits: a commute access is granted at once, and joins the run it starts.
  EXPECT_TRUE(enqueue(q, c3));
  EXPECT_TRUE(enqueue(q, c1));
  EXPECT_FALSE(enqueue(q, r));
  EXPECT_FALSE(enqueue(q, c2));  // behind the waiting read: a run of its own
  EXPECT_EQ(release(q, AccessKind::commute), Ops{});
  EXPECT_EQ(release(q, AccessKind::commute), Ops{r.op});
  EXPECT_EQ(release(q, AccessKind::read), Ops{c2.op});
  EXPECT_EQ(release(q, AccessKind::commute), Ops{});
  EXPECT_EQ(q.group_now(), 0);
}

// Issue 26: the waiting accesses live in a ring of words that grows as they come. Through
// wrap-arounds and growth, the queue keeps push order and each access's kind, and a long run
// of grants leaves through the heap; a replay's gate is told from an op.
TEST(VarQueue, TheRingKeepsPushOrderThroughWrapsAndGrowth) {
  VarQueue q;
  Access w0 = access(AccessKind::write, 0);
  EXPECT_TRUE(enqueue(q, w0));
  // A write, then runs of reads and writes, queued and granted in turns so that the ring's
  // first slot moves around it before it grows.
  int next = 1;
  std::vector<Access> queued;
  queued.reserve(64);
  auto push = [&](AccessKind k) {
    queued.push_back(access(k, next++));
    EXPECT_FALSE(enqueue(q, queued.back()));
  };
  push(AccessKind::read);
  push(AccessKind::read);
  push(AccessKind::write);
  EXPECT_EQ(q.capacity(), 4u);
  Granted run;
  q.release(AccessKind::write, run);
  Ops granted;
  for (Waiting w : run) {
    EXPECT_EQ(w.kind(), AccessKind::read);
    EXPECT_FALSE(w.is_gate());
    granted.push_back(w.op());
  }
  EXPECT_EQ(granted, (Ops{queued[0].op, queued[1].op}));
  for (int i = 0; i < 3; ++i) push(AccessKind::read);  // wraps around the ring of 4
  EXPECT_EQ(q.capacity(), 4u);
  for (int i = 0; i < 20; ++i) push(i % 5 == 4 ? AccessKind::write : AccessKind::read);
  EXPECT_GE(q.capacity(), 24u);
  EXPECT_EQ(q.waiting_now(), 24u);
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_EQ(release(q, AccessKind::read), Ops{queued[2].op});  // the write
  // Then the waiting accesses come out in push order: reads together, writes alone.
  std::size_t at = 3;
  AccessKind last = AccessKind::write;
  while (at < queued.size()) {
    const Ops g = release(q, last);
    ASSERT_FALSE(g.empty());
    for (Op* op : g) EXPECT_EQ(op, queued[at++].op);
    last = queued[at - 1].kind;
    if (last == AccessKind::read) {
      for (std::size_t i = 1; i < g.size(); ++i) EXPECT_TRUE(q.release_shared_read());
    }
  }
  EXPECT_EQ(q.waiting_now(), 0u);
  EXPECT_EQ(release(q, last), Ops{});
  EXPECT_TRUE(q.idle());
  // A run longer than Granted's inline room: forty reads behind a write.
  Access w1 = access(AccessKind::write, 1);
  EXPECT_TRUE(enqueue(q, w1));
  std::vector<Access> readers;
  for (int i = 0; i < 40; ++i) readers.push_back(access(AccessKind::read, 10 + i));
  for (const Access& r : readers) EXPECT_FALSE(enqueue(q, r));
  Ops expected;
  for (const Access& r : readers) expected.push_back(r.op);
  EXPECT_EQ(release(q, AccessKind::write), expected);
  EXPECT_EQ(q.reads_running(), 40);
  for (int i = 0; i < 39; ++i) EXPECT_TRUE(q.release_shared_read());
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_TRUE(q.idle());
  // A gate's word names the gate, not an op.
  alignas(Waiting::kFreeBits) Access gate = access(AccessKind::write, 0);
  gate.op = nullptr;
  gate.gate = true;
  const Waiting g(gate);
  EXPECT_TRUE(g.is_gate());
  EXPECT_EQ(g.gate(), &gate);
  EXPECT_EQ(g.kind(), AccessKind::write);
}

// A release takes at most Granted::kCapacity accesses out of the ring at once (no heap: it
// runs as an op finishes, where a failed allocation could be neither reported nor undone).
// A longer run comes in parts, and the releasing thread's token keeps the rest of the run at
// the head: the granted reads finishing meanwhile neither grant it nor leave the var idle.
TEST(VarQueue, ARunLongerThanGrantedHoldsComesInPartsBehindTheReleasersToken) {
  VarQueue q;
  EXPECT_TRUE(enqueue(q, access(AccessKind::write, 0)));
  constexpr int kReads = 150;
  static_assert(kReads > 2 * Granted::kCapacity);
  for (int i = 0; i < kReads; ++i) EXPECT_FALSE(enqueue(q, access(AccessKind::read, 1 + i)));
  const Access w2 = access(AccessKind::write, 200);
  EXPECT_FALSE(enqueue(q, w2));
  Granted run;
  q.release(AccessKind::write, run);
  ASSERT_EQ(run.size(), Granted::kCapacity);
  EXPECT_TRUE(run.continues());
  EXPECT_EQ(q.reads_running(), static_cast<int>(Granted::kCapacity) + 1);  // with the token
  int next = 1;
  for (Waiting w : run) EXPECT_EQ(w.op(), fake_op(next++));
  // The first part finishes before the releaser comes back: every release is a shared one.
  for (std::size_t i = 0; i < Granted::kCapacity; ++i) EXPECT_TRUE(q.release_shared_read());
  EXPECT_EQ(q.reads_running(), 1);
  EXPECT_FALSE(q.idle());
  // A read pushed meanwhile waits at the tail, behind the write.
  const Access late = access(AccessKind::read, 300);
  EXPECT_FALSE(enqueue(q, late));
  q.continue_run(run);
  ASSERT_EQ(run.size(), Granted::kCapacity);
  EXPECT_TRUE(run.continues());
  for (Waiting w : run) EXPECT_EQ(w.op(), fake_op(next++));
  q.continue_run(run);
  ASSERT_EQ(run.size(), static_cast<std::size_t>(kReads) - 2 * Granted::kCapacity);
  EXPECT_FALSE(run.continues());
  for (Waiting w : run) EXPECT_EQ(w.op(), fake_op(next++));
  EXPECT_EQ(next, kReads + 1);
  // The token went with the last part: the granted reads alone are counted.
  EXPECT_EQ(q.reads_running(), kReads - static_cast<int>(Granted::kCapacity));
  for (int i = 0; i < kReads - static_cast<int>(Granted::kCapacity) - 1; ++i) {
    EXPECT_TRUE(q.release_shared_read());
  }
  EXPECT_EQ(release(q, AccessKind::read), Ops{w2.op});
  EXPECT_EQ(release(q, AccessKind::write), Ops{late.op});
  EXPECT_EQ(release(q, AccessKind::read), Ops{});
  EXPECT_TRUE(q.idle());
}

// The same for a run of commute accesses: the group's count carries the token.
TEST(VarQueue, ALongCommuteRunComesInPartsAndItsGroupEndsWithTheLastAccess) {
  VarQueue q;
  EXPECT_TRUE(enqueue(q, access(AccessKind::write, 0)));
  constexpr int kRun = 100;
  for (int i = 0; i < kRun; ++i) EXPECT_FALSE(enqueue(q, access(AccessKind::commute, 1 + i)));
  const Access w2 = access(AccessKind::write, 200);
  EXPECT_FALSE(enqueue(q, w2));
  const Ops all = release(q, AccessKind::write);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kRun));
  for (int i = 0; i < kRun; ++i) EXPECT_EQ(all[i], fake_op(1 + i));
  EXPECT_EQ(q.group_now(), kRun);
  for (int i = 0; i < kRun - 1; ++i) EXPECT_EQ(release(q, AccessKind::commute), Ops{});
  EXPECT_EQ(release(q, AccessKind::commute), Ops{w2.op});
  EXPECT_EQ(release(q, AccessKind::write), Ops{});
  EXPECT_TRUE(q.idle());
}

#ifndef NDEBUG
TEST(VarQueueDeathTest, ReleasingAReadThatWasNotGrantedAborts) {
  EXPECT_DEATH(
      {
        VarQueue q;
        release(q, AccessKind::read);
      },
      "engine invariant broken.*no running read");
}

TEST(VarQueueDeathTest, ReleasingAWriteThatWasNotGrantedAborts) {
  EXPECT_DEATH(
      {
        VarQueue q;
        Access r = access(AccessKind::read);
        enqueue(q, r);
        release(q, AccessKind::write);
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
