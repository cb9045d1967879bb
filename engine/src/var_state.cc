#include "var_state.h"

#include <cstddef>
#include <mutex>
#include <string>

#include "op.h"
#include "record_pool.h"

namespace depengine::detail {
namespace {
std::atomic<std::uint64_t> g_next_var_id{1};
}  // namespace

void* VarState::operator new(std::size_t, std::align_val_t) {
  return record_pool::allocate(record_pool::Record::var_state);
}
void VarState::operator delete(void* p, std::align_val_t) noexcept {
  record_pool::release(record_pool::Record::var_state, p);
}

void var_add_ref(VarState* s) noexcept { s->refs.fetch_add(1, std::memory_order_relaxed); }

// The last handle gone: the var is freed now if nothing of it is pending, else by the
// release that leaves its queue idle (threaded_engine.cc, whose ops hold no reference).
// Both decide under the queue's lock; no access can be pushed once no handle is left.
void var_release(VarState* s) noexcept {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // In a forked child the queue's lock may be held by a thread that does not exist here;
  // the state stays with the engine, which is left as it is.
  if (made_before_fork(s->owner)) return;
  bool idle;
  {
    std::lock_guard lk(s->queue.lock);
    // No push can come now: the credits of reads granted at push go back (VarQueue::
    // read_credits), else the queue would never be idle.
    s->queue.return_read_credits();
    idle = s->queue.idle();
    if (!idle) s->queue.orphaned = true;
  }
  if (idle) delete s;
}

std::uint64_t var_id(const VarState* s) noexcept { return s->id; }

static_assert(alignof(VarState) >= 4, "Var keeps its mode in the low two bits of the pointer");
// The layout var_state.h describes: the pushing thread's part of the queue ends the first
// line, the finishing readers' counts and the failure share the second, the handle count is
// on the third.
// As for Op::check_layout (op.cc), only libstdc++'s sizes are checked: with another standard
// library the layout is slower, not wrong.
#ifdef __GLIBCXX__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(VarState, queue) + offsetof(VarQueue, parked) + sizeof(Op*) == 64,
              "the pushing thread's part of a var fills its first line");
static_assert(offsetof(VarState, queue) + offsetof(VarQueue, running_reads) == 64,
              "a var's counts of granted accesses start its second line");
static_assert(offsetof(VarState, failure) + sizeof(Failure) <= 128,
              "a var's failure is on its second line");
static_assert(offsetof(VarState, refs) >= 128, "a var's handle count is off its first two lines");
static_assert(sizeof(VarState) == 192, "a var is three cache lines");
#pragma GCC diagnostic pop
#endif

VarState* new_var_state(std::uint64_t owner) {
  return new VarState(owner, g_next_var_id.fetch_add(1, std::memory_order_relaxed));
}

void check_var(const Var& v, std::uint64_t owner, const char* what) {
  if (!v) throw Error(std::string(what) + ": null Var");
  if (v.state()->owner != owner) {
    throw Error(std::string(what) + ": var #" + std::to_string(v.id()) +
                (made_before_fork(v.state()->owner)
                     ? " belongs to an engine made before fork(), in the parent process"
                     : " belongs to another engine"));
  }
}

}  // namespace depengine::detail
