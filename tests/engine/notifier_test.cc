// The wake-up protocol (engine/src/notifier.h), the serial worker built on it
// (engine/src/serial_worker.h), and a parked drain task's wake-up (engine/src/wakeup.h). A
// lost wake-up would leave a thread asleep: the waits here carry a 10 s deadline, so a lost
// wake-up fails the test instead of hanging it.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "notifier.h"
#include "serial_worker.h"
#include "wakeup.h"

namespace depengine::detail {
namespace {

using namespace std::chrono_literals;

// Waits with the protocol until `ready()`, for 10 s at most; false if a wake-up was lost.
template <class Pred>
bool wait_at_most_10s(Notifier& n, Pred&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ready()) {
    const Notifier::Key key = n.prepare_wait();
    if (ready()) {
      n.cancel_wait();
      return true;
    }
    if (!n.commit_wait_until(key, deadline)) return ready();
  }
  return true;
}

// Two threads hand a turn back and forth, each sleeping until it is its turn: every hand-off
// needs the other thread's notify to reach it.
TEST(Notifier, PingPongLosesNoWakeUp) {
  Notifier n;
  std::atomic<int> turn{0};
  constexpr int kRounds = 20000;
  std::atomic<bool> lost{false};
  std::thread other([&] {
    for (int i = 0; i < kRounds && !lost; ++i) {
      if (!wait_at_most_10s(n, [&] { return turn.load() == 1; })) lost = true;
      turn.store(0);
      n.notify_all();
    }
  });
  for (int i = 0; i < kRounds && !lost; ++i) {
    turn.store(1);
    n.notify_one();
    if (!wait_at_most_10s(n, [&] { return turn.load() == 0; })) lost = true;
  }
  other.join();
  EXPECT_FALSE(lost.load());
  EXPECT_EQ(n.waiters(), 0u);
}

// Many waiters, one notify_all per step of a counter each of them waits past.
TEST(Notifier, NotifyAllWakesEveryWaiter) {
  Notifier n;
  std::atomic<int> step{0};
  std::atomic<int> failures{0};
  constexpr int kSteps = 2000;
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&] {
      for (int s = 1; s <= kSteps; ++s) {
        if (!wait_at_most_10s(n, [&] { return step.load() >= s; })) {
          failures.fetch_add(1);
          return;
        }
      }
    });
  }
  for (int s = 1; s <= kSteps; ++s) {
    step.store(s);
    n.notify_all();
  }
  for (auto& t : waiters) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Notifier, CommitUntilAPastDeadlineReturnsFalseWithoutANotify) {
  Notifier n;
  const Notifier::Key key = n.prepare_wait();
  EXPECT_FALSE(n.commit_wait_until(key, std::chrono::steady_clock::now()));
  EXPECT_EQ(n.waiters(), 0u);
  const Notifier::Key key2 = n.prepare_wait();
  n.notify_one();
  EXPECT_TRUE(n.commit_wait_until(key2, std::chrono::steady_clock::now() + 10s));
}

TEST(SerialWorker, HandlesItemsInPushOrderOnItsThread) {
  std::vector<int> seen;
  std::thread::id on;
  {
    SerialWorker<int> w([&](int& x) {
      seen.push_back(x);
      on = std::this_thread::get_id();
    });
    for (int i = 0; i < 1000; ++i) w.push(i);
    w.wait_idle();
    ASSERT_EQ(seen.size(), 1000u);
    for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
    EXPECT_NE(on, std::this_thread::get_id());
    for (int i = 1000; i < 2000; ++i) w.push(i);
  }  // the destructor handles what is still queued
  EXPECT_EQ(seen.size(), 2000u);
}

TEST(SerialWorker, RunsItsStartHookFirst) {
  std::atomic<bool> started{false};
  std::atomic<bool> started_before_item{false};
  SerialWorker<int> w([&](int&) { started_before_item = started.load(); },
                      [&] { started = true; });
  w.push(1);
  w.wait_idle();
  EXPECT_TRUE(started_before_item.load());
}

// The calling thread's voluntary context switches so far: one per sleep it went into.
long sleeps_of_this_thread() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// A wait with a deadline sleeps until the wake-up, not in slices: libstdc++'s timed
// semaphore acquire, which the scheduler's parked tasks used before, slept half the time
// waited so far between looks (about twenty sleeps in 300 ms), and so saw a wake-up up to
// half that time late. Counted, not timed: one sleep, or a few for spurious wake-ups.
TEST(Wakeup, SleepsOnceUntilWoken) {
  Wakeup w;
  std::atomic<long> sleeps{-1};
  std::atomic<bool> woken{false};
  std::thread waiter([&] {
    const long before = sleeps_of_this_thread();
    woken = w.wait_until(std::chrono::steady_clock::now() + 10s);
    sleeps = sleeps_of_this_thread() - before;
  });
  std::this_thread::sleep_for(300ms);
  w.wake();
  waiter.join();
  EXPECT_TRUE(woken.load());
  EXPECT_LE(sleeps.load(), 3) << "the timed wait polled instead of sleeping until woken";
}

TEST(Wakeup, GivesUpAtTheDeadline) {
  Wakeup w;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(w.wait_until(start + 20ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
}

// A wake-up that comes before the wait is kept for it, once (as the scheduler's claim of a
// parked task that has not gone to sleep yet).
TEST(Wakeup, KeepsAWakeUpThatCameFirst) {
  Wakeup w;
  w.wake();
  EXPECT_TRUE(w.wait_until(std::chrono::steady_clock::now() + 10s));
  EXPECT_FALSE(w.wait_until(std::chrono::steady_clock::now() + 1ms));
  w.wake();
  w.wait();
}

}  // namespace
}  // namespace depengine::detail
