// Event-based completion of GPU operations (the threaded engine's "async GPU dependency
// engine", as in MXNet 2.x).
//
// A synchronous GPU op is complete for its successors as soon as its work is on its stream:
// the engine records an event after the op's work and releases the op's accesses at once.
// Each var remembers the stream ops whose work on it may still be in flight (GpuVarState):
// the last write and the reads since. What a successor then needs depends on where it runs:
//
//   - a stream op on the same stream: nothing (streams are in order);
//   - a stream op on another stream or GPU: DeviceStream::wait(event, kind), no host round
//     trip; a data wait for a write it reads, an ordering wait for a write it only
//     overwrites and for reads it overwrites (WaitKind);
//   - a host op (CPU op, wait_to_read, delete_var, an async GPU op): it is parked until the
//     events complete, reported by the stream's completion callback, and then dispatched.
//     No CPU worker blocks.
//
// The op's own completion (GpuSync::stream_done) retires it: its observer's on_end, its
// failure for wait_all, and the in-flight count that wait_all drains.
//
// Errors raised by device work are known only at completion, when ops that read the op's
// output may already be on their streams. A GpuSync therefore inherits the failure of the
// GPU writes its op read (its upstream), so a failure still flows down the graph: a host op
// or a later stream op that reads a var whose last write completed failed is skipped with
// that failure; a var's own failure (set at launch) takes precedence over it. Only reads
// carry a failure: an op that overwrites a failed op's output, or a var a failed op read,
// waits for that op's work and still runs (as on the naive engine).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "device/device_backend.h"
#include "op.h"
#include "spin_lock.h"

namespace depengine::detail {

// Events of one device, reused: an event goes back to the pool when the op it marks has
// completed, and no stream waits on a completed op's event.
class EventPool {
 public:
  EventPool(DeviceBackend& backend, int device) : backend_(backend), device_(device) {}
  std::unique_ptr<StreamEvent> take();
  void give_back(std::unique_ptr<StreamEvent> event);
  // Events made so far (in use or pooled).
  std::size_t created() const;

 private:
  DeviceBackend& backend_;
  const int device_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<StreamEvent>> free_;
  std::size_t created_ = 0;
};

class GpuSync;

// Told when a stream op has completed; the engine retires the op there.
class GpuSyncSink {
 public:
  virtual void gpu_op_completed(GpuSync& sync) = 0;

 protected:
  ~GpuSyncSink() = default;
};

// The completion state of one launched stream op.
class GpuSync : public std::enable_shared_from_this<GpuSync> {
 public:
  // `stream_key` identifies the stream (device · kLaneCount + lane); `launch_failure` is
  // the op's failure at launch (empty when the launch succeeded); `upstream` are the
  // incomplete GPU writes of the vars the op reads.
  GpuSync(GpuSyncSink& sink, EventPool& pool, int stream_key, std::uint64_t seq,
          std::vector<std::shared_ptr<GpuSync>> upstream, Failure launch_failure,
          std::shared_ptr<Observer> observer);

  const int stream_key;
  const std::uint64_t seq;

  // The event to record after the op's work (before anyone can wait on it).
  StreamEvent& event() noexcept { return *event_; }

  bool done() const noexcept { return done_.load(std::memory_order_acquire); }
  // Once done(): the op's failure (own or inherited), whether it is the op's own, and
  // whether that own failure came from the launch (already reported by the engine).
  const Failure& failure() const noexcept { return failure_; }
  bool original() const noexcept { return original_; }
  bool failed_at_launch() const noexcept { return static_cast<bool>(launch_failure_); }
  std::shared_ptr<Observer> take_observer() noexcept { return std::move(observer_); }

  // Makes later work on `stream` wait for this op's work; nothing once it has completed.
  void order_before(DeviceStream& stream, WaitKind kind);
  // Calls `fn` once done (at once when it is). `fn` must not block.
  void on_done(std::function<void()> fn);
  // The stream's completion callback: the op's work has finished with `error` (or none).
  void stream_done(std::exception_ptr error);

 private:
  void arrive();
  void complete();

  GpuSyncSink& sink_;
  EventPool& pool_;
  std::unique_ptr<StreamEvent> event_;
  std::vector<std::shared_ptr<GpuSync>> upstream_;
  Failure launch_failure_;
  std::shared_ptr<Observer> observer_;
  std::exception_ptr own_error_;
  std::atomic<int> pending_{0};
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> callbacks_;
  Failure failure_;
  bool original_ = false;
};

using GpuSyncPtr = std::shared_ptr<GpuSync>;

// A var's stream ops whose work may be in flight.
struct GpuVarState {
  // The last write when it was a stream op. Changed only by an op holding write access.
  GpuSyncPtr writer;
  // Stream ops that read the current version: at most one per stream, plus incomplete ones.
  // GPU readers add themselves concurrently, under `lock`.
  SpinLock lock;
  std::vector<GpuSyncPtr> readers;
};

// True when some var of `op` has GPU state (the fast check for host ops).
bool has_gpu_state(Op& op) noexcept;

// The earliest failure among the vars whose failure `op` inherits: a var's own failure,
// else the failure with which its last stream write completed. For a commute var (held by
// `op`), a failed completed stream write's failure is added to the var's instead.
Failure read_failure(Op& op);

// Host ops: appends the incomplete stream ops that `op` must wait for (writes it reads or
// overwrites, reads it overwrites).
void incomplete_inputs(Op& op, std::vector<GpuSyncPtr>& out);

// Host ops, once their inputs are complete: forgets the stream ops of the vars `op` writes,
// since its own outcome replaces theirs.
void reset_written(Op& op);

// Stream ops: makes `stream` (key `stream_key`) wait for earlier stream ops on other
// streams that `op` depends on, and returns the GPU writes `op` reads (done or not). A wait
// for a write `op` reads is a data wait; one for a write it only overwrites, or for a read
// it overwrites, is an ordering wait; one op waited for both ways gets one data wait.
std::vector<GpuSyncPtr> order_after_inputs(Op& op, DeviceStream& stream, int stream_key);

// The earliest failure among the ops of `syncs` that have already completed. Checked after
// order_after_inputs: an input that completed, failed, between the op's first failure check
// and its ordering is caught here (one still running is awaited by the stream instead).
// The op is then skipped, and its stream may already hold data waits that carry the
// failure: the caller ends that span of the stream (notify_when_done) before the next op.
Failure completed_failure(const std::vector<GpuSyncPtr>& syncs);

// Stream ops, after launch: records `sync` as the last write or a reader of op's vars.
void publish(Op& op, const GpuSyncPtr& sync);

}  // namespace depengine::detail
