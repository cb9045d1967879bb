// depengine/stream.h — what a running operation sees: its device, lane, worker and stream.
#pragma once

#include <exception>
#include <functional>

#include "depengine/device.h"

namespace depengine {

// An in-order queue of device work: a CUDA stream, or on the host-simulated device a
// thread that runs queued host functions in order. GPU operations enqueue their work on
// the stream they are given and return; the engine completes them when the stream reaches
// the point where the operation's work ends.
//
//   engine->push([](const depengine::RunContext& ctx) {
//     ctx.stream->enqueue_host([] { /* runs in stream order */ });
//   }, {a}, {b}, {.device = depengine::Device::gpu(0)});
//
// enqueue_host and native_handle are thread-safe.
class Stream {
 public:
  virtual ~Stream() = default;

  virtual Device device() const noexcept = 0;
  virtual Lane lane() const noexcept = 0;

  // The cudaStream_t of a CUDA stream; nullptr on the host-simulated device.
  virtual void* native_handle() const noexcept = 0;

  // Runs `fn` on the host once all earlier work on this stream has finished, before any
  // later work starts. An exception thrown by `fn` fails the operation that enqueued it.
  virtual void enqueue_host(std::function<void()> fn) = 0;
};

// Passed to an operation's function when it takes one: `[](const RunContext& ctx) {...}`.
struct RunContext {
  Device device;
  Lane lane = Lane::compute;
  // Index of the worker running the op within its device's pool (0-based). On the CPU, a
  // thread waiting in wait_all() runs queued ops meanwhile as index cpu_threads().
  int worker = 0;
  // The stream of a GPU op; nullptr for a CPU op.
  Stream* stream = nullptr;
};

}  // namespace depengine
