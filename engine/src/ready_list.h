// The ops that one release (or one push) finds ready, gathered before the engine dispatches
// them, and the count-down that finds them: an op is ready once every access it waits for
// has been granted (`Op::wait` reaches zero).
#pragma once

#include <atomic>
#include <cstddef>

#include "invariant.h"
#include "op.h"

namespace depengine::detail {

// Up to kCapacity ready ops, without a heap allocation: a release runs on a worker as an op
// finishes, where an allocation that failed could neither be reported nor undone (a fan's
// write makes a thousand reads ready at once). When the list is full, its owner's `flush`
// takes the ops gathered so far (it counts them active and dispatches them), and the list
// starts again empty.
class ReadyList {
 public:
  static constexpr std::size_t kCapacity = 32;
  using Flush = void (*)(void* owner, Op* const* ops, std::size_t n);

  ReadyList(Flush flush, void* owner) noexcept : flush_(flush), owner_(owner) {}
  ReadyList(const ReadyList&) = delete;
  ReadyList& operator=(const ReadyList&) = delete;

  void push(Op* op) {
    if (n_ == kCapacity) {
      n_ = 0;
      flush_(owner_, ops_, kCapacity);
    }
    ops_[n_++] = op;
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i) f(ops_[i]);
  }
  Op* const* data() const noexcept { return ops_; }
  std::size_t size() const noexcept { return n_; }

 private:
  Flush flush_;
  void* owner_;
  Op* ops_[kCapacity];
  std::size_t n_ = 0;
};

// One grant (or predecessor) `op` waited for has come: the op is ready when it was the last.
inline void count_down(Op* op, ReadyList& ready) {
  const int waited = op->wait.fetch_sub(1, std::memory_order_acq_rel);
  DEPENGINE_INVARIANT(waited >= 1, "an op's count of missing grants went negative");
  if (waited == 1) ready.push(op);
}

}  // namespace depengine::detail
