// The threaded engine's device side: the device backend (CUDA or simulated), an event pool
// per device, a launcher lane per device and lane (a SerialWorker and a stream), and the
// parking of host ops whose inputs have device work in flight. The engine supplies what
// runs a GPU op on its lane and what dispatches a parked op again.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "device/device_backend.h"
#include "device/gpu_sync.h"
#include "op.h"
#include "serial_worker.h"

namespace depengine::detail {

// One GPU lane: a thread that launches the lane's ready ops onto its stream, in order.
class GpuLane {
 public:
  // `key` identifies the stream among all lanes (device · kLaneCount + lane); `run` launches
  // one op, on the lane's thread.
  GpuLane(std::function<void(Op*, GpuLane&)> run, std::unique_ptr<DeviceStream> stream,
          int index, int key);
  // Launches what is queued, stops the thread, then waits for the stream's work.
  ~GpuLane();
  GpuLane(const GpuLane&) = delete;
  GpuLane& operator=(const GpuLane&) = delete;

  void submit(Op* op) { thread_->push(op); }
  DeviceStream& stream() noexcept { return *stream_; }
  int index() const noexcept { return index_; }
  int key() const noexcept { return key_; }
  // Why this lane's thread cannot launch onto its stream, if it cannot.
  const std::exception_ptr& bind_error() const noexcept { return bind_error_; }

 private:
  std::unique_ptr<DeviceStream> stream_;
  const int index_;
  const int key_;
  std::exception_ptr bind_error_;  // set by the lane thread before its first op
  std::optional<SerialWorker<Op*>> thread_;
};

class DeviceDispatch {
 public:
  using RunOnLane = std::function<void(Op*, GpuLane&)>;
  using Redispatch = std::function<void(Op*)>;

  // The backend of make_backend(sim_gpus).
  DeviceDispatch(int sim_gpus, RunOnLane run, Redispatch redispatch);

  // True when the engine has GPUs (else ops never have device state).
  bool any() const noexcept { return !event_pools_.empty(); }
  EventPool& events(int device) { return *event_pools_[static_cast<std::size_t>(device)]; }

  // The lane of `d` and `lane`, made (with its stream) on first use. Throws Error naming the
  // device when there is no such device. Thread-safe.
  GpuLane& lane_for(Device d, Lane lane);

  // A host op (CPU op, wait_to_read's op, async GPU op) whose vars have stream work still in
  // flight is parked until that work completes, then handed to `redispatch` from the
  // completion thread: returns true. Else `failure` gets the failure its vars carry (when
  // any GPU op used them) and the vars it writes forget their stream ops.
  bool await_inputs(Op* op, Failure& failure) {
    // An engine without GPUs never has device state: CPU ops skip the scan of their vars.
    return any() && await_device_inputs(op, failure);
  }

  // Stops the lanes (their queued launches run first), then the event pools and the backend.
  void stop();

 private:
  bool await_device_inputs(Op* op, Failure& failure);

  const RunOnLane run_;
  const Redispatch redispatch_;
  std::unique_ptr<DeviceBackend> backend_;
  std::vector<std::unique_ptr<EventPool>> event_pools_;
  PerLane<GpuLane> lanes_;
};

}  // namespace depengine::detail
