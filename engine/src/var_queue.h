// A var's queue of pending accesses (the threaded engine's half of VarState). Granted
// accesses are counted (running reads, one active write, or a run of commute or reduce
// accesses); waiting ones wait in a ring of words, each naming the op (or replay gate) and
// the kind of access, in push order. Reads of one version are granted together, a write
// alone, a run of consecutive commute (or reduce) accesses together. Commute accesses
// granted together still exclude each other when they run: commute.h takes `commute_held`
// when the op starts. Every member is called under `lock`, unless it says otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "invariant.h"
#include "spin_lock.h"

namespace depengine::detail {

class Op;
struct VarState;

enum class AccessKind : std::uint8_t { read, write, read_write, commute, reduce };

// Uses the var's value (device work waits for its data).
constexpr bool reads(AccessKind k) noexcept {
  return k == AccessKind::read || k == AccessKind::read_write || k == AccessKind::commute;
}
// Inherits the var's failure (the op is skipped). Commute and reduce accesses do not: the
// ops of a run may go in any order, so one must not see another's failure; instead each
// passes its failure to the var, where the earliest origin stays (merges_failure), and the
// run's outcome does not depend on the order.
constexpr bool inherits_failure(AccessKind k) noexcept {
  return k == AccessKind::read || k == AccessKind::read_write;
}
// Ordered as a write and makes a new version.
constexpr bool writes(AccessKind k) noexcept { return k != AccessKind::read; }
// Granted together with its neighbours of the same kind.
constexpr bool grouped(AccessKind k) noexcept {
  return k == AccessKind::commute || k == AccessKind::reduce;
}
// Stores the op's outcome in the var: a failure, or success clearing it.
constexpr bool sets_failure(AccessKind k) noexcept {
  return k == AccessKind::write || k == AccessKind::read_write;
}
// Adds the op's failure to the var's, the earliest origin staying; success changes nothing.
// (A reduce access's failure reaches its var through its reduction's combining op.)
constexpr bool merges_failure(AccessKind k) noexcept { return k == AccessKind::commute; }

// One op's access to one var. Trivially constructible, so that an op's inline array of them
// costs nothing until filled; build one with make_access.
struct Access {
  VarState* var;
  Op* op;
  AccessKind kind;
  // The compound access of a replayed segment (replay_run.h, ReplayGate): `op` is
  // null and its grant releases the segment's first ops on the var.
  bool gate;
  // Version of the var this access sees: for a read, the writes pushed before it; for a
  // write, the version it creates. Set at push time.
  std::uint64_t version;
};
static_assert(std::is_trivially_default_constructible_v<Access>);

// `op`'s access of `kind` to `var`: not a gate, its version not yet stamped.
constexpr Access make_access(VarState* var, Op* op, AccessKind kind) noexcept {
  return Access{var, op, kind, false, 0};
}

// A waiting access as its var's queue keeps it: one word, the op's address (or a replay
// gate's) with the kind in its low bits. Granting reads the word only: a run of grants walks
// the ring, whose words lie side by side, rather than the accesses, which lie in their ops'
// records, each most likely on a line of its own (alignof(Op) and alignof(ReplayGate) leave
// the four bits free: op.h, replay_run.h).
class Waiting {
 public:
  static constexpr std::uintptr_t kKindBits = 7, kGateBit = 8, kFreeBits = 16;
  explicit Waiting(const Access& a) noexcept
      : bits_((a.gate ? reinterpret_cast<std::uintptr_t>(&a) | kGateBit
                      : reinterpret_cast<std::uintptr_t>(a.op)) |
              static_cast<std::uintptr_t>(a.kind)) {}
  Waiting() = default;  // uninitialized, as a slot of a ring
  AccessKind kind() const noexcept { return static_cast<AccessKind>(bits_ & kKindBits); }
  bool is_gate() const noexcept { return (bits_ & kGateBit) != 0; }
  // The op whose access this is (not a gate).
  Op* op() const noexcept { return reinterpret_cast<Op*>(bits_ & ~(kFreeBits - 1)); }
  // The gate's access (a gate).
  const Access* gate() const noexcept {
    return reinterpret_cast<const Access*>(bits_ & ~(kFreeBits - 1));
  }

 private:
  std::uintptr_t bits_;
};
static_assert(std::is_trivially_default_constructible_v<Waiting>);

// The accesses one release grants: taken out of the ring under the var's lock, granted after
// it (so that the misses on the granted ops' records are not taken with the lock held, which
// the pushing thread may be waiting for). Room for kCapacity, without a heap allocation: a
// release runs on a worker as an op finishes, where a failed allocation could be neither
// reported nor undone. A longer run (a fan's readers) is granted kCapacity at a time: the
// releasing thread holds one more grant of the run's kind (a token) until it has taken the
// whole run, so that no other release grants from the queue's head or finds the var idle
// meanwhile (VarQueue::continue_run).
class Granted {
 public:
  static constexpr std::uint32_t kCapacity = 64;
  Granted() = default;
  Granted(const Granted&) = delete;
  Granted& operator=(const Granted&) = delete;
  const Waiting* begin() const noexcept { return data_; }
  const Waiting* end() const noexcept { return data_ + n_; }
  std::size_t size() const noexcept { return n_; }
  // More of the run waits at the queue's head, for this holder's continue_run.
  bool continues() const noexcept { return continues_; }

 private:
  friend struct VarQueue;
  void clear() noexcept {
    n_ = 0;
    continues_ = false;
  }
  Waiting data_[kCapacity];
  std::uint32_t n_ = 0;
  bool continues_ = false;
};

// Two lines' worth, split by who writes them (var_state.h lays out the rest of the var around
// them). The first part is the pushing thread's: it queues accesses and grants them at push
// (with the flags and version VarState keeps beside it), and a release writes it only when it
// grants. The second part, the counts of granted reads and commute/reduce accesses, is what
// a finishing reader writes: a widely read var (a fan's hub) takes a release from every one
// of its readers while the pushing thread queues the next ones, and on one line each would
// take it from the other. `parked` (commute only) and the outgrown rings fill the rest.
struct VarQueue {
  SpinLock lock;
  // A write is granted. Atomic, with group_running, for grant_read_unlocked, which reads both
  // without `lock`: relaxed under it, and the store that ends a write or a run is a release,
  // so that a read granted without the lock comes after the writes to the var's data.
  std::atomic<bool> write_active{false};
  AccessKind group_kind = AccessKind::commute;
  // Commute exclusion (commute.h): an op of the granted run holds the var while it runs;
  // ops that found it held wait in `parked` (linked through Op::next_parked), off the
  // workers, and are dispatched again when it is let go.
  bool commute_held = false;
  // Every handle to the var is gone (var_release, op.cc): the release that leaves the queue
  // idle frees the var.
  bool orphaned = false;
  // The var was deleted with an op-less callback still to run (DeleteOptions::
  // frees_memory_only; VarState::pending_delete): the release that leaves the queue idle
  // runs it. Set only on a queue that is not idle.
  bool delete_pending = false;
  // log2 of the ring's capacity. Changed only by make_room, which pushing threads call under
  // the engine's push lock: they may read it without `lock`.
  std::uint8_t ring_log2 = 1;
  // Reads the pushing thread holds already counted in running_reads, to grant without
  // touching the second line (grant_read_unlocked): a widely read var's readers are then
  // granted on the pushing thread's line, and its count of running reads is written by the
  // finishing readers alone, which also never see it reach one (the last read's release,
  // the one that takes the lock) while credits are held. Taken with a read granted at push,
  // when nothing waits and no write or run is granted; given back (return_read_credits)
  // before the pushing thread queues or grants anything else on the var under its lock, and
  // when the var's last handle goes or it is deleted without an op, so that it can go idle.
  // Changed only by pushing threads under the engine's push lock, or once no handle is left
  // (no push can come then); atomic (relaxed) for delete_without_op's first look, a hint.
  std::atomic<std::uint8_t> read_credits{0};
  // The waiting (not yet granted) accesses: `waiting` of them from ring[first] on, modulo
  // the capacity. Changed under `lock`; atomic (relaxed, or release for `first`: plain
  // loads and stores on x86) for the readers without it: a pusher's make_room reads
  // `waiting` (which only it raises, so it can only have fallen since), and a running op
  // reads the first waiting access as a hint of what its release will grant (first_hint).
  using Slot = std::atomic<Waiting>;  // zero until written
  static_assert(Slot::is_always_lock_free);
  std::atomic<Slot*> ring{first_ring};
  std::atomic<std::uint32_t> first{0};
  std::atomic<std::uint32_t> waiting{0};
  // The ring a var starts with: most vars never have more than two accesses waiting at once
  // (most never have one: an array written once and read after), and they get no heap ring.
  Slot first_ring[2];
  Op* parked = nullptr;

  // The finishing readers' part: on a line of its own (var_state.h checks the layout).
  // Granted reads not yet released. Atomic because a read that is not the last of its
  // version is released without the lock (release_shared_read), never taking the count to
  // zero, and a push grants a read without it while nothing waits and nothing else is
  // granted (grant_read_unlocked); otherwise whether reads are running, which everything
  // else here decides on, changes only under the lock.
  std::atomic<int> running_reads{0};
  std::atomic<int> group_running{0};  // granted accesses of the current commute or reduce run
  // Rings the queue outgrew, kept until the var goes: a running op may still be reading a
  // slot of one (first_hint). They add up to less than the ring in use.
  struct Outgrown {
    std::unique_ptr<Slot[]> ring;
    std::unique_ptr<Outgrown> older;
  };
  std::unique_ptr<Outgrown> outgrown;

  VarQueue() = default;
  ~VarQueue() {
    if (Slot* r = ring.load(std::memory_order_relaxed); r != first_ring) delete[] r;
  }
  VarQueue(const VarQueue&) = delete;
  VarQueue& operator=(const VarQueue&) = delete;

  // No access granted, waiting or parked on the var.
  bool idle() const noexcept { return idle_with_reads(0); }
  // Idle once the read credits are given back: without `lock`, a hint.
  bool idle_but_for_credits() const noexcept {
    return idle_with_reads(read_credits.load(std::memory_order_relaxed));
  }
  // Reads granted at push per credit taken (grant_read_unlocked): the second line is then
  // written by the pushing thread once per kReadCredits + 1 reads.
  static constexpr std::uint8_t kReadCredits = 64;
  // Under `lock`, by a pushing thread (under the engine's push lock) or the release of the
  // var's last handle: gives back the read credits (read_credits), which may leave no read
  // running. An acquire of every earlier read's release, as a last read's release is: a
  // write this push then grants comes after them.
  void return_read_credits() noexcept {
    const std::uint8_t c = read_credits.load(std::memory_order_relaxed);
    if (c == 0) return;
    read_credits.store(0, std::memory_order_relaxed);
    running_reads.fetch_sub(c, std::memory_order_acq_rel);
  }
  std::uint32_t waiting_now() const noexcept { return waiting.load(std::memory_order_relaxed); }
  bool writing() const noexcept { return write_active.load(std::memory_order_relaxed); }
  int group_now() const noexcept { return group_running.load(std::memory_order_relaxed); }
  std::uint32_t capacity() const noexcept { return std::uint32_t{1} << ring_log2; }
  // Without `lock`, by a thread that holds an access to the var (which keeps it alive): the
  // first waiting access, or one that was waiting a moment ago, or a slot never written
  // (zero: a null op). Its op may have run and gone since: a hint to prefetch only.
  // `first` is read before `ring`, and stored with release after it, so the ring read is the
  // one `first` indexed, or a later, larger one: the slot is within it. A new ring is
  // published with release, after its slots were zeroed and filled.
  Waiting first_hint() const noexcept {
    const std::uint32_t at = first.load(std::memory_order_acquire);
    return ring.load(std::memory_order_acquire)[at].load(std::memory_order_relaxed);
  }
  // Granted reads now. A pushing thread may raise it without `lock` (grant_read_unlocked,
  // only while no access waits and no write or run is granted); otherwise it changes under
  // `lock`, and without it may only fall, and not to zero.
  int reads_running() const noexcept { return running_reads.load(std::memory_order_relaxed); }
  // Releases a granted read without `lock` when other reads of its version still run (true):
  // such a release grants nothing and cannot leave the queue idle. False when it may be the
  // last: the caller then takes the lock and calls release(AccessKind::read). Nothing of the
  // var may be touched after a true return (its last release, on another thread, may free
  // it).
  bool release_shared_read() noexcept {
    // A compare-and-swap from a guess rather than a load first: it takes the line for
    // writing at once, and a failure gives the count; a load would bring the line shared,
    // and the swap then fetch it again.
    int r = 2;
    while (!running_reads.compare_exchange_weak(r, r - 1, std::memory_order_acq_rel,
                                                std::memory_order_relaxed)) {
      if (r <= 1) return false;
    }
    return true;
  }
  // Without `lock`, by a pushing thread under the engine's push lock: makes sure the ring
  // has room for `n` more waiting accesses (a larger ring, the waiting ones moved over).
  // Only such threads queue accesses, and releases only free room, so the room is there
  // when the push queues them. Throws std::bad_alloc, before the queue changes.
  void make_room(std::uint32_t n) {
    if (capacity() - waiting_now() < n) [[unlikely]] grow(n);
  }
  // Without `lock`, by a pushing thread under the engine's push lock: grants the read `a`
  // when nothing waits and no write or commute/reduce run is granted (true), else leaves
  // the queue as it was (false: the caller takes the lock and calls grant_or_enqueue). Only
  // pushing threads, one at a time, queue accesses or grant them at push, and a release
  // grants only what waits, so with nothing waiting no other thread can grant a write or a
  // run until this push is over: what the loads below find free stays free. Releases
  // meanwhile only lower the count of running reads (a last read's release, which takes it
  // to zero under the lock, finds nothing waiting to grant), so the increment is right from
  // any count. Saves the frontend the lock's acquire on a var that the workers' releases
  // take too: inputs read by every op. The count is raised by kReadCredits more, held as
  // credits for the next reads pushed (read_credits).
  bool grant_read_unlocked(const Access& a) noexcept {
    if (a.kind != AccessKind::read || a.gate) return false;
    // A credit held: the reads it stands for keep any write or run from being granted, and
    // only this thread queues accesses, which it does only after giving the credits back,
    // so nothing waits: the read is granted as the one that took them was.
    if (const std::uint8_t c = read_credits.load(std::memory_order_relaxed); c != 0) {
      read_credits.store(c - 1, std::memory_order_relaxed);
      return true;
    }
    // Acquire: a grant_run that took the last waiting access stored `waiting` with release
    // after it marked the write or run it granted, so `waiting` at zero shows that mark.
    if (waiting.load(std::memory_order_acquire) != 0) return false;
    // Acquire: pairs with the release that ended the last write or run (see write_active).
    if (write_active.load(std::memory_order_acquire) ||
        group_running.load(std::memory_order_acquire) != 0) {
      return false;
    }
    running_reads.fetch_add(1 + kReadCredits, std::memory_order_relaxed);
    read_credits.store(kReadCredits, std::memory_order_relaxed);
    return true;
  }
  // By a pushing thread, under the engine's push lock: gives back the read credits, then
  // grants `a` at once if nothing conflicts (true), else queues it (false). make_room(1)
  // came first.
  bool grant_or_enqueue(const Access& a) noexcept;
  // Releases a finished access of `kind`, and puts the accesses it grants in `out`, in queue
  // order: the first kCapacity of a longer run, the rest to be taken with continue_run.
  void release(AccessKind kind, Granted& out) noexcept;
  // By the holder of `out`, a run that continues (out.continues()): grants the next part of
  // the run into `out`, and when that is the last, gives back the run's token.
  void continue_run(Granted& out) noexcept;

 private:
  // No access granted, waiting or parked on the var but `reads` running reads.
  bool idle_with_reads(int reads) const noexcept {
    return !writing() && reads_running() == reads && group_now() == 0 && waiting_now() == 0 &&
           !commute_held && !parked;
  }
  void grow(std::uint32_t n);
  Slot& slot(std::uint32_t i) const noexcept {
    return ring.load(std::memory_order_relaxed)[i & (capacity() - 1)];
  }
  // Copies the first waiting access, and those after it that would be granted with it, into
  // `out`, up to its capacity (`out.continues_` when the run is longer); changes nothing.
  void peek_first_run(Granted& out) const noexcept;
  // Takes what peek_first_run copied out of the ring, and counts it as granted (with nothing
  // else granted), with the token of a run that continues.
  void grant_run(const Granted& run) noexcept;
  // Counts a grant of the run's kind: `n` of them (which may be negative).
  void add_grants(AccessKind k, int n) noexcept {
    if (grouped(k)) {
      group_running.store(group_now() + n, std::memory_order_relaxed);
    } else {
      DEPENGINE_INVARIANT(!writes(k), "a write was granted as a run");
      running_reads.fetch_add(n, std::memory_order_relaxed);
    }
  }
  // Moves the `n` first waiting accesses out of the ring.
  void dequeue(std::uint32_t n) noexcept {
    first.store((first.load(std::memory_order_relaxed) + n) & (capacity() - 1),
                std::memory_order_release);
    // Release: grant_read_unlocked, finding no access waiting, then sees what was granted.
    waiting.store(waiting_now() - n, std::memory_order_release);
  }
  // Granted reads, an active write and a granted run exclude each other; an access waits
  // only behind something granted.
  void check() const noexcept {
    DEPENGINE_INVARIANT(reads_running() >= 0 && group_now() >= 0,
                        "a var's count of granted accesses went negative");
    DEPENGINE_INVARIANT((writing() ? 1 : 0) + (reads_running() > 0 ? 1 : 0) +
                                (group_now() > 0 ? 1 : 0) <= 1,
                        "a var has accesses of different kinds granted together");
    DEPENGINE_INVARIANT(waiting_now() <= capacity(), "a var queue holds more than its ring");
    DEPENGINE_INVARIANT(
        waiting_now() == 0 || writing() || reads_running() > 0 || group_now() > 0,
        "a var queue waits behind nothing granted");
  }
};

inline void VarQueue::grow(std::uint32_t n) {
  std::uint8_t log2 = ring_log2;
  // The room is asked for by the thread that alone raises `waiting`: it can only fall.
  while ((std::uint64_t{1} << log2) < std::uint64_t{waiting_now()} + n) {
    if (log2 == 31) throw std::bad_alloc();  // 2^31 accesses waiting on one var
    ++log2;
  }
  std::unique_ptr<Slot[]> bigger(new Slot[std::size_t{1} << log2]);
  auto retired = std::make_unique<Outgrown>();
  std::lock_guard lk(lock);
  const std::uint32_t w = waiting_now(), at = first.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < w; ++i) {
    bigger[i].store(slot(at + i).load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  Slot* const old = ring.load(std::memory_order_relaxed);
  ring.store(bigger.release(), std::memory_order_release);
  first.store(0, std::memory_order_release);
  ring_log2 = log2;
  if (old != first_ring) {
    retired->ring.reset(old);
    retired->older = std::move(outgrown);
    outgrown = std::move(retired);
  }
}

inline bool VarQueue::grant_or_enqueue(const Access& a) noexcept {
  return_read_credits();
  check();
  const std::uint32_t w = waiting_now();
  if (w == 0 && !writing()) {
    if (grouped(a.kind)) {
      if (reads_running() == 0 && (group_now() == 0 || group_kind == a.kind)) {
        group_kind = a.kind;
        group_running.store(group_now() + 1, std::memory_order_relaxed);
        return true;
      }
    } else if (group_now() == 0) {
      if (!writes(a.kind)) {
        running_reads.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (reads_running() == 0) {
        write_active.store(true, std::memory_order_relaxed);
        return true;
      }
    }
  }
  DEPENGINE_INVARIANT(w < capacity(), "an access was queued without room made for it");
  slot(first.load(std::memory_order_relaxed) + w).store(Waiting(a), std::memory_order_relaxed);
  waiting.store(w + 1, std::memory_order_relaxed);
  return false;
}

inline void VarQueue::peek_first_run(Granted& out) const noexcept {
  const std::uint32_t w = waiting_now();
  out.clear();
  if (w == 0) return;
  const std::uint32_t at = first.load(std::memory_order_relaxed);
  auto word = [&](std::uint32_t i) { return slot(at + i).load(std::memory_order_relaxed); };
  const AccessKind k = word(0).kind();
  // A write alone; reads, or commute (or reduce) accesses, while the kind stays the same.
  std::uint32_t n = 1;
  if (!writes(k) || grouped(k)) {
    while (n < w && n < Granted::kCapacity && word(n).kind() == k) ++n;
    out.continues_ = n < w && word(n).kind() == k;
  }
  for (std::uint32_t i = 0; i < n; ++i) out.data_[i] = word(i);
  out.n_ = n;
}

inline void VarQueue::grant_run(const Granted& run) noexcept {
  const auto n = static_cast<std::uint32_t>(run.size());
  if (n == 0) return;
  const AccessKind k = run.begin()->kind();
  if (writes(k) && !grouped(k)) {
    write_active.store(true, std::memory_order_relaxed);
  } else {
    if (grouped(k)) group_kind = k;
    add_grants(k, static_cast<int>(n) + (run.continues() ? 1 : 0));
  }
  dequeue(n);
}

inline void VarQueue::continue_run(Granted& out) noexcept {
  check();
  const AccessKind k = out.begin()->kind();
  // The token kept every other release from granting the head: the run is still there.
  DEPENGINE_INVARIANT(out.continues() && waiting_now() > 0 &&
                          slot(first.load(std::memory_order_relaxed)).load(std::memory_order_relaxed).kind() == k &&
                          (grouped(k) ? group_now() > 0 && group_kind == k : reads_running() > 0),
                      "a run granted in parts lost its place at the head of its var's queue");
  peek_first_run(out);
  add_grants(k, static_cast<int>(out.size()) - (out.continues() ? 0 : 1));
  dequeue(static_cast<std::uint32_t>(out.size()));
  check();
}

inline void VarQueue::release(AccessKind kind, Granted& out) noexcept {
  check();
  // Each branch finds whether this release is the one that grants, then copies what it
  // grants into `out` before it changes anything.
  if (grouped(kind)) {
    DEPENGINE_INVARIANT(group_now() > 0, "a commute or reduce access released on a var without its run");
    if (group_now() > 1) {
      group_running.store(group_now() - 1, std::memory_order_relaxed);
      out.clear();
      return;
    }
    peek_first_run(out);
    group_running.store(0, std::memory_order_release);
  } else if (!writes(kind)) {
    // A count of two or more falls as release_shared_read makes it fall; a count of one is
    // this release's alone (release_shared_read never takes a count to zero), so nothing
    // but this release lowers it. A push may raise it meanwhile (grant_read_unlocked), only
    // while nothing waits: the copy below is then empty, and the read it granted runs on.
    int r = reads_running();
    for (;;) {
      DEPENGINE_INVARIANT(r > 0, "a read released on a var with no running read");
      if (r == 1) break;
      if (running_reads.compare_exchange_weak(r, r - 1, std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
        out.clear();
        return;
      }
    }
    peek_first_run(out);
    // An acquire of every earlier read's release: the write this may grant comes after them.
    running_reads.fetch_sub(1, std::memory_order_acq_rel);
  } else {
    DEPENGINE_INVARIANT(writing(), "a write released on a var with no active write");
    peek_first_run(out);
    write_active.store(false, std::memory_order_release);
  }
  grant_run(out);
  check();
}

}  // namespace depengine::detail
