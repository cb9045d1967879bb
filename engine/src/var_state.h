// A variable's state behind a depengine::Var handle (var.h), shared by both engines, and
// its reference counting. The threaded engine queues accesses in the var's queue
// (var_queue.h); the naive engine runs ops in push order and uses neither the queue nor the
// GPU slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>

#include "depengine/engine.h"
#include "device/gpu_var.h"
#include "var_queue.h"

namespace depengine::detail {

class ReduceGroup;

// A failure held by a var: the exception and the push sequence number of the op that threw
// it. When an op reads several failed vars it passes on the earliest origin's failure, so
// the outcome does not depend on scheduling.
struct Failure {
  std::exception_ptr error;
  std::uint64_t origin = 0;
  explicit operator bool() const noexcept { return error != nullptr; }

  // True when `candidate` is a failure that comes before this one in push order (any
  // failure comes before none): the earliest-origin rule, the one place it is written.
  bool comes_after(const Failure& candidate) const noexcept {
    return candidate && (!*this || candidate.origin < origin);
  }
  // Keeps the earlier of this failure and `candidate` (comes_after).
  void keep_earliest(const Failure& candidate) noexcept {
    if (comes_after(candidate)) *this = candidate;
  }
};

// The largest engine id (next_engine_id, op.h): a var state keeps its engine's id in 32 bits.
inline constexpr std::uint64_t kMaxEngineId = 0xffffffffu;

// Aligned to a cache line: vars made one after another would otherwise share lines, and
// workers on different cores updating neighbouring vars' queues would contend for them.
// The first line is what a push touches (the owner check, the flags, the version, and the
// queue's lock, ring and waiting count; a release that grants writes it too); the second,
// what a finishing op reads and a finishing reader writes (the failure, the counts of
// granted reads and commute/reduce accesses). A fan's hub is then pushed on one line while
// its readers finish on the other (var_state.cc checks the layout). The fields set once and
// those used only by GPU ops and reductions fill the rest; the reference count (not touched
// by the threaded engine's ops) ends the third line.
struct alignas(64) VarState {
  explicit VarState(std::uint64_t owner_engine, std::uint64_t var_id)
      : owner(static_cast<std::uint32_t>(owner_engine)), id(var_id) {}

  // From the record pool (record_pool.h): made by the frontend, often freed by a worker (the
  // release that leaves an orphaned var's queue idle), and made once per array by a Python
  // frontend.
  static void* operator new(std::size_t size, std::align_val_t align);
  static void operator delete(void* p, std::align_val_t align) noexcept;

  // The id of the engine that made the var (next_engine_id(), at most kMaxEngineId, so 32
  // bits hold it): unique in the process, so a var of a destroyed engine is never taken for
  // one of a new engine made at the same address.
  const std::uint32_t owner;
  // Set under the engine's push lock by delete_var; checked under it by push.
  bool deleted = false;
  // Threaded engine, under the push lock: open_reduction is set.
  bool reduction_open = false;
  // Threaded engine, under the push lock: a GPU op was pushed with an access to the var. Its
  // device work may outlast the access (gpu, below, is made only when it launches), so a
  // delete of the var is an op that waits for that work.
  bool gpu_pushed = false;
  // Writes pushed so far (under the push lock): the version the next write creates - 1.
  std::uint64_t pushed_version = 0;

  // Threaded engine's queue of pending accesses (var_queue.h): the rest of the first line,
  // and the start of the second.
  VarQueue queue;

  // Owned by whichever op holds access: a granted write exclusively, granted reads shared.
  Failure failure;

  // Threaded engine: the stream ops whose device work on this var may still be in flight
  // (device/gpu_sync.h); null for a var that no GPU op has used.
  GpuVarSlot gpu;

  const std::uint64_t id;

  // The hooks of reduce(v) accesses (Engine::set_reduction), under the push lock, and in the
  // threaded engine the run of reduce accesses still open (combined by the next other
  // access, or by wait_all).
  std::shared_ptr<const Reduction> reduction;
  std::shared_ptr<ReduceGroup> open_reduction;

  // Threaded engine: the `on_deleted` of a delete_var that needed no op (VarQueue::
  // delete_pending), and the push sequence number its failure is reported under.
  std::function<void()> pending_delete;
  std::uint64_t pending_delete_seq = 0;

  // The handles' count, off the second line: a frontend that copies a handle to push (a
  // `{v}` list) writes it on every push, and the finishing readers' line would then move
  // between cores with it.
  std::atomic<int> refs{1};
};

VarState* new_var_state(std::uint64_t owner);
// Throws Error when `v` is null or belongs to another engine.
void check_var(const Var& v, std::uint64_t owner, const char* what);

}  // namespace depengine::detail
