// A parked thread's wake-up: one thread sleeps on it, until a deadline or for good, until
// another thread wakes it. The scheduler keeps one per drain task (scheduler.h, Parker).
//
// A mutex and a condition variable rather than std::binary_semaphore. libstdc++'s timed
// acquire (GCC 12, bits/atomic_timed_wait.h) does not sleep on a futex until its deadline:
// it polls, sleeping half the time waited so far between looks. A drain task parked for
// 1.5 ms thus saw the submit that claimed it up to 0.75 ms late, with a core idle and ops
// queued, and woke about six times in its 2 ms park (notifier_test.cc counts the sleeps).
// A condition variable's timed wait sleeps on the futex until the wake-up or the deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace depengine::detail {

class Wakeup {
 public:
  // Wakes the thread that waits, or keeps the wake-up for the next wait. Thread-safe; the
  // Wakeup must outlive the call even if the woken thread has gone meanwhile.
  void wake() {
    {
      std::lock_guard lk(mu_);
      woken_ = true;
    }
    cv_.notify_one();
  }

  // Sleeps until woken or `deadline`; true, and the wake-up taken, when woken.
  bool wait_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_until(lk, deadline, [&] { return woken_; })) return false;
    woken_ = false;
    return true;
  }

  // Sleeps until woken, and takes the wake-up.
  void wait() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return woken_; });
    woken_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;  // under mu_
};

}  // namespace depengine::detail
