// The scheduler's queue of ready ops of rank 0: a growable ring (and, only when memory for
// a larger ring cannot be had, a stack of the ops that did not fit). Not thread-safe: the
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
#include <new>

#include "op.h"

namespace depengine::detail {

class ReadyFifo {
 public:
  ReadyFifo() : slots_(std::make_unique_for_overwrite<Op*[]>(kInitial)), mask_(kInitial - 1) {}
  ReadyFifo(const ReadyFifo&) = delete;
  ReadyFifo& operator=(const ReadyFifo&) = delete;

  void push(Op* op) noexcept {
    if (overflow_ == nullptr && (tail_ - head_ <= mask_ || room_for(1))) {
      slots_[tail_++ & mask_] = op;
    } else {
      push_overflow(op);
    }
  }

  // Queues `n` ops in order.
  void push(Op* const* ops, std::size_t n) noexcept {
    if (overflow_ == nullptr && room_for(n)) {
      for (std::size_t i = 0; i < n; ++i) slots_[tail_++ & mask_] = ops[i];
    } else {
      for (std::size_t i = 0; i < n; ++i) push(ops[i]);
    }
  }

  // The oldest op, or null when empty; `next` is set to the op queued behind it, or null
  // (a hint: another thread may take it first, once the caller lets go of the lock).
  Op* try_pop(Op*& next) noexcept {
    Op* op;
    if (head_ != tail_) {
      op = slots_[head_++ & mask_];
      next = head_ != tail_ ? slots_[head_ & mask_] : overflow_;
      return op;
    }
    if ((op = overflow_) == nullptr) return nullptr;
    overflow_ = op->next_parked;
    next = overflow_;
    return op;
  }

  // Moves up to `max` of the oldest ops, in order, into `out`; returns how many.
  std::size_t try_pop(Op** out, std::size_t max) noexcept {
    std::size_t n = std::min(max, tail_ - head_);
    for (std::size_t i = 0; i < n; ++i) out[i] = slots_[head_++ & mask_];
    for (; n < max && overflow_ != nullptr; ++n) {
      out[n] = overflow_;
      overflow_ = overflow_->next_parked;
    }
    return n;
  }

  // The ops in the ring, and one for a list of ops that did not fit (a hint for sharing out
  // work: the scheduler counts every queued op besides).
  std::size_t size() const noexcept { return tail_ - head_ + (overflow_ != nullptr ? 1 : 0); }

 private:
  static constexpr std::size_t kInitial = 1024;

  // Room in the ring for `n` more: true, doubling it (keeping the order) as needed, or false
  // when the memory for that cannot be had. Rare: the ring only grows while ops are queued
  // faster than the workers take them.
  bool room_for(std::size_t n) noexcept {
    while (tail_ - head_ + n > mask_ + 1) {
      const std::size_t queued = tail_ - head_;
      // Not zeroed (a burst of pushes grows the ring to a megabyte): every slot is written
      // before it is read.
      std::unique_ptr<Op*[]> bigger(new (std::nothrow) Op*[2 * (mask_ + 1)]);
      if (!bigger) return false;
      for (std::size_t i = 0; i < queued; ++i) bigger[i] = slots_[(head_ + i) & mask_];
      slots_ = std::move(bigger);
      mask_ = 2 * (mask_ + 1) - 1;
      head_ = 0;
      tail_ = queued;
    }
    return true;
  }

  // The ring is full and cannot grow (a submit runs as an op finishes, where a failed
  // allocation could be neither reported nor undone): the op waits in a stack linked through
  // the op itself (Op::next_parked: an op in this queue is parked on no commute var), taken
  // after everything in the ring; until the stack is empty, every op queued goes onto it.
  // Last in, first out among themselves: ready ops may run in any order, and one pointer
  // keeps this queue, its lock and its counts on one cache line (scheduler.h).
  void push_overflow(Op* op) noexcept {
    op->next_parked = overflow_;
    overflow_ = op;
  }

  std::unique_ptr<Op*[]> slots_;
  std::size_t mask_;
  std::size_t head_ = 0;  // next to pop
  std::size_t tail_ = 0;  // next to fill
  Op* overflow_ = nullptr;  // ops that did not fit (push_overflow)
};

}  // namespace depengine::detail
