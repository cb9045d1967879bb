#include "device_dispatch.h"

namespace depengine::detail {

GpuLane::GpuLane(std::function<void(Op*, GpuLane&)> run, std::unique_ptr<DeviceStream> stream,
                 int index, int key)
    : stream_(std::move(stream)), index_(index), key_(key) {
  thread_.emplace([this, run = std::move(run)](Op*& op) { run(op, *this); },
                  [this] {
                    try {
                      stream_->bind_thread();
                    } catch (...) {
                      bind_error_ = std::current_exception();
                    }
                  });
}

GpuLane::~GpuLane() {
  thread_.reset();
  stream_->synchronize();
}

DeviceDispatch::DeviceDispatch(int sim_gpus, RunOnLane run, Redispatch redispatch)
    : run_(std::move(run)),
      redispatch_(std::move(redispatch)),
      backend_(make_backend(sim_gpus)) {
  for (int d = 0; d < backend_->device_count(); ++d) {
    event_pools_.push_back(std::make_unique<EventPool>(*backend_, d));
  }
}

GpuLane& DeviceDispatch::lane_for(Device d, Lane lane) {
  return lanes_.get(*backend_, d, lane, [&](std::unique_ptr<DeviceStream> stream, int index) {
    return std::make_unique<GpuLane>(run_, std::move(stream), static_cast<int>(lane), index);
  });
}

bool DeviceDispatch::await_device_inputs(Op* op, Failure& failure) {
  if (!has_gpu_state(*op)) return false;
  std::vector<GpuSyncPtr> pending;
  for (;;) {
    pending.clear();
    incomplete_inputs(*op, pending);
    if (pending.empty()) break;
    op->wait.store(static_cast<int>(pending.size()) + 1, std::memory_order_relaxed);
    for (const GpuSyncPtr& s : pending) {
      s->on_done([this, op] {
        if (op->wait.fetch_sub(1, std::memory_order_acq_rel) == 1) redispatch_(op);
      });
    }
    if (op->wait.fetch_sub(1, std::memory_order_acq_rel) != 1) return true;
  }
  failure = read_failure(*op);
  reset_written(*op);
  return false;
}

void DeviceDispatch::stop() {
  lanes_.clear();
  event_pools_.clear();
  backend_.reset();
}

}  // namespace depengine::detail
