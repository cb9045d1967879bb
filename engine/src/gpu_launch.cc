#include "gpu_launch.h"

#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "commute.h"

namespace depengine::detail {

void launch_gpu_op(Op* op, GpuLane& lane, DeviceDispatch& devices, GpuLaunchHost& host) {
  if (lane.bind_error()) {
    host.finish_launched(op, Failure{lane.bind_error(), op->seq}, true);
    return;
  }
  Failure up;
  if (!take_commute(op, [&host](Op* parked) { host.redispatch_parked(parked); })) return;
  if (op->is_async()) {
    if (devices.await_inputs(op, up)) return;
    if (!up) up = op->upstream_failure();
  } else {
    up = read_failure(*op);
  }
  if (up) {
    host.finish_launched(op, std::move(up), false);
    return;
  }
  op->observe_start(lane.index());
  DeviceStream& stream = lane.stream();
  RunContext ctx{op->opts.device, op->opts.lane, lane.index(), &stream};
  if (op->is_async()) {
    host.run_async_body(op, ctx);
    return;
  }
  std::exception_ptr error;
  std::vector<GpuSyncPtr> upstream;
  std::shared_ptr<TrackedSync> sync;
  {
    CurrentOpScope scope(op);
    try {
      upstream = order_after_inputs(*op, stream, lane.key());
      if (Failure late = completed_failure(upstream)) {
        up = std::move(late);
      } else {
        op->fn->call(ctx, nullptr);
        stream.check_launch();
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (up) {  // an input failed while this op was being ordered: skipped, nothing launched
    // Ends the span of the waits already issued, so that the failure a data wait carries
    // is not reported for the next op on this stream.
    stream.notify_when_done([](std::exception_ptr) {});
    host.finish_launched(op, std::move(up), false);
    return;
  }
  {
    CurrentOpScope scope(op);
    try {
      // Recorded even after a failed launch: work it enqueued before failing stays ordered.
      EventPool& events = devices.events(op->opts.device.id);
      // The observer's on_end is reported when the work completes.
      sync = std::make_shared<TrackedSync>(host, events, lane.key(), op->seq,
                                           std::move(upstream), Failure{error, op->seq},
                                           op->observer);
      stream.record(sync->event());
    } catch (...) {
      if (!error) error = std::current_exception();
      sync.reset();
    }
  }
  const bool failed = error != nullptr;
  if (sync) {
    publish(*op, sync);
    op->drop_observer();
    // The device work stays in flight and active, in the op's epoch, until it completes.
    sync->epoch = op->epoch;
    host.device_work_started(sync->epoch);
    stream.notify_when_done([sync](std::exception_ptr e) { sync->stream_done(std::move(e)); });
  }
  host.finish_launched(op, Failure{std::move(error), op->seq}, failed);
}

}  // namespace depengine::detail
