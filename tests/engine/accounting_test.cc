// The threaded engine's accounting (engine/src/accounting.h) on its own: back-pressure places
// (reserve/retire) under many threads, the wake-ups its mutators owe to waiters (a lost one
// leaves a waiter asleep: every wait here is bounded, so a lost wake-up fails instead of
// hanging), the wait_all epochs, and the shutdown stage releasing waiting pushers.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "accounting.h"
#include "depengine/error.h"

namespace depengine::detail {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kDone = 0 - Accounting::kOneActive;

// Sleeps on the accounting's notifier until `pred` holds; true when it did and the wait
// ended well before its 10 s deadline. Every condition here becomes true within
// milliseconds, so a wait that runs to the deadline means a lost wake-up (the condition may
// hold by then, which is why the time is checked).
template <class Pred>
bool within_10s(Accounting& a, Pred&& pred) {
  const auto start = std::chrono::steady_clock::now();
  a.block_until(pred, 10s);
  return pred() && std::chrono::steady_clock::now() - start < 5s;
}

TEST(Accounting, ReserveHoldsTheBoundUnderManyThreads) {
  constexpr std::size_t kBound = 3;
  constexpr int kThreads = 8, kEach = 2000;
  Accounting a(kBound);
  std::atomic<int> held{0}, most{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        a.reserve([] { return std::string("push"); });
        const int h = held.fetch_add(1) + 1;
        int m = most.load();
        while (h > m && !most.compare_exchange_weak(m, h)) {
        }
        if (a.in_flight() > kBound) refused.fetch_add(1);
        held.fetch_sub(1);
        a.retire(nullptr, kDone);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), static_cast<int>(kBound));
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(a.in_flight(), 0u);
  EXPECT_EQ(a.active(), 0u);
  EXPECT_TRUE(a.idle());
}

TEST(Accounting, ReserveGoesThroughWhenNothingIsActive) {
  // Ops in flight that wait for a Completion (in flight, not active) hold no place: the
  // pusher may be the thread that completes them.
  Accounting a(1);
  a.raise(Accounting::kOne);  // one op in flight, inactive
  a.reserve([] { return std::string("push"); });
  EXPECT_EQ(a.in_flight(), 2u);
  EXPECT_EQ(a.active(), 1u);
}

TEST(Accounting, ARetireUnderTheBoundWakesAWaitingPusher) {
  Accounting a(1);
  a.reserve([] { return std::string("push"); });
  std::atomic<bool> through{false};
  std::thread pusher([&] {
    a.reserve([] { return std::string("push"); });
    through.store(true, std::memory_order_seq_cst);
    a.notify();
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(through.load());
  a.retire(nullptr, kDone);
  EXPECT_TRUE(within_10s(a, [&] { return through.load(std::memory_order_seq_cst); }));
  pusher.join();
  a.retire(nullptr, kDone);
  EXPECT_TRUE(a.idle());
}

TEST(Accounting, ActivityReachingZeroWakesAWaitingPusher) {
  // The bound is reached by an op that goes from active to waiting for its Completion.
  Accounting a(1);
  a.reserve([] { return std::string("push"); });
  std::atomic<bool> through{false};
  std::thread pusher([&] {
    a.reserve([] { return std::string("push"); });
    through.store(true, std::memory_order_seq_cst);
    a.notify();
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(through.load());
  a.retire(nullptr, 0 - Accounting::kActive);  // still in flight, no longer active
  EXPECT_TRUE(within_10s(a, [&] { return through.load(std::memory_order_seq_cst); }));
  pusher.join();
  EXPECT_EQ(a.in_flight(), 2u);
}

TEST(Accounting, TheShutdownStageRefusesWaitingPushers) {
  Accounting a(1);
  a.reserve([] { return std::string("push"); });
  constexpr int kPushers = 4;
  std::atomic<int> refused{0};
  std::vector<std::thread> pushers;
  for (int i = 0; i < kPushers; ++i) {
    pushers.emplace_back([&] {
      try {
        a.reserve([] { return std::string("push 'x'"); });
      } catch (const Error& e) {
        if (std::string(e.what()) == "push 'x': the engine is shutting down") refused.fetch_add(1);
      }
      a.notify();
    });
  }
  // Every pusher waits (inside the wait it counts as a caller, which shutdown waits for).
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(a.no_callers());
  a.set_stage(Stage::draining);
  EXPECT_TRUE(within_10s(a, [&] { return refused.load() == kPushers; }));
  for (auto& t : pushers) t.join();
  EXPECT_TRUE(a.no_callers());
  EXPECT_FALSE(a.idle());  // the first place is still held
  a.retire(nullptr, kDone);
  EXPECT_TRUE(a.idle());
}

TEST(Accounting, ShutdownWaitsForInFlightBusyAndCallers) {
  Accounting a(0);
  constexpr int kThreads = 6, kEach = 5000;
  for (int i = 0; i < kThreads * kEach; ++i) a.raise(Accounting::kOneActive);
  std::atomic<bool> stopped{false};
  std::thread shutdown([&] {
    EXPECT_TRUE(within_10s(a, [&] { return a.idle(); }));
    stopped.store(true);
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&] {
      auto busy = a.busy();  // shutdown also waits for this thread to leave
      for (int i = 0; i < kEach; ++i) a.retire(nullptr, kDone);
    });
  }
  for (auto& t : workers) t.join();
  shutdown.join();
  EXPECT_TRUE(stopped.load());
  EXPECT_EQ(a.in_flight(), 0u);
  a.quiesce();
}

TEST(Accounting, AnEpochDrainingWakesItsWaitAll) {
  Accounting a(0);
  constexpr int kThreads = 4, kEach = 5000;
  Epoch* first = a.current_epoch();
  Accounting::add_to_epoch(first, kThreads * kEach);
  a.raise(kThreads * kEach * Accounting::kOneActive);
  const std::vector<Epoch*> open = a.watch_open_epochs();
  ASSERT_EQ(open.size(), 1u);
  EXPECT_NE(a.current_epoch(), first);  // later pushes count apart
  // An op of the new epoch stays in flight: wait_all waits for the epoch, not for idleness.
  Accounting::add_to_epoch(a.current_epoch(), 1);
  a.raise(Accounting::kOneActive);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) a.retire(first, kDone);
    });
  }
  EXPECT_TRUE(within_10s(a, [&] { return Accounting::drained(open); }));
  for (auto& t : workers) t.join();
  a.unwatch(open);
  EXPECT_EQ(a.in_flight(), 1u);
  EXPECT_TRUE(a.watch_open_epochs().size() == 1);  // the second epoch, still pending
}

TEST(Accounting, ManyEpochsOutliveTheCounterLine) {
  // More epochs alive at once than the counter line has slots: the rest count apart.
  Accounting a(0);
  std::vector<std::vector<Epoch*>> watched;
  std::vector<Epoch*> epochs;
  for (int i = 0; i < 12; ++i) {
    Epoch* e = a.current_epoch();
    Accounting::add_to_epoch(e, 1);
    a.raise(Accounting::kOneActive);
    epochs.push_back(e);
    watched.push_back(a.watch_open_epochs());
  }
  for (Epoch* e : epochs) a.retire(e, kDone);
  for (auto& w : watched) {
    EXPECT_TRUE(Accounting::drained(w));
    a.unwatch(w);
  }
  EXPECT_TRUE(a.idle());
  EXPECT_TRUE(a.watch_open_epochs().empty());
}

TEST(Accounting, LastActiveWatchWakesAtOne) {
  Accounting a(0);
  a.raise(3 * Accounting::kOneActive);
  a.watch_for_last_active();
  std::thread waiter([&] { EXPECT_TRUE(within_10s(a, [&] { return a.active() <= 1; })); });
  std::this_thread::sleep_for(10ms);
  a.retire(nullptr, kDone);
  a.retire(nullptr, kDone);
  waiter.join();
}

// A pool thread's held retirements (HeldRetires): counted as in flight until applied, and
// the flush that applies them wakes the wait_all of their epoch.
TEST(HeldRetires, CountUntilFlushedAndTheFlushWakesTheEpoch) {
  Accounting a(0);
  Epoch* e = a.current_epoch();
  Accounting::add_to_epoch(e, 3);
  a.raise(3 * Accounting::kOneActive);
  const std::vector<Epoch*> open = a.watch_open_epochs();
  std::atomic<int> step{0};
  std::thread worker([&] {
    for (int i = 0; i < 3; ++i) HeldRetires::here().hold(a, e, kDone);
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    HeldRetires::here().flush();
  });
  while (step.load() != 1) std::this_thread::yield();
  EXPECT_EQ(a.in_flight(), 3u);
  EXPECT_EQ(a.active(), 3u);
  EXPECT_FALSE(Accounting::drained(open));
  step = 2;
  EXPECT_TRUE(within_10s(a, [&] { return Accounting::drained(open); }));
  worker.join();
  EXPECT_TRUE(a.idle());
  a.unwatch(open);
}

// What is held for one epoch or engine is applied before the thread holds (or runs an op)
// for another, and a thread never holds more than kMaxHeld.
TEST(HeldRetires, AnotherEpochOrEngineOrAFullHoldAppliesThem) {
  Accounting a(0), b(0);
  Epoch* first = a.current_epoch();
  Accounting::add_to_epoch(first, 2);
  a.raise(2 * Accounting::kOneActive);
  const std::vector<Epoch*> open = a.watch_open_epochs();
  Epoch* second = a.current_epoch();
  ASSERT_NE(first, second);
  Accounting::add_to_epoch(second, 1);
  a.raise(Accounting::kOneActive);
  HeldRetires& held = HeldRetires::here();
  held.hold(a, first, kDone);
  held.flush_unless(a, first);  // the same epoch: still held
  EXPECT_EQ(held.held(), 1u);
  EXPECT_EQ(a.in_flight(), 3u);
  held.hold(a, second, kDone);  // another epoch: the first's op is applied
  EXPECT_EQ(a.in_flight(), 2u);
  held.flush_unless(a, first);  // about to run an op of the first epoch
  EXPECT_EQ(held.held(), 0u);
  EXPECT_EQ(a.in_flight(), 1u);
  held.hold(a, first, kDone);
  EXPECT_FALSE(Accounting::drained(open));
  // Another engine's accounting.
  const std::size_t many = HeldRetires::kMaxHeld;
  Accounting::add_to_epoch(b.current_epoch(), many);
  b.raise(many * Accounting::kOneActive);
  held.flush_unless(b, b.current_epoch());
  EXPECT_EQ(a.in_flight(), 0u);
  EXPECT_TRUE(Accounting::drained(open));
  for (std::size_t i = 1; i < many; ++i) held.hold(b, b.current_epoch(), kDone);
  EXPECT_EQ(b.in_flight(), many);
  held.hold(b, b.current_epoch(), kDone);  // the kMaxHeld-th
  EXPECT_EQ(held.held(), 0u);
  EXPECT_TRUE(b.idle());
  a.unwatch(open);
}

}  // namespace
}  // namespace depengine::detail
