// Engine::record and Engine::replay: the calling thread's pushes inside a region are kept,
// body and all, and pushed again on replay; a segment whose ops all sit on one GPU stream
// is replayed as one op that launches their work as one (docs/design.md, "Segments").
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "depengine/segment.h"
#include "device/device_backend.h"
#include "engine_core.h"
#include "op.h"

namespace depengine {
namespace detail {

// One recorded push. The body is shared between the push that recorded it and every
// replay, which call it through a SharedBody that fits in the op's inline storage.
struct RecordedOp {
  std::shared_ptr<OpFunction> body;
  bool async = false;
  PushOptions options;
  std::vector<Var> reads;
  std::vector<Var> writes;
};

struct SegmentData {
  std::uint64_t engine = 0;
  std::vector<RecordedOp> ops;
  std::size_t inputs = 0;
  std::size_t outputs = 0;
  // Every op synchronous and on one GPU stream (device, lane): a replay pushes one op that
  // reads `reads` and writes `writes` and launches the ops' work as one (see StreamGraph).
  bool one_stream = false;
  PushOptions stream_options;
  std::vector<Var> reads;
  std::vector<Var> writes;
  // Captured by the first replay on the stream's launcher thread; null when the stream
  // cannot capture, and then each replay enqueues the ops' work in order.
  mutable std::once_flag capture_once;
  mutable std::unique_ptr<StreamGraph> graph;
};

namespace {

// The segment the calling thread is recording, if any.
struct Recording {
  const EngineCore* core;
  std::shared_ptr<SegmentData> data;
  // The first call refused inside the region: record throws it even if `fn` caught it.
  std::string refused;
};
thread_local Recording* t_recording = nullptr;

class SharedBody final : public OpFunction {
 public:
  explicit SharedBody(const std::shared_ptr<OpFunction>& f) : f_(f) {}
  void call(const RunContext& ctx, Completion* done) override { f_->call(ctx, done); }

 private:
  std::shared_ptr<OpFunction> f_;
};

// The caller's callable built once into a block of its own, shared by the recorded op.
std::shared_ptr<OpFunction> make_shared_body(const BodyBuilder& body) {
  const std::align_val_t align{body.align};
  void* storage = ::operator new(body.size, align);
  OpFunction* fn = nullptr;
  try {
    fn = body.build(storage, body.callable);
  } catch (...) {
    ::operator delete(storage, align);
    throw;
  }
  return std::shared_ptr<OpFunction>(fn, [storage, align](OpFunction* f) {
    f->~OpFunction();
    ::operator delete(storage, align);
  });
}

// The body of a one-stream segment's replay: its ops' bodies, in order, on the stream the
// engine gives it, captured into a graph the first time when the stream can.
class StreamSegmentBody final : public OpFunction {
 public:
  explicit StreamSegmentBody(std::shared_ptr<const SegmentData> d) : d_(std::move(d)) {}
  void call(const RunContext& ctx, Completion*) override {
    auto& stream = static_cast<DeviceStream&>(*ctx.stream);
    std::call_once(d_->capture_once, [&] { d_->graph = stream.capture([&] { enqueue(ctx); }); });
    if (d_->graph) {
      d_->graph->launch();
    } else {
      enqueue(ctx);
    }
  }

 private:
  void enqueue(const RunContext& ctx) const {
    for (const RecordedOp& op : d_->ops) op.body->call(ctx, nullptr);
  }
  std::shared_ptr<const SegmentData> d_;
};

void push_recorded(EngineCore& core, const RecordedOp& op) {
  core.push_now(body_builder<SharedBody>(op.body), op.async, op.reads, op.writes, op.options);
}

// The boundary of a segment: vars its ops read before any of them writes the var (inputs)
// and vars they write (outputs).
void count_boundary(SegmentData& d) {
  std::unordered_set<const VarState*> written;
  std::unordered_set<const VarState*> inputs;
  for (const RecordedOp& op : d.ops) {
    for (const Var& v : op.reads) {
      if (!written.contains(v.state())) inputs.insert(v.state());
    }
    for (const Var& v : op.writes) written.insert(v.state());
  }
  d.inputs = inputs.size();
  d.outputs = written.size();
}

void find_one_stream(SegmentData& d) {
  if (d.ops.empty()) return;
  const PushOptions& first = d.ops.front().options;
  for (const RecordedOp& op : d.ops) {
    if (op.async || !op.options.device.is_gpu() || op.options.device != first.device ||
        op.options.lane != first.lane) {
      return;
    }
  }
  std::unordered_set<const VarState*> read, written;
  for (const RecordedOp& op : d.ops) {
    for (const Var& v : op.reads) {
      if (read.insert(v.state()).second) d.reads.push_back(v);
    }
    for (const Var& v : op.writes) {
      if (written.insert(v.state()).second) d.writes.push_back(v);
    }
  }
  d.one_stream = true;
  d.stream_options = PushOptions{.device = first.device, .lane = first.lane,
                                 .priority = first.priority,
                                 .name = "segment of " + std::to_string(d.ops.size()) + " ops"};
}

}  // namespace

bool EngineCore::recording_here() const noexcept {
  return t_recording != nullptr && t_recording->core == this && current_op() == nullptr;
}

void EngineCore::check_not_recording(const char* what) const {
  if (!recording_here()) return;
  std::string message = std::string("record: ") + what +
                        " inside a recorded region cannot be replayed (a replay never "
                        "waits or deletes; call it before or after record)";
  if (t_recording->refused.empty()) t_recording->refused = message;
  throw Error(message);
}

void EngineCore::record_push(const BodyBuilder& body, bool async, VarList reads,
                             VarList writes, PushOptions options) {
  RecordedOp op{make_shared_body(body), async, std::move(options),
                std::vector<Var>(reads.begin(), reads.end()),
                std::vector<Var>(writes.begin(), writes.end())};
  push_recorded(*this, op);
  t_recording->data->ops.push_back(std::move(op));
}

Segment EngineCore::record(void (*call)(void*), void* fn) {
  check_not_in_observer("record");
  check_not_in_op("record");
  if (t_recording != nullptr) {
    throw Error("record: this thread is already recording a segment (records do not nest)");
  }
  auto data = std::make_shared<SegmentData>();
  data->engine = id_;
  Recording rec{this, data, {}};
  t_recording = &rec;
  struct Stop {
    ~Stop() { t_recording = nullptr; }
  } stop;
  call(fn);
  if (!rec.refused.empty()) throw Error(rec.refused);
  count_boundary(*data);
  find_one_stream(*data);
  return Segment(std::move(data));
}

void EngineCore::replay(const Segment& segment) {
  check_not_in_observer("replay");
  const SegmentData* d = segment.data_.get();
  if (d == nullptr) throw Error("replay: the segment was not recorded (a default Segment)");
  if (d->engine != id_) throw Error("replay: the segment was recorded on another engine");
  const bool recording = recording_here();
  if (d->one_stream && !recording) {
    std::shared_ptr<const SegmentData> keep = segment.data_;
    push_now(body_builder<StreamSegmentBody>(std::move(keep)), false, d->reads, d->writes,
             d->stream_options);
    return;
  }
  for (const RecordedOp& op : d->ops) {
    push_recorded(*this, op);
    // Replayed inside a record region: the outer segment keeps the same ops.
    if (recording) t_recording->data->ops.push_back(op);
  }
}

}  // namespace detail

std::size_t Segment::size() const noexcept { return data_ ? data_->ops.size() : 0; }

std::vector<std::string> Segment::names() const {
  std::vector<std::string> out;
  if (!data_) return out;
  out.reserve(data_->ops.size());
  for (const detail::RecordedOp& op : data_->ops) out.push_back(op.options.name);
  return out;
}

std::size_t Segment::input_count() const noexcept { return data_ ? data_->inputs : 0; }
bool Segment::one_stream() const noexcept { return data_ && data_->one_stream; }
std::size_t Segment::output_count() const noexcept { return data_ ? data_->outputs : 0; }

}  // namespace depengine
