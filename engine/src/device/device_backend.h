// The stream/event layer behind GPU placement. Two implementations: CUDA (cuda_backend.cc,
// built when nvcc is found) and the host-simulated device (sim_backend.cc), where threads
// stand in for streams so that every GPU scheduling path runs on machines without a GPU.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "depengine/device.h"
#include "depengine/error.h"
#include "depengine/stream.h"

namespace depengine::detail {

// A point in a stream's work, recorded by one stream and awaited by others. Reusable:
// each record() replaces the point it stands for, for waits issued after it; a wait issued
// earlier still stands for the point recorded before it, and for that point's error only.
class StreamEvent {
 public:
  virtual ~StreamEvent() = default;
  // True once the work before the last record() has finished (true if never recorded).
  virtual bool query() = 0;
  // Blocks the calling host thread until query() would be true.
  virtual void synchronize() = 0;
};

// Why a stream waits for an event, which decides whether the recorded work's failure
// follows the wait.
//   data:  the waiting work reads what the recorded work wrote (read-after-write); it cannot
//          succeed where that work failed, so it takes the failure on.
//   order: the waiting work only has to come after the recorded work (write-after-write,
//          write-after-read); that work's failure is not its own.
enum class WaitKind : std::uint8_t { data, order };

// A run of one stream's work captured once and launched again as one (a CUDA graph):
// Engine::replay of a segment whose ops all sit on one stream (segment.cc).
class StreamGraph {
 public:
  virtual ~StreamGraph() = default;
  // Enqueues the captured work on the stream it was captured from.
  virtual void launch() = 0;
};

class DeviceStream : public Stream {
 public:
  // Captures what `enqueue` enqueues on this stream into a graph, running none of it.
  // Returns null, with nothing enqueued, when this stream runs work as it is enqueued (the
  // simulated device) or the work cannot be captured (`enqueue` threw, or made a call that
  // capture forbids, enqueue_host included): the caller then enqueues it directly.
  virtual std::unique_ptr<StreamGraph> capture(const std::function<void()>& enqueue) = 0;
  // Prepares the calling host thread to launch work on this stream (CUDA: makes the
  // stream's device current). Called once by each thread that launches onto the stream.
  virtual void bind_thread() = 0;
  // Throws Error naming the device when a launch made by the calling thread since the
  // previous call failed (CUDA: cudaGetLastError). Work raised errors go to notify_when_done.
  virtual void check_launch() = 0;
  // Calls `cb(error)` on some host thread once all work enqueued so far has finished;
  // `error` is the first failure raised by that work since the previous notify_when_done.
  // `cb` must not block and must not call into this stream.
  virtual void notify_when_done(std::function<void(std::exception_ptr)> cb) = 0;
  // Marks the current end of this stream's work in `event`.
  virtual void record(StreamEvent& event) = 0;
  // Makes later work on this stream wait for `event` without blocking the host. The point
  // awaited is the event's last record() issued before this call. See WaitKind for errors.
  virtual void wait(StreamEvent& event, WaitKind kind) = 0;
  // Blocks the host until all work enqueued so far has finished.
  virtual void synchronize() = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int device_count() const noexcept = 0;
  // "simulated" or "cuda".
  virtual std::string name() const = 0;
  // Throws Error naming the device when it does not exist or cannot be used, and naming the
  // lane when it is not one of Lane's (check_lane).
  virtual std::unique_ptr<DeviceStream> make_stream(int device, Lane lane) = 0;
  virtual std::unique_ptr<StreamEvent> make_event(int device) = 0;
};

// Throws Error naming `lane` when it is none of Lane's enumerators: a Lane cast from an
// integer may hold any value, and lanes index the engine's per-device streams.
inline void check_lane(int device, Lane lane) {
  const int n = static_cast<int>(lane);
  if (n < 0 || n >= kLaneCount) {
    throw Error(Device::gpu(device).str() + ": unknown lane " + std::to_string(n) +
                " (lanes are 0 to " + std::to_string(kLaneCount - 1) +
                ": compute, copy_to_device, copy_from_device, priority)");
  }
}

std::unique_ptr<DeviceBackend> make_sim_backend(int devices);
// The CUDA backend; when CUDA was not built or no device is present, a backend whose
// device_count() is 0 and whose make_stream throws Error with the reason.
std::unique_ptr<DeviceBackend> make_cuda_backend();

// Both engines' choice: `sim_gpus` > 0 simulated GPUs, else the CUDA backend (no devices
// when there is no driver or GPU).
inline std::unique_ptr<DeviceBackend> make_backend(int sim_gpus) {
  return sim_gpus > 0 ? make_sim_backend(sim_gpus) : make_cuda_backend();
}

// One T per (GPU, lane) of a backend, made on first use from the backend's stream for it
// (both engines' stream registry). Thread-safe.
template <class T>
class PerLane {
 public:
  // The T of `d` and `lane`: made by `make(stream, index)` on first use, `index` being the
  // lane's number among all (device * kLaneCount + lane). Throws the backend's own Error,
  // naming the device, when it has no such device.
  template <class Make>
  T& get(DeviceBackend& backend, Device d, Lane lane, Make&& make) {
    std::lock_guard lk(mu_);
    if (d.id < 0 || d.id >= backend.device_count()) backend.make_stream(d.id, lane);
    const std::size_t index =
        static_cast<std::size_t>(d.id) * kLaneCount + static_cast<std::size_t>(lane);
    if (slots_.size() <= index) slots_.resize(index + 1);
    if (!slots_[index]) {
      slots_[index] = make(backend.make_stream(d.id, lane), static_cast<int>(index));
    }
    return *slots_[index];
  }
  // Destroys every T (each stops its stream).
  void clear() {
    std::lock_guard lk(mu_);
    slots_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<T>> slots_;
};

}  // namespace depengine::detail
