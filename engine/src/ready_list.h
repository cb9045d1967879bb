// The ops that one release (or one push) finds ready, gathered before the engine dispatches
// them, and the count-down that finds them: an op is ready once every access it waits for
// has been granted (`Op::wait` reaches zero).
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "invariant.h"
#include "op.h"

namespace depengine::detail {

// A few ready ops without a heap allocation.
class ReadyList {
 public:
  void push(Op* op) {
    if (n_ < kInline) {
      inline_[n_++] = op;
    } else {
      more_.push_back(op);
    }
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i) f(inline_[i]);
    for (Op* op : more_) f(op);
  }

 private:
  static constexpr std::size_t kInline = 8;
  Op* inline_[kInline];
  std::size_t n_ = 0;
  std::vector<Op*> more_;
};

// One grant (or predecessor) `op` waited for has come: the op is ready when it was the last.
inline void count_down(Op* op, ReadyList& ready) {
  const int waited = op->wait.fetch_sub(1, std::memory_order_acq_rel);
  DEPENGINE_INVARIANT(waited >= 1, "an op's count of missing grants went negative");
  if (waited == 1) ready.push(op);
}

}  // namespace depengine::detail
