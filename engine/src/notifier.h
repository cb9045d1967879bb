// The one wake-up protocol of the engine: an event count (Dmitry Vyukov's eventcount, the
// shape of Eigen's EventCount and Taskflow's Notifier). A thread that may sleep announces
// itself, checks its condition again, and only then sleeps; a thread that makes a
// condition true notifies after the change. The announcement and the notifier's look at
// the waiter count are ordered crosswise, so either the waiter's second check sees the
// change or the notifier sees the waiter: a wake-up is never lost, and a notify with nobody
// waiting costs one load.
//
// The ordering needs no fence when the condition is either a sequentially consistent atomic
// (written and read seq_cst: with the waiter's announcement and the notifier's load, all
// four accesses are in the single total order of seq_cst operations), or guarded by a mutex
// that the notifier holds while it notifies (the mutex orders the two sides). Every
// condition in the engine is one of the two.
//
//   for (;;) {                                   // waiter
//     if (ready()) break;
//     const auto key = n.prepare_wait();
//     if (ready()) { n.cancel_wait(); break; }
//     n.commit_wait(key);
//   }
//   make_ready(); n.notify_all();                // notifier
//
// Every member is thread-safe. A notify may wake a waiter whose condition is still false
// (it checks again); it never misses one that prepared before the change.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace depengine::detail {

class Notifier {
 public:
  using Key = std::uint32_t;

  // Announces the calling thread as a waiter; returns the key to commit with.
  Key prepare_wait() noexcept {
    return generation_of(state_.fetch_add(1, std::memory_order_seq_cst));
  }
  // Withdraws the announcement: the condition held after all.
  void cancel_wait() noexcept { state_.fetch_sub(1, std::memory_order_relaxed); }
  // Sleeps until a notify that came after prepare_wait (at once if one already did).
  void commit_wait(Key key) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return generation_of(state_.load(std::memory_order_relaxed)) != key; });
    }
    state_.fetch_sub(1, std::memory_order_seq_cst);
  }
  // As commit_wait, but gives up at `deadline`: false when no notify came by then.
  bool commit_wait_until(Key key, std::chrono::steady_clock::time_point deadline) {
    bool notified;
    {
      std::unique_lock lk(mu_);
      notified = cv_.wait_until(
          lk, deadline, [&] { return generation_of(state_.load(std::memory_order_relaxed)) != key; });
    }
    // Sequentially consistent: after a timeout the caller checks its condition once more,
    // and a notifier that still counted it as a waiter woke no one else.
    state_.fetch_sub(1, std::memory_order_seq_cst);
    return notified;
  }

  // Wakes every waiter that prepared before the call. Call after making the condition true.
  void notify_all() {
    if (bump()) cv_.notify_all();
  }
  // Wakes at least one such waiter; false (and nothing done) when there was none.
  bool notify_one() {
    if (!bump()) return false;
    cv_.notify_one();
    return true;
  }

  // Threads between prepare_wait and the end of their commit or cancel.
  std::uint32_t waiters() const noexcept {
    return static_cast<std::uint32_t>(state_.load(std::memory_order_relaxed));
  }

  // Waits until `ready()` holds, for a condition guarded by the mutex that `lk` holds (as a
  // condition variable's wait): checks it under the lock, and announces itself before it
  // lets the lock go. The notifier changes the condition under the same mutex.
  void wait_locked(std::unique_lock<std::mutex>& lk, const auto& ready) {
    while (!ready()) {
      const Key key = prepare_wait();
      lk.unlock();
      commit_wait(key);
      lk.lock();
    }
  }

  // Waits with the protocol until `ready()` holds (no deadline: commit_wait_until has one).
  template <class Pred>
  void wait(Pred&& ready) {
    while (!ready()) {
      const Key key = prepare_wait();
      if (ready()) {
        cancel_wait();
        return;
      }
      commit_wait(key);
    }
  }

 private:
  // The waiter count (low half) and the generation (high half: the count of notifies that
  // found a waiter) share one word: a waiter's key is read in the same step that counts it,
  // so a notify either comes after the key (and changes the generation the waiter sleeps on)
  // or before it (and the waiter's check, ordered after the notify's read-modify-write, sees
  // the condition). (Not to be confused with the threaded engine's wait_all epochs.)
  static constexpr std::uint64_t kGeneration = std::uint64_t{1} << 32;
  static constexpr Key generation_of(std::uint64_t s) noexcept {
    return static_cast<Key>(s >> 32);
  }

  // Changes the generation under the mutex, so that a waiter between its check and its sleep
  // cannot miss it; false (and nothing done) when nobody waits.
  bool bump() {
    if (static_cast<std::uint32_t>(state_.load(std::memory_order_seq_cst)) == 0) return false;
    std::lock_guard lk(mu_);
    state_.fetch_add(kGeneration, std::memory_order_acq_rel);
    return true;
  }

  std::atomic<std::uint64_t> state_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace depengine::detail
