// A var's queue of pending accesses (the threaded engine's half of VarState). Granted
// accesses are counted (running reads, or one active write); waiting ones form a FIFO linked
// through Access::next. Reads of one version are granted together, a write alone, in push
// order. Every member is called under `lock`.
#pragma once

#include <cstdint>

#include "invariant.h"
#include "spin_lock.h"

namespace depengine::detail {

class Op;
struct VarState;

enum class AccessKind : std::uint8_t { read, write, read_write };

constexpr bool reads(AccessKind k) noexcept { return k != AccessKind::write; }
constexpr bool writes(AccessKind k) noexcept { return k != AccessKind::read; }

// One op's access to one var; also the node of that var's queue of waiting accesses.
struct Access {
  VarState* var = nullptr;
  Op* op = nullptr;
  Access* next = nullptr;
  AccessKind kind = AccessKind::read;
  // Version of the var this access sees: for a read, the writes pushed before it; for a
  // write, the version it creates. Set at push time.
  std::uint64_t version = 0;
};

struct VarQueue {
  SpinLock lock;
  Access* head = nullptr;  // first waiting (not yet granted) access
  Access* tail = nullptr;
  int running_reads = 0;
  bool write_active = false;

  // Grants `a` at once if nothing conflicts (true), else queues it (false).
  bool grant_or_enqueue(Access& a) noexcept;
  // Releases a finished access of `kind`; returns the accesses it grants, chained through
  // `next`.
  Access* release(AccessKind kind) noexcept;

 private:
  Access* pop() noexcept;
  // Granted reads and an active write exclude each other; a waiting head exists only
  // behind something granted; the FIFO's ends agree.
  void check() const noexcept {
    DEPENGINE_INVARIANT(running_reads >= 0, "a var's running reads went negative");
    DEPENGINE_INVARIANT(!(write_active && running_reads > 0),
                        "a var has a write granted beside running reads");
    DEPENGINE_INVARIANT((head == nullptr) == (tail == nullptr), "a var queue's ends disagree");
    DEPENGINE_INVARIANT(head == nullptr || write_active || running_reads > 0,
                        "a var queue waits behind nothing granted");
  }
};

inline bool VarQueue::grant_or_enqueue(Access& a) noexcept {
  check();
  if (!head && !write_active) {
    if (!writes(a.kind)) {
      ++running_reads;
      return true;
    }
    if (running_reads == 0) {
      write_active = true;
      return true;
    }
  }
  a.next = nullptr;
  if (tail) {
    tail->next = &a;
  } else {
    head = &a;
  }
  tail = &a;
  return false;
}

inline Access* VarQueue::pop() noexcept {
  Access* a = head;
  head = a->next;
  if (!head) tail = nullptr;
  return a;
}

inline Access* VarQueue::release(AccessKind kind) noexcept {
  check();
  Access* granted = nullptr;
  Access** last = &granted;
  auto grant = [&](Access* a) {
    *last = a;
    last = &a->next;
  };
  if (!writes(kind)) {
    DEPENGINE_INVARIANT(running_reads > 0, "a read released on a var with no running read");
    if (--running_reads == 0 && head) {  // the head can only be a write
      DEPENGINE_INVARIANT(writes(head->kind), "a read waits behind running reads");
      write_active = true;
      grant(pop());
    }
  } else {
    DEPENGINE_INVARIANT(write_active, "a write released on a var with no active write");
    write_active = false;
    if (head && writes(head->kind)) {
      write_active = true;
      grant(pop());
    } else {
      while (head && !writes(head->kind)) {
        ++running_reads;
        grant(pop());
      }
    }
  }
  *last = nullptr;
  check();
  return granted;
}

}  // namespace depengine::detail
