// The scheduler's queue of ready ops of rank 0: a growable ring. Not thread-safe: the
// scheduler holds its own spin lock around every call (scheduler.h, Scheduler::Normal), so
// that one acquisition also covers its count of queued ops and of lingering drain tasks.
//
// Most ops go through this queue, pushed by the frontend's thread and popped by a worker,
// so its cost is mostly cache-line transfers between two cores. A push or a pop is one
// lock-prefixed instruction on one line (the lock, the ends, the capacity and the counts
// share it) and a store or load of an 8-byte slot; oneTBB's concurrent_queue, used before,
// touched a tail counter, a micro-queue and its page on every push, each a line that the
// popping core had just written.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>

namespace depengine::detail {

class Op;

class ReadyFifo {
 public:
  ReadyFifo() : slots_(std::make_unique_for_overwrite<Op*[]>(kInitial)), mask_(kInitial - 1) {}
  ReadyFifo(const ReadyFifo&) = delete;
  ReadyFifo& operator=(const ReadyFifo&) = delete;

  void push(Op* op) {
    if (tail_ - head_ > mask_) grow();
    slots_[tail_++ & mask_] = op;
  }

  // Queues `n` ops in order.
  void push(Op* const* ops, std::size_t n) {
    while (tail_ - head_ + n > mask_ + 1) grow();
    for (std::size_t i = 0; i < n; ++i) slots_[tail_++ & mask_] = ops[i];
  }

  // The oldest op, or null when empty; `next` is set to the op queued behind it, or null
  // (a hint: another thread may take it first, once the caller lets go of the lock).
  Op* try_pop(Op*& next) noexcept {
    if (head_ == tail_) return nullptr;
    Op* op = slots_[head_++ & mask_];
    next = head_ == tail_ ? nullptr : slots_[head_ & mask_];
    return op;
  }

  // Moves up to `max` of the oldest ops, in order, into `out`; returns how many.
  std::size_t try_pop(Op** out, std::size_t max) noexcept {
    const std::size_t n = std::min(max, tail_ - head_);
    for (std::size_t i = 0; i < n; ++i) out[i] = slots_[head_++ & mask_];
    return n;
  }

  std::size_t size() const noexcept { return tail_ - head_; }

 private:
  static constexpr std::size_t kInitial = 1024;

  // Doubles the ring, keeping the order. Rare: the ring only grows while ops are queued
  // faster than the workers take them.
  void grow() {
    const std::size_t n = tail_ - head_;
    // Not zeroed (a burst of pushes grows the ring to a megabyte): every slot is written
    // before it is read.
    auto bigger = std::make_unique_for_overwrite<Op*[]>(2 * (mask_ + 1));
    for (std::size_t i = 0; i < n; ++i) bigger[i] = slots_[(head_ + i) & mask_];
    slots_ = std::move(bigger);
    mask_ = 2 * (mask_ + 1) - 1;
    head_ = 0;
    tail_ = n;
  }

  std::unique_ptr<Op*[]> slots_;
  std::size_t mask_;
  std::size_t head_ = 0;  // next to pop
  std::size_t tail_ = 0;  // next to fill
};

}  // namespace depengine::detail
