// Engine::record and Engine::replay: the calling thread's pushes inside a region are kept,
// body and all, and pushed again on replay (docs/design.md, "Segments").
#include <memory>
#include <new>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "depengine/segment.h"
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
  return Segment(std::move(data));
}

void EngineCore::replay(const Segment& segment) {
  check_not_in_observer("replay");
  const SegmentData* d = segment.data_.get();
  if (d == nullptr) throw Error("replay: the segment was not recorded (a default Segment)");
  if (d->engine != id_) throw Error("replay: the segment was recorded on another engine");
  const bool recording = recording_here();
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
std::size_t Segment::output_count() const noexcept { return data_ ? data_->outputs : 0; }

}  // namespace depengine
