// The threaded engine's launch of a GPU op onto its lane's stream (the lanes and the parking
// of host ops are DeviceDispatch's, device_dispatch.h). A synchronous op finishes for the
// var queues as soon as its work is on the stream, behind events that order it after the
// device work it depends on, and retires in GpuSyncSink::gpu_op_completed when that work has
// run. An asynchronous op is a host op: it starts once its device inputs are complete, and
// ends at done().
#pragma once

#include "device/gpu_sync.h"
#include "device_dispatch.h"
#include "op.h"

namespace depengine::detail {

// What launching a GPU op needs from the engine that owns the lane.
class GpuLaunchHost : public GpuSyncSink {
 public:
  // Finishes `op` for its var queues with `failure`; `original` when the failure is the
  // op's own (its launch failed) rather than inherited from an input.
  virtual void finish_launched(Op* op, Failure failure, bool original) = 0;
  // Runs an asynchronous op's body; the op ends when its Completion is called.
  virtual void run_async_body(Op* op, const RunContext& ctx) = 0;
  // Dispatches again an op that was parked on a commute var this launch let go.
  virtual void redispatch_parked(Op* op) = 0;
  // The op's device work is on its stream: it counts in flight, and in `epoch`, until
  // gpu_op_completed.
  virtual void device_work_started(Epoch* epoch) = 0;

 protected:
  ~GpuLaunchHost() = default;
};

// The completion state of a launched stream op, with the epoch its device work counts in.
class TrackedSync final : public GpuSync {
 public:
  using GpuSync::GpuSync;
  Epoch* epoch = nullptr;
};

// Launches `op` onto `lane`'s stream, on the lane's thread (DeviceDispatch's RunOnLane).
void launch_gpu_op(Op* op, GpuLane& lane, DeviceDispatch& devices, GpuLaunchHost& host);

}  // namespace depengine::detail
