// The CUDA backend: real streams and events over the CUDA runtime. Plain C++ linked to
// cudart (no kernels here), built only when CUDA is enabled; no_cuda_backend.cc stands in
// otherwise.
//
// Completion: each stream has a completion thread. notify_when_done records a pooled plain
// event (cudaEventDisableTiming) and queues it with the callback; the thread takes them in
// order and calls the callbacks, never a CPU worker. When the oldest event is not done yet,
// the thread records the stream's own cudaEventBlockingSync event (the waker) behind
// everything enqueued so far and sleeps on it: one sleep covers every op launched before it,
// and the launching thread never records a blocking-sync event. On an H200, recording one
// cost the launching thread about 1 us when reused and 25 us the first time (a plain event:
// under 0.5 us); with one per op, a chain of tiny ops took 36-40 us per op in 3 of 14 processes
// (docs/gpu.md, "Measured on an H200"). The callbacks are engine code that makes no CUDA
// call.
//
// enqueue_host uses cudaLaunchHostFunc. Its function must not call CUDA (a CUDA rule); an
// exception it throws is kept with the number of the host task that threw it, so that
// notify_when_done reports it to the callback whose span of work contains that task.
//
// Errors across streams. A host function's exception stays with the stream that ran it: no
// event carries it, so no wait, data or ordering (WaitKind), takes it on, and work behind a
// wait runs. That satisfies the rule that an ordering wait never carries a failure; for data
// waits the engine carries it instead (GpuSync inherits the failure of the writes its op
// reads), so an op that reads failed output is failed although its device work has run,
// which a real device cannot take back anyway. Kernel faults (an illegal address, a trap)
// are different: they are sticky for the whole CUDA context, every stream of the device
// reports them from then on, whatever waited on what, and they cannot be contained to the
// ops that depend on the faulting kernel.
#include <cuda_runtime_api.h>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "depengine/error.h"
#include "device/device_backend.h"
#include "serial_worker.h"

namespace depengine::detail {
namespace {

std::string cuda_message(int device, const std::string& what, cudaError_t e) {
  return Device::gpu(device).str() + ": " + what + ": " + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}

void check(cudaError_t e, int device, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so that the next call starts clean
    throw Error(cuda_message(device, what, e));
  }
}

// Makes `device` current on the calling thread for a scope, restoring the previous one:
// streams and events belong to the device that is current when they are created.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    check(cudaSetDevice(device), device, "cudaSetDevice");
  }
  ~CurrentDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

class CudaEvent final : public StreamEvent {
 public:
  CudaEvent(int device, unsigned flags) : device_(device) {
    CurrentDevice on(device);
    check(cudaEventCreateWithFlags(&event_, flags), device, "cudaEventCreateWithFlags");
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool query() override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(e, device_, "cudaEventQuery");
    return true;
  }
  void synchronize() override { check(cudaEventSynchronize(event_), device_, "cudaEventSynchronize"); }

  cudaEvent_t get() const noexcept { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

// A captured stream run, instantiated; launched on the stream it was captured from.
class CudaGraph final : public StreamGraph {
 public:
  CudaGraph(int device, cudaStream_t stream, cudaGraphExec_t exec)
      : device_(device), stream_(stream), exec_(exec) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch() override { check(cudaGraphLaunch(exec_, stream_), device_, "cudaGraphLaunch"); }

 private:
  int device_;
  cudaStream_t stream_;
  cudaGraphExec_t exec_;
};

// Set while this thread captures a stream: enqueue_host refuses, because a host node's
// HostTask is freed by its first run and a graph runs it again.
thread_local bool t_capturing = false;

class CudaStream final : public DeviceStream {
 public:
  CudaStream(int device, Lane lane) : device_(Device::gpu(device)), lane_(lane) {
    CurrentDevice on(device);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), device,
          "cudaDeviceGetStreamPriorityRange");
    // Lower numbers are higher priorities: the priority lane gets the greatest one.
    const int priority = lane == Lane::priority ? greatest : least;
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority), device,
          what("cudaStreamCreateWithPriority"));
    const cudaError_t made =
        cudaEventCreateWithFlags(&waker_, cudaEventDisableTiming | cudaEventBlockingSync);
    if (made != cudaSuccess) {
      cudaStreamDestroy(stream_);
      check(made, device, what("cudaEventCreateWithFlags"));
    }
    completer_.emplace([this](Pending& p) { complete(p); },
                       [this] {
                         if (cudaSetDevice(device_.id) != cudaSuccess) cudaGetLastError();
                       });
  }

  ~CudaStream() override {
    completer_.reset();  // reports what is pending, then stops
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(waker_);
    cudaStreamDestroy(stream_);
  }

  Device device() const noexcept override { return device_; }
  Lane lane() const noexcept override { return lane_; }
  void* native_handle() const noexcept override { return stream_; }

  void bind_thread() override {
    check(cudaSetDevice(device_.id), device_.id, "cudaSetDevice");
  }

  void check_launch() override {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw Error(cuda_message(device_.id, what("kernel launch"), e));
  }

  std::unique_ptr<StreamGraph> capture(const std::function<void()>& enqueue) override {
    // The completion thread records no waker meanwhile: it would join the graph.
    std::lock_guard capturing(capture_mu_);
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    bool enqueued = true;
    t_capturing = true;
    try {
      enqueue();
    } catch (...) {
      enqueued = false;
    }
    t_capturing = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    cudaGraphExec_t exec = nullptr;
    const bool ok = enqueued && ended == cudaSuccess && graph != nullptr &&
                    cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a refused capture leaves a non-sticky error behind
    if (!ok) {
      if (exec) cudaGraphExecDestroy(exec);
      return nullptr;
    }
    return std::make_unique<CudaGraph>(device_.id, stream_, exec);
  }

  void enqueue_host(std::function<void()> fn) override {
    if (t_capturing) throw Error(what("enqueue_host") + ": cannot be captured into a graph");
    auto task = std::make_unique<HostTask>(HostTask{this, std::move(fn), 0});
    {
      std::lock_guard lk(mu_);
      task->ticket = ++host_tickets_;
    }
    check(cudaLaunchHostFunc(stream_, &run_host, task.get()), device_.id,
          what("cudaLaunchHostFunc"));
    task.release();  // owned by run_host now
  }

  // Never throws: the engine has already published the op when it asks, so a failure to
  // record is handed to the callback, in order, by the completion thread.
  void notify_when_done(std::function<void(std::exception_ptr)> cb) override {
    Pending p{nullptr, 0, std::move(cb), nullptr};
    try {
      p.event = take_event();
      check(cudaEventRecord(p.event->get(), stream_), device_.id, what("cudaEventRecord"));
    } catch (...) {
      p.error = std::current_exception();
    }
    // The ticket and the queue position are taken together, so that callbacks and host
    // tasks stay in stream order.
    std::lock_guard lk(mu_);
    p.last_ticket = host_tickets_;
    completer_->push(std::move(p));
  }

  void record(StreamEvent& event) override {
    check(cudaEventRecord(static_cast<CudaEvent&>(event).get(), stream_), device_.id,
          what("cudaEventRecord"));
  }

  // Both kinds are the same cudaStreamWaitEvent: no error crosses it (see the top of file).
  void wait(StreamEvent& event, WaitKind) override {
    check(cudaStreamWaitEvent(stream_, static_cast<CudaEvent&>(event).get(), 0), device_.id,
          what("cudaStreamWaitEvent"));
  }

  void synchronize() override {
    check(cudaStreamSynchronize(stream_), device_.id, what("cudaStreamSynchronize"));
    // The completion thread may still be running callbacks for work that has finished.
    completer_->wait_idle();
  }

 private:
  struct HostTask {
    CudaStream* stream;
    std::function<void()> fn;
    std::uint64_t ticket;
  };
  struct Pending {
    std::unique_ptr<CudaEvent> event;
    std::uint64_t last_ticket;  // host tasks up to this one belong to the callback
    std::function<void(std::exception_ptr)> cb;
    std::exception_ptr error;  // the record failed: reported without waiting
  };
  struct HostError {
    std::uint64_t ticket;
    std::exception_ptr error;
  };

  std::string what(const char* call) const {
    return std::string(call) + " on the " + lane_name(lane_) + " stream";
  }

  // Runs on a CUDA driver thread: must not call CUDA.
  static void CUDART_CB run_host(void* p) {
    std::unique_ptr<HostTask> task(static_cast<HostTask*>(p));
    try {
      task->fn();
    } catch (...) {
      std::lock_guard lk(task->stream->mu_);
      task->stream->host_errors_.push_back(HostError{task->ticket, std::current_exception()});
    }
  }

  std::unique_ptr<CudaEvent> take_event() {
    {
      std::lock_guard lk(mu_);
      if (!free_events_.empty()) {
        std::unique_ptr<CudaEvent> e = std::move(free_events_.back());
        free_events_.pop_back();
        return e;
      }
    }
    return std::make_unique<CudaEvent>(device_.id, cudaEventDisableTiming);
  }

  // On the completion thread: records the waker behind all the work enqueued so far and
  // sleeps until that work has finished. Returns the status of the record or of the wait.
  cudaError_t sleep_until_done() {
    {
      std::lock_guard not_capturing(capture_mu_);
      const cudaError_t e = cudaEventRecord(waker_, stream_);
      if (e != cudaSuccess) return e;
    }
    return cudaEventSynchronize(waker_);
  }

  // On the completion thread: waits for the work before `p`'s record, then reports it.
  void complete(Pending& p) {
    std::exception_ptr error = std::move(p.error);
    if (p.event) {
      cudaError_t e = cudaEventQuery(p.event->get());
      // The waker is recorded after p's event, so once it is done p's is too.
      if (e == cudaErrorNotReady) e = sleep_until_done();
      if (e != cudaSuccess) {
        cudaGetLastError();
        error = std::make_exception_ptr(Error(cuda_message(device_.id, what("device work"), e)));
      }
    }
    {
      std::lock_guard lk(mu_);
      while (!host_errors_.empty() && host_errors_.front().ticket <= p.last_ticket) {
        if (!error) error = std::move(host_errors_.front().error);
        host_errors_.pop_front();
      }
      if (p.event) free_events_.push_back(std::move(p.event));
    }
    p.cb(std::move(error));
    p.cb = nullptr;
  }

  const Device device_;
  const Lane lane_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;  // host_errors_, free_events_, host_tickets_
  std::deque<HostError> host_errors_;
  std::vector<std::unique_ptr<CudaEvent>> free_events_;
  std::uint64_t host_tickets_ = 0;
  // Recorded and waited on by the completion thread alone (sleep_until_done).
  cudaEvent_t waker_ = nullptr;
  // Held while the stream captures, and by the completion thread while it records the waker.
  std::mutex capture_mu_;
  // Reports completions in stream order (the CUDA-free part of a stream, serial_worker.h).
  std::optional<SerialWorker<Pending>> completer_;
};

// cudaGetDeviceCount, or 0 with the reason when no driver or device is usable.
struct Probe {
  int count = 0;
  std::string reason;
};

Probe probe() noexcept {
  Probe p;
  try {
    const cudaError_t e = cudaGetDeviceCount(&p.count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p.count = 0;
      p.reason = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    } else if (p.count == 0) {
      p.reason = "no CUDA device is present";
    }
  } catch (...) {
    p.count = 0;
    p.reason = "the CUDA runtime could not be queried";
  }
  return p;
}

const Probe& cached_probe() noexcept {
  static const Probe p = probe();
  return p;
}

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() const noexcept override { return cached_probe().count; }
  std::string name() const override { return "cuda"; }
  std::unique_ptr<DeviceStream> make_stream(int device, Lane lane) override {
    check_lane(device, lane);
    check_device(device);
    return std::make_unique<CudaStream>(device, lane);
  }
  std::unique_ptr<StreamEvent> make_event(int device) override {
    check_device(device);
    return std::make_unique<CudaEvent>(device, cudaEventDisableTiming);
  }

 private:
  static void check_device(int device) {
    const Probe& p = cached_probe();
    if (p.count == 0) {
      throw Error(Device::gpu(device).str() + ": no usable CUDA device (" + p.reason +
                  "; set DEPENGINE_SIM_GPUS to use host-simulated GPUs)");
    }
    if (device < 0 || device >= p.count) {
      throw Error("unknown device " + Device::gpu(device).str() + ": " +
                  std::to_string(p.count) + " CUDA device(s)");
    }
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace depengine::detail

int depengine::Device::gpu_count() noexcept { return detail::cached_probe().count; }
