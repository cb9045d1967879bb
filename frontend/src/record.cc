// nd::record / nd::replay over Engine::record / Engine::replay: the arrays of the region are
// kept by the segment, and a replay's inputs are checked and copied into the recorded ones.
#include "depengine/record.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "depengine/config.h"
#include "internal.h"

#if DEPENGINE_HAS_CUDA
#include "depengine/ops/cuda.h"
#endif

namespace depengine::nd {

struct Segment::Data {
  Engine* engine = nullptr;
  depengine::Segment ops;
  std::vector<NDArray> inputs;
  std::vector<std::shared_ptr<detail::Chunk>> kept;
  std::vector<std::shared_ptr<detail::Generator>> generators;
};

namespace {

using detail::ArrayInternals;
using detail::Chunk;

const Segment::Data& data_of(const std::shared_ptr<const Segment::Data>& d, const char* op) {
  if (!d) throw Error(std::string(op) + ": the segment was not recorded (a default Segment)");
  return *d;
}

// Pushes dst <- src (same size, same device). On a GPU it goes on the compute stream, where
// the recorded ops run, so that a one-stream segment stays on one stream.
void push_copy(Engine& e, Chunk& dst, const Chunk& src, std::size_t index) {
  const detail::Ptr to = detail::ptr(dst), from = detail::ptr(src);
  const std::size_t bytes = dst.size * sizeof(float);
  const std::string name = "replay_input" + std::to_string(index);
#if DEPENGINE_HAS_CUDA
  if (dst.device.is_gpu() && !dst.simulated) {
    const std::size_t n = dst.size;
    e.push([to, from, n](const RunContext& ctx) { ops::cuda::copy(ctx, from.get(), to.get(), n); },
           {src.var}, {dst.var}, {.device = dst.device, .lane = Lane::compute, .name = name});
    return;
  }
#endif
  auto copy = [to, from, bytes] { std::memcpy(to.get(), from.get(), bytes); };
  if (dst.device.is_cpu()) {
    e.push(copy, {src.var}, {dst.var}, {.name = name});
  } else {
    e.push([copy](const RunContext& ctx) { ctx.stream->enqueue_host(copy); }, {src.var},
           {dst.var}, {.device = dst.device, .lane = Lane::compute, .name = name});
  }
}

}  // namespace

const depengine::Segment& Segment::ops() const { return data_of(data_, "nd::Segment::ops").ops; }

const std::vector<NDArray>& Segment::inputs() const {
  return data_of(data_, "nd::Segment::inputs").inputs;
}

Segment record(std::vector<NDArray> inputs, const std::function<void()>& fn) {
  if (!fn) throw Error("nd::record: the function is empty");
  Engine& e = current_engine();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Chunk& c = detail::require(inputs[i], "nd::record");
    if (c.engine != &e) {
      throw Error("nd::record: input " + std::to_string(i) +
                  " lives on another engine than the current one");
    }
  }
  auto d = std::make_shared<Segment::Data>();
  d->engine = &e;
  d->inputs = std::move(inputs);
  if (detail::t_recorded_chunks) throw Error("nd::record: records do not nest");
  detail::t_recorded_chunks = &d->kept;
  detail::t_recorded_generators = &d->generators;
  struct Stop {
    ~Stop() {
      detail::t_recorded_chunks = nullptr;
      detail::t_recorded_generators = nullptr;
    }
  } stop;
  d->ops = e.record(fn);
  auto dedup = [](auto& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  dedup(d->kept);
  dedup(d->generators);
  Segment s;
  s.data_ = std::move(d);
  return s;
}

void replay(const Segment& segment, const std::vector<NDArray>& inputs) {
  const Segment::Data& d = data_of(segment.data_, "nd::replay");
  if (inputs.size() != d.inputs.size()) {
    throw Error("nd::replay: " + std::to_string(inputs.size()) + " inputs given, the segment " +
                "was recorded with " + std::to_string(d.inputs.size()));
  }
  // Every input is checked before anything is pushed.
  std::vector<std::size_t> copies;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Chunk& c = detail::require(inputs[i], "nd::replay");
    const NDArray& recorded = d.inputs[i];
    const std::string which = "nd::replay: input " + std::to_string(i);
    if (inputs[i].shape() != recorded.shape()) {
      throw Error(which + " has shape " + shape_str(inputs[i].shape()) +
                  ", the segment was recorded with " + shape_str(recorded.shape()));
    }
    if (c.engine != d.engine) throw Error(which + " lives on another engine than the segment");
    if (c.device != recorded.device()) {
      throw Error(which + " is on " + c.device.str() + ", the segment was recorded on " +
                  recorded.device().str());
    }
    if (&c != ArrayInternals::chunk(recorded)) copies.push_back(i);
  }
  // Inputs are bound as a call binds its arguments, all to their values before the replay.
  // An input that is itself a recorded input which another copy overwrites (replay(seg,
  // {y, x}) swaps) would be read after that copy, in push order: it is snapshot first.
  std::vector<NDArray> sources(inputs);
  for (std::size_t i : copies) {
    const Chunk* src = ArrayInternals::chunk(inputs[i]);
    const bool overwritten = std::any_of(copies.begin(), copies.end(), [&](std::size_t j) {
      return ArrayInternals::chunk(d.inputs[j]) == src;
    });
    if (overwritten) sources[i] = nd::copy(inputs[i]);
  }
  for (std::size_t i : copies) {
    push_copy(*d.engine, *ArrayInternals::chunk(d.inputs[i]), *ArrayInternals::chunk(sources[i]),
              i);
  }
  d.engine->replay(d.ops);
}

void replay(const Segment& segment) {
  const Segment::Data& d = data_of(segment.data_, "nd::replay");
  d.engine->replay(d.ops);
}

}  // namespace depengine::nd
