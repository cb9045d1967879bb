// Host-simulated GPUs: each stream is a thread draining an in-order queue of host tasks;
// events are generation counters that a stream advances when it reaches a recorded point.
//
// Errors model a fault contained to the work that raised it: a host task that throws puts
// its stream in error until notify_when_done reports it; tasks enqueued behind it on that
// stream are skipped, a record made meanwhile carries the error, and a stream that waits on
// that record for data (WaitKind::data) takes the error on (and skips its own work) in turn.
// A wait that only orders (WaitKind::order) waits and takes nothing. So work that reads
// failed device work does not run, on any stream, while work that only comes after it does.
//
// Each record keeps its own error: events are pooled and recorded again once the work they
// marked has completed, while a stream that was behind may not have reached its wait for the
// earlier record yet; that wait reads the earlier record's error, never a later one's.
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "depengine/error.h"
#include "device/device_backend.h"
#include "notifier.h"
#include "serial_worker.h"

namespace depengine::detail {
namespace {

class SimEvent final : public StreamEvent {
 public:
  // Returns the generation a new record() will complete.
  std::uint64_t begin_record() {
    std::lock_guard lk(mu_);
    points_.emplace(++recorded_, Point{});
    forget_unneeded();
    return recorded_;
  }
  // Notifies under the lock: a waiter may destroy the event as soon as it sees `gen`.
  void reach(std::uint64_t gen, std::exception_ptr error) {
    std::lock_guard lk(mu_);
    Point& p = points_.at(gen);
    p.reached = true;
    p.error = std::move(error);
    forget_unneeded();
    reached_.notify_all();
  }
  // The generation a wait() issued now stands for (0: never recorded, nothing to wait for),
  // kept with its error until the wait has read it (wait_for).
  std::uint64_t watch() {
    std::lock_guard lk(mu_);
    if (recorded_ != 0) ++points_.at(recorded_).watchers;
    return recorded_;
  }
  // Waits for generation `gen` (from watch()) and returns the error its record carried.
  std::exception_ptr wait_for(std::uint64_t gen) {
    if (gen == 0) return nullptr;
    std::unique_lock lk(mu_);
    Point& p = points_.at(gen);  // std::map: stable while other points come and go
    reached_.wait_locked(lk, [&] { return p.reached; });
    std::exception_ptr error = p.error;
    --p.watchers;
    forget_unneeded();
    return error;
  }
  bool query() override {
    std::lock_guard lk(mu_);
    return recorded_ == 0 || points_.at(recorded_).reached;
  }
  void synchronize() override { wait_for(watch()); }

 private:
  struct Point {
    bool reached = false;
    std::exception_ptr error;
    int watchers = 0;  // waits issued for this point that have not read it yet
  };
  // Keeps the last record (waits issued from now on stand for it), points not reached yet,
  // and points a wait has still to read: normally one or two points.
  void forget_unneeded() {
    std::erase_if(points_, [&](const auto& kv) {
      const auto& [gen, p] = kv;
      return gen != recorded_ && p.reached && p.watchers == 0;
    });
  }

  std::mutex mu_;
  Notifier reached_;  // conditions under mu_
  std::uint64_t recorded_ = 0;
  std::map<std::uint64_t, Point> points_;
};

class SimStream final : public DeviceStream {
 public:
  SimStream(int device, Lane lane) : device_(Device::gpu(device)), lane_(lane) {}

  Device device() const noexcept override { return device_; }
  Lane lane() const noexcept override { return lane_; }
  void* native_handle() const noexcept override { return nullptr; }
  void bind_thread() override {}
  void check_launch() override {}
  // Work runs in stream order as it is enqueued: replays take that path instead.
  std::unique_ptr<StreamGraph> capture(const std::function<void()>&) override { return nullptr; }

  void enqueue_host(std::function<void()> fn) override {
    push([fn = std::move(fn), this] {
      if (error_) return;  // behind failed work
      try {
        fn();
      } catch (...) {
        if (!error_) error_ = std::current_exception();
      }
    });
  }
  void notify_when_done(std::function<void(std::exception_ptr)> cb) override {
    push([cb = std::move(cb), this] { cb(std::exchange(error_, nullptr)); });
  }
  void record(StreamEvent& event) override {
    auto& e = static_cast<SimEvent&>(event);
    std::uint64_t gen = e.begin_record();
    push([&e, gen, this] { e.reach(gen, error_); });
  }
  void wait(StreamEvent& event, WaitKind kind) override {
    auto& e = static_cast<SimEvent&>(event);
    std::uint64_t gen = e.watch();
    push([&e, gen, kind, this] {
      std::exception_ptr error = e.wait_for(gen);
      if (kind == WaitKind::data && error && !error_) error_ = std::move(error);
    });
  }
  void synchronize() override { thread_.wait_idle(); }

 private:
  void push(std::function<void()> task) { thread_.push(std::move(task)); }

  const Device device_;
  const Lane lane_;
  // Touched only by the stream thread.
  std::exception_ptr error_;
  // The stream's thread; destroyed first, after handling what is queued.
  SerialWorker<std::function<void()>> thread_{[](std::function<void()>& task) { task(); }};
};

class SimBackend final : public DeviceBackend {
 public:
  explicit SimBackend(int devices) : devices_(devices) {}
  int device_count() const noexcept override { return devices_; }
  std::string name() const override { return "simulated"; }
  std::unique_ptr<DeviceStream> make_stream(int device, Lane lane) override {
    check_lane(device, lane);
    check(device);
    return std::make_unique<SimStream>(device, lane);
  }
  std::unique_ptr<StreamEvent> make_event(int device) override {
    check(device);
    return std::make_unique<SimEvent>();
  }

 private:
  void check(int device) const {
    if (device < 0 || device >= devices_) {
      throw Error("unknown device " + Device::gpu(device).str() + ": " +
                  std::to_string(devices_) + " simulated GPU(s)");
    }
  }
  int devices_;
};

}  // namespace

std::unique_ptr<DeviceBackend> make_sim_backend(int devices) {
  return std::make_unique<SimBackend>(devices);
}

}  // namespace depengine::detail
