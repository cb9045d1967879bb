// The threaded engine's accounting: what its waits (wait_all, wait_to_read, back-pressure,
// the two shutdown paths) wait for, and the one place where it changes.
//
// - One word counts the ops in flight (low half: pushed and not finished, plus device work
//   not yet complete) and the active ones (high half: ready, running, parked on device work
//   or with device work in flight). An op waiting in a var queue, or an async op whose body
//   returned and whose Completion has not been called, is in flight but not active.
// - wait_all epochs: the ops pushed between two wait_all calls, with the ops they push while
//   they run. Each epoch counts its ops until they finish; the first few epochs alive at once
//   count on the word's cache line.
// - Back-pressure: reserve() takes one place among max_inflight.
// - The shutdown stage, and the threads that shutdown waits for besides the ops (callers in
//   a blocking call, async bodies and Completions: CountScope).
//
// Every mutator applies the notifier rule itself (notifier.h): after a change that can make
// a waiter's condition true it notifies, and only then. Increases of the counts wake nobody
// (no wait waits for a count to grow); a decrease notifies when the ops in flight reach zero
// (shutdown), an epoch drains (wait_all), the count drops to back-pressure's resume point or
// activity reaches zero (back-pressure), activity drops to one while watch_for_last_active()
// is on (shutdown from inside an op); a stage change always notifies. The counts are
// sequentially consistent atomics, as the protocol needs.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "depengine/error.h"
#include "engine_core.h"
#include "invariant.h"
#include "notifier.h"

namespace depengine::detail {

// One wait_all epoch. `pending` counts its ops until they finish; it points into the
// accounting's counter line for the first few epochs alive at once, else at `own`.
struct Epoch {
  std::atomic<std::size_t>* pending = &own;
  int watchers = 0;  // wait_all calls waiting for it (under the engine's push lock)
  int slot = -1;     // its slot in the counter line, or -1
  std::atomic<std::size_t> own{0};
};

class Accounting {
 public:
  static constexpr std::uint64_t kActive = std::uint64_t{1} << 32;
  // One op in flight, or one op in flight and active.
  static constexpr std::uint64_t kOne = 1;
  static constexpr std::uint64_t kOneActive = 1 + kActive;
  static constexpr std::size_t inflight_of(std::uint64_t s) noexcept { return s & (kActive - 1); }
  static constexpr std::size_t active_of(std::uint64_t s) noexcept { return s >> 32; }

  // `max_inflight`: the back-pressure bound, 0 for none. Opens the first epoch.
  explicit Accounting(std::size_t max_inflight)
      : bound_(max_inflight), resume_at_(resume_point(max_inflight)) {
    open_epoch();
  }

  // Where a push blocked at `bound` resumes: once the ops in flight have fallen by an eighth
  // of the bound (at least one; StarPU's limits on submitted tasks have the same two marks).
  // Woken as soon as one op retired, a frontend at a large bound was woken, pushed one op and
  // blocked again for almost every push: a wake-up and a context switch per op.
  static constexpr std::size_t resume_point(std::size_t bound) noexcept {
    return bound == 0 ? 0 : bound - std::max<std::size_t>(1, bound / 8);
  }
  Accounting(const Accounting&) = delete;
  Accounting& operator=(const Accounting&) = delete;

  std::uint64_t state() const noexcept { return counters_.state.load(); }
  std::size_t in_flight() const noexcept { return inflight_of(state()); }
  std::size_t active() const noexcept { return active_of(state()); }
  std::size_t bound() const noexcept { return bound_; }

  // ---- The counts.

  // Back-pressure: takes one place among the bound (one op in flight and active, the
  // activity provisional: a concurrent push never sees the reserving op's engine idle). At
  // the bound, with some op active, it waits until the ops in flight fall to the resume
  // point (resume_point) and then tries again. When no op is active, every op in
  // flight waits for a Completion that only a thread outside the engine can call — possibly
  // this one — so the place is granted instead of deadlocking. Places are taken by
  // compare-and-swap, so the bound holds with many pushers. Throws Error (call_name() + ":
  // the engine is shutting down") when the stage leaves running while it waits.
  template <class CallName>
  void reserve(CallName&& call_name) {
    std::uint64_t s = state();
    for (;;) {
      if (inflight_of(s) < bound_ || active_of(s) == 0) {
        if (counters_.state.compare_exchange_weak(s, s + kOneActive)) return;
        continue;
      }
      CountScope caller(*this, callers_);
      block_until([&] {
        s = state();
        return inflight_of(s) <= resume_at_ || active_of(s) == 0 || stage() != Stage::running;
      });
      if (stage() != Stage::running) {
        throw Error(call_name() + ": the engine is shutting down");
      }
    }
  }

  // Adds `up` (ops in flight and activity, as in state()) and returns the word after it. No
  // waiter waits for a count to grow, so this notifies nobody.
  std::uint64_t raise(std::uint64_t up) noexcept {
    return counters_.state.fetch_add(up) + up;
  }

  // Applies `delta` (added modulo 2^64, so counts can leave and newly ready ops become active
  // in one step) after `ops` ops of `epoch` (if not null) have finished, and notifies as the
  // rule above says. Returns the word after it.
  std::uint64_t retire(Epoch* epoch, std::uint64_t delta, std::size_t ops = 1) {
    // The state word first: a wait_all that sees its epoch drain then finds the ops gone
    // from in_flight() too (Engine::pending).
    const std::uint64_t before = counters_.state.fetch_add(delta);
    const std::uint64_t after = before + delta;
    std::size_t epoch_left = 1;
    if (epoch) {
      const std::size_t pending = epoch->pending->fetch_sub(ops);
      DEPENGINE_INVARIANT(pending >= ops, "an epoch's pending count went negative");
      epoch_left = pending - ops;
    }
    DEPENGINE_INVARIANT(inflight_of(after) < (kActive >> 1) && active_of(after) < (kActive >> 1),
                        "the count of ops in flight or active went negative");
    if (notify_needed(before, after, epoch_left)) notifier_.notify_all();
    return after;
  }

  // Counts `n` more ops (or async bodies, or device work) in `epoch`.
  static void add_to_epoch(Epoch* epoch, std::size_t n) noexcept {
    epoch->pending->fetch_add(n, std::memory_order_relaxed);
  }

  // ---- Epochs (call under the engine's push lock).

  // Where pushes from outside the engine's ops count now.
  Epoch* current_epoch() const noexcept { return current_; }
  // wait_all: the epochs that still have ops, each now watched; a new current epoch is
  // opened for later pushes when the current one is among them.
  std::vector<Epoch*> watch_open_epochs() {
    std::vector<Epoch*> open;
    for (const auto& e : epochs_) {
      if (e->pending->load(std::memory_order_acquire) == 0) continue;
      ++e->watchers;
      open.push_back(e.get());
    }
    if (!open.empty() && open.back() == current_) open_epoch();
    return open;
  }
  // Ends the watch of watch_open_epochs(), and forgets the epochs nobody needs any more.
  void unwatch(const std::vector<Epoch*>& open) {
    for (Epoch* e : open) --e->watchers;
    std::erase_if(epochs_, [&](const std::unique_ptr<Epoch>& e) {
      const bool done = e.get() != current_ && e->watchers == 0 &&
                        e->pending->load(std::memory_order_acquire) == 0;
      if (done && e->slot >= 0) free_slots_ |= 1u << e->slot;
      return done;
    });
  }
  // True when every epoch of `open` has drained.
  static bool drained(const std::vector<Epoch*>& open) noexcept {
    for (Epoch* e : open) {
      if (e->pending->load(std::memory_order_seq_cst) != 0) return false;
    }
    return true;
  }

  // ---- The shutdown stage.

  Stage stage() const noexcept { return stage_.load(); }
  // Changes the stage (under the engine's push lock) and wakes every waiter: pushers held by
  // back-pressure see it and leave.
  void set_stage(Stage s) {
    stage_.store(s);
    notifier_.notify_all();
  }
  // From now on, activity dropping to one or less also notifies (shutdown from inside an op
  // waits for it).
  void watch_for_last_active() {
    last_active_watch_.store(true);
    notifier_.notify_all();
  }

  // Counts a thread for shutdown to wait for: one inside a blocking call (callers), or an
  // async body still running or a thread inside a Completion (busy).
  class CountScope {
   public:
    CountScope(Accounting& a, std::atomic<int>& count) : a_(a), count_(count) {
      count_.fetch_add(1);
    }
    // Decremented and notified under exit_mu_, which shutdown takes last (quiesce()): it
    // cannot see the count reach zero and delete the engine while this thread still touches
    // it. (Only async ops, wait_to_read's signal and blocking calls pay for the lock.)
    ~CountScope() {
      std::lock_guard lk(a_.exit_mu_);
      if (count_.fetch_sub(1) == 1) a_.notifier_.notify_all();
    }
    CountScope(const CountScope&) = delete;
    CountScope& operator=(const CountScope&) = delete;

   private:
    Accounting& a_;
    std::atomic<int>& count_;
  };
  CountScope caller() { return CountScope(*this, callers_); }
  CountScope busy() { return CountScope(*this, busy_); }

  // Nothing in flight, no async body or Completion under way, no caller inside.
  bool idle() const noexcept {
    return in_flight() == 0 && busy_.load() == 0 && callers_.load() == 0;
  }
  bool no_callers() const noexcept { return callers_.load() == 0; }
  // The last step of shutdown: waits out a thread whose CountScope is still notifying.
  void quiesce() { std::lock_guard lk(exit_mu_); }

  // ---- Waiting.

  // Sleeps until `pred` holds. `pred` may read the counts above, or a condition whose
  // change is followed by notify().
  template <class Pred>
  void block_until(Pred&& pred) {
    notifier_.wait(pred);
  }
  // As block_until, for `timeout` at most.
  template <class Pred, class Duration>
  void block_until(Pred&& pred, Duration timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      const Notifier::Key key = notifier_.prepare_wait();
      if (pred()) {
        notifier_.cancel_wait();
        return;
      }
      if (!notifier_.commit_wait_until(key, deadline)) return;
    }
  }
  // For a condition outside the accounting (wait_to_read's flag): call after making it true.
  void notify() { notifier_.notify_all(); }

 private:
  // Notifying on every op would cost a fence per op and, with a waiter, a wake-up and a
  // context switch, so only the transitions a waiter can be waiting for notify.
  bool notify_needed(std::uint64_t before, std::uint64_t after, std::size_t epoch_left) const {
    return inflight_of(after) == 0 || epoch_left == 0 ||
           (bound_ != 0 &&
            ((inflight_of(before) > resume_at_ && inflight_of(after) <= resume_at_) ||
             (active_of(before) > 0 && active_of(after) == 0))) ||
           (last_active_watch_.load() && active_of(after) <= 1);
  }

  // A new current epoch, in a free slot of the counter line if any.
  void open_epoch() {
    auto e = std::make_unique<Epoch>();
    if (free_slots_ != 0) {
      e->slot = std::countr_zero(free_slots_);
      free_slots_ &= ~(1u << e->slot);
      e->pending = &counters_.epoch_pending[e->slot];
    }
    epochs_.push_back(std::move(e));
    current_ = epochs_.back().get();
  }

  // The counts every push and every finish update, on one cache line: the state word and
  // the pending counts of up to seven epochs (in practice the current one, and the one a
  // wait_all is draining). An op's push and its finish then each move one line between
  // cores instead of two.
  static constexpr int kEpochSlots = 7;
  struct alignas(64) Counters {
    std::atomic<std::uint64_t> state{0};
    std::atomic<std::size_t> epoch_pending[kEpochSlots] = {};
  } counters_;
  const std::size_t bound_;
  const std::size_t resume_at_;  // resume_point(bound_)
  std::uint32_t free_slots_ = (1u << kEpochSlots) - 1;  // under the push lock
  std::vector<std::unique_ptr<Epoch>> epochs_;           // under the push lock; the open ones
  Epoch* current_ = nullptr;
  std::atomic<Stage> stage_{Stage::running};
  std::atomic<bool> last_active_watch_{false};
  std::atomic<int> busy_{0};     // async bodies running, threads inside a Completion
  std::atomic<int> callers_{0};  // threads inside wait_all, wait_to_read, back-pressure
  Notifier notifier_;            // wait_all, wait_to_read, back-pressure, shutdown
  std::mutex exit_mu_;           // see CountScope
};

// The retirements a CPU pool thread holds back (ThreadedCore::finish): every finish would
// otherwise write the counter line that every push writes too, and with the frontend
// pushing and the workers finishing, that line would cross between cores twice per op.
// Held, they are applied together: when the thread finds the ready queues empty (before it
// lingers, parks or leaves), before it runs an op of another engine or epoch, after
// kMaxHeld ops, and before the thread blocks in a shutdown. A finish that leaves no other op
// ready or queued is not held, and takes what was held with it: the counts are exact again
// when the engine runs out of work, before the waiters that finish woke look at them.
//
// Why that is enough: what is held only raises the published counts (an op whose finish
// made more ops active than it retires is not held), so a waiter can only wait longer, never
// return early; and every wait a held retirement delays is let go in time. A wait_all waits
// for an epoch, so it also waits for the op the thread is running, unless that op is of
// another epoch, and then what was held went before it ran. The same holds for shutdown's
// wait for nothing in flight. Back-pressure (a bound) could be kept waiting by a running
// op's neighbours, so a bounded engine holds nothing back. A shutdown from inside an op
// waits for activity to fall to one: its thread lets its own go first, the others when they
// run out of ops.
class HeldRetires {
 public:
  static constexpr std::size_t kMaxHeld = 64;

  // The calling thread's.
  static HeldRetires& here() noexcept {
    [[gnu::tls_model("initial-exec")]] thread_local HeldRetires held;
    return held;
  }

  // Holds the retirement of one op of `epoch` (a counted op), `delta` as for retire(). The
  // caller has checked that `delta` makes nobody newly active on balance.
  void hold(Accounting& a, Epoch* epoch, std::uint64_t delta) {
    if (ops_ != 0 && (owner_ != &a || epoch_ != epoch)) flush();
    owner_ = &a;
    epoch_ = epoch;
    delta_ += delta;
    if (++ops_ == kMaxHeld) flush();
  }
  // Applies what is held before the thread runs an op of `epoch` in `a`, when it was held
  // for another engine or epoch.
  void flush_unless(const Accounting& a, const Epoch* epoch) {
    if (ops_ != 0 && (owner_ != &a || epoch_ != epoch)) [[unlikely]] flush();
  }
  // Applies what is held.
  void flush() {
    if (ops_ == 0) return;
    const std::size_t ops = std::exchange(ops_, 0);
    owner_->retire(epoch_, std::exchange(delta_, 0), ops);
  }
  std::size_t held() const noexcept { return ops_; }

 private:
  Accounting* owner_ = nullptr;
  Epoch* epoch_ = nullptr;
  std::size_t ops_ = 0;
  std::uint64_t delta_ = 0;
};

}  // namespace depengine::detail
