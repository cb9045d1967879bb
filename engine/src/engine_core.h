// The base of both engine implementations (naive, threaded): what they share — the options,
// push and delete_var up to the engine's own submit, the first failure in push order, the
// count of ops in flight's peak — and what each provides behind the public Engine handle.
//
// The handle (engine.cc) forwards every call and owns the shutdown sequence. Splitting the
// two lets the handle be destroyed from inside one of the engine's own operations (an op
// that deletes its engine, std::exit inside an op of Engine::get()): the core, which the
// running op still uses, then finishes and stops on a thread of its own instead of the
// destructor waiting for the op that called it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "depengine/engine.h"
#include "engine_options.h"
#include "op.h"

namespace depengine::detail {

class EngineCore : public OpSink {
 public:
  // `ops_reference_vars`: OpSink::ops_reference_vars.
  EngineCore(const ResolvedOptions& options, bool ops_reference_vars)
      : OpSink(ops_reference_vars), options_(options), id_(next_engine_id()) {}
  virtual ~EngineCore() = default;
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Process-unique; vars carry it (VarState::owner).
  std::uint64_t id() const noexcept { return id_; }
  // True when `op` was pushed to this engine.
  bool owns(const Op* op) const noexcept { return op && op->sink() == this; }

  Var new_var() { return Var(new_var_state(id_)); }
  void push(const BodyBuilder& body, bool async, VarList reads, VarList writes,
            PushOptions&& options) {
    check_not_in_observer(async ? "push_async" : "push");
    if (recording_here()) {
      record_push(body, async, reads, writes, std::move(options));
      return;
    }
    push_now(body, async, reads, writes, std::move(options));
  }
  // push without the recording check (segment.cc pushes recorded ops through it).
  void push_now(const BodyBuilder& body, bool async, VarList reads, VarList writes,
                PushOptions&& options) {
    OpPtr op = make_op(this, body, async ? OpKind::async_body : OpKind::body, std::move(options),
                       reads, writes, id_);
    if (op->opts.device.is_gpu()) check_gpu_queue(op->opts.device, op->opts.lane);
    submit(std::move(op), nullptr);
  }
  void delete_var(const Var& v, std::function<void()> on_deleted, DeleteOptions options) {
    check_not_in_observer("delete_var");
    check_var(v, id_, "delete_var");
    if (delete_without_op(v.state(), on_deleted, options)) return;
    submit(make_delete_op(this, v, std::move(on_deleted), id_), v.state());
  }
  // Engine::record and Engine::replay (segment.cc).
  Segment record(void (*call)(void*), void* fn);
  void replay(const Segment& segment);
  // True when the calling thread records this engine's pushes (not inside an op).
  bool recording_here() const noexcept;
  // Throws Error when the calling thread is recording this engine: `what` cannot replay.
  void check_not_recording(const char* what) const;
  // Replays `segment` with its internal edges precomputed (threaded engine, segments whose
  // ReplayPlan is usable); false when the engine leaves it to the per-op path, having
  // pushed nothing.
  virtual bool replay_fast(const std::shared_ptr<const SegmentData>& /*segment*/) {
    return false;
  }

  virtual void wait_to_read(const Var& v) = 0;
  virtual void wait_all() = 0;
  virtual void set_reduction(const Var& v, Reduction reduction) = 0;

  virtual std::string_view kind() const noexcept = 0;
  int cpu_threads() const noexcept { return options_.cpu_threads; }
  std::size_t max_inflight() const noexcept { return options_.max_inflight; }
  int sim_gpus() const noexcept { return options_.sim_gpus; }
  virtual std::size_t pending() const noexcept = 0;
  std::size_t peak_pending() const noexcept { return peak_.load(std::memory_order_relaxed); }
  virtual void set_observer(std::shared_ptr<Observer> observer) = 0;

  // The shutdown sequence, run by the handle's destructor from a thread that is not inside
  // one of this engine's ops: (1) refuse pushes from outside the engine's ops (delete_var
  // stays accepted until everything has finished, so arrays dropped meanwhile still free
  // their storage in order); (2) drain: wait until every pushed op has finished, every
  // asynchronous body has returned, every thread inside a completion or a blocking call has
  // left; (3) stop the device lanes, then the event pools and streams, then the CPU pool.
  // The core may be deleted when it returns.
  virtual void shutdown() noexcept = 0;

  // Run instead by a destructor called from inside one of this engine's ops: refuses pushes
  // from outside, and waits until nothing but the calling op can make progress (so that
  // independent work has finished before std::exit goes on to destroy other statics). The
  // caller then hands the core to a thread that runs shutdown() and deletes it.
  virtual void shutdown_from_own_op() noexcept = 0;

 protected:
  // Raises the peak of ops in flight to `now` if it is higher.
  void note_pending(std::size_t now) noexcept {
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  // Keeps `error` if it is the earliest in push order (`seq`) recorded since the last
  // take_failure. Thread-safe.
  void record_failure(std::uint64_t seq, const std::exception_ptr& error) {
    std::lock_guard lk(failure_mu_);
    failure_.keep_earliest(Failure{error, seq});
  }
  // The failure wait_all reports, forgotten from now on (null when none).
  std::exception_ptr take_failure() {
    std::lock_guard lk(failure_mu_);
    return std::exchange(failure_, Failure{}).error;
  }

  const ResolvedOptions options_;

  // Throws Error naming the device or lane when `device` has no such queue here (makes the
  // GPU stream on first use).
  virtual void check_gpu_queue(Device device, Lane lane) = 0;
  // Registers a pushed op (delete_var's when `to_delete` is set), all or nothing.
  virtual void submit(OpPtr&& op, VarState* to_delete) = 0;
  // delete_var without an op: true when the engine deleted `v` and ran `on_deleted` at
  // once, or (`frees_memory_only`) took it to run when the var's last pending access
  // finishes; false leaves it to delete_var's op (and `on_deleted` untouched).
  virtual bool delete_without_op(VarState* /*v*/, std::function<void()>& /*on_deleted*/,
                                 DeleteOptions /*options*/) {
    return false;
  }

 private:
  void record_push(const BodyBuilder& body, bool async, VarList reads, VarList writes,
                   PushOptions options);

  const std::uint64_t id_;
  std::atomic<std::size_t> peak_{0};
  std::mutex failure_mu_;
  Failure failure_;
};

// Where an engine is in its shutdown sequence (EngineCore::shutdown): accepting pushes,
// draining (refusing pushes from outside its own ops), or stopped.
enum class Stage : int { running, draining, stopped };

// Throws Error when an engine at `stage` no longer accepts `op` (both engines' one rule and
// messages): once stopped, nothing; while draining, only delete_var (`is_delete`),
// wait_to_read's op and pushes made by the engine's own running ops (`from_own_op`).
inline void check_admission(Stage stage, const Op& op, bool is_delete, bool from_own_op) {
  if (stage == Stage::running) return;
  if (stage == Stage::stopped) throw Error(op.call_name() + ": the engine has shut down");
  if (op.counted() && !is_delete && !from_own_op) {
    throw Error(op.call_name() + ": the engine is shutting down");
  }
}

std::unique_ptr<EngineCore> make_naive_core(const struct ResolvedOptions& options);
std::unique_ptr<EngineCore> make_threaded_core(const struct ResolvedOptions& options);

}  // namespace depengine::detail
