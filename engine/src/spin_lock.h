// A test-and-test-and-set lock for the per-var critical sections, which hold a handful of
// pointer updates. It yields after a short spin so that a preempted holder on an
// oversubscribed machine (2 cores, 3+ threads) gets the core back.
#pragma once

#include <atomic>
#include <thread>

namespace depengine::detail {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace depengine::detail
