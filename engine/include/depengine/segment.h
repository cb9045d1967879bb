// depengine/segment.h — a recorded run of pushes that an engine can replay (Engine::record,
// Engine::replay): MXNet's CachedOp and bulking, Taskflow's static graphs, CUDA graphs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace depengine {

namespace detail {
struct SegmentData;
class EngineCore;
}  // namespace detail

// The ops one thread pushed inside Engine::record, kept with their bodies, vars and options,
// and their accesses already merged and checked, so that Engine::replay pushes them again
// without building a body or re-resolving the lists.
//
//   depengine::Segment seg = e->record([&] { step(x, w, y); });  // runs once, keeps the ops
//   for (int i = 1; i < steps; ++i) e->replay(seg);              // the same ops again
//
// A cheap, copyable handle to immutable data: copies share it, and it is thread-safe to
// replay one segment from several threads. It keeps its vars and op bodies alive. A
// default-constructed Segment was not recorded, and replay refuses it.
class Segment {
 public:
  Segment() noexcept = default;

  // True when made by Engine::record (even with no ops).
  explicit operator bool() const noexcept { return data_ != nullptr; }
  // The number of ops a replay pushes.
  std::size_t size() const noexcept;
  // The op names (PushOptions::name), in push order; "" for unnamed ops.
  std::vector<std::string> names() const;
  // The ops' vars that the segment reads before (or without) writing them, and those it
  // writes: its boundary with the pushes around it.
  std::size_t input_count() const noexcept;
  std::size_t output_count() const noexcept;
  // True when every op is synchronous and sits on one GPU stream (one device and lane).
  // Such a segment replays as one op on that stream that launches the ops' work as one: a
  // CUDA graph captured by the first replay (on the simulated device, or when the work
  // cannot be captured, the ops' bodies enqueue their work in stream order). It then
  // counts as one op for back-pressure and observers, and fails as a unit, as a graph
  // launch does: an op that fails fails every var the segment writes.
  bool one_stream() const noexcept;
  // True when its internal edges are precomputed (every op on the CPU, no commute() or
  // reduce() access): the threaded engine then replays it with one access per var in the
  // var queues, the ops releasing each other by counters, unless the replay is subject to
  // back-pressure (max_inflight, outside an op), which takes the per-op path.
  bool precomputed() const noexcept;

 private:
  friend class detail::EngineCore;
  explicit Segment(std::shared_ptr<const detail::SegmentData> d) noexcept : data_(std::move(d)) {}
  std::shared_ptr<const detail::SegmentData> data_;
};

}  // namespace depengine
