// Engine::record and Engine::replay: the calling thread's pushes inside a region are kept,
// body and all, and pushed again on replay; a segment whose ops all sit on one GPU stream
// is replayed as one op that launches their work as one (docs/design.md, "Segments").
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "depengine/segment.h"
#include "engine_core.h"
#include "op.h"
#include "segment_data.h"

namespace depengine {
namespace detail {

namespace {

// The segment the calling thread is recording, if any.
struct Recording {
  const EngineCore* core;
  std::shared_ptr<SegmentData> data;
  // The first call refused inside the region: record throws it even if `fn` caught it.
  std::string refused;
};
DEPENGINE_HOT_TLS thread_local Recording* t_recording = nullptr;

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
  core.push_now(body_builder<SharedBody>(op.body), op.async, op.reads, op.writes,
                PushOptions(op.options));
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

void build_plan(SegmentData& d) {
  ReplayPlan& p = d.plan;
  for (const RecordedOp& op : d.ops) {
    if (!op.options.device.is_cpu()) return;
    for (const Var& v : op.writes) {
      if (v.mode() != VarMode::plain) return;
    }
  }
  const auto n = static_cast<std::uint32_t>(d.ops.size());
  struct VarWalk {
    std::uint32_t gate;
    std::uint32_t last_write = UINT32_MAX;
    std::vector<std::uint32_t> reads_since;
  };
  std::unordered_map<VarState*, VarWalk> walks;
  std::vector<std::vector<std::uint32_t>> succ(n);
  std::vector<std::vector<std::uint32_t>> firsts;
  p.waits.assign(n, 0);
  p.acc_begin.push_back(0);
  for (std::uint32_t i = 0; i < n; ++i) {
    const RecordedOp& op = d.ops[i];
    const std::size_t begin = p.accesses.size();
    auto add = [&](VarState* v, AccessKind kind) {
      for (std::size_t k = begin; k < p.accesses.size(); ++k) {
        if (p.accesses[k].var != v) continue;
        if (p.accesses[k].kind != kind) p.accesses[k].kind = AccessKind::read_write;
        return;
      }
      auto [it, fresh] = walks.try_emplace(v);
      if (fresh) {
        it->second.gate = static_cast<std::uint32_t>(p.gates.size());
        p.gates.push_back({v, AccessKind::read, 0, 0, 0});
        firsts.emplace_back();
      }
      p.accesses.push_back({v, kind, it->second.gate});
    };
    for (const Var& v : op.writes) add(v.state(), AccessKind::write);
    for (const Var& v : op.reads) add(v.state(), AccessKind::read);
    // An edge p -> i: every edge into i is added while i is walked, so a duplicate is the
    // last successor of its source.
    auto edge = [&](std::uint32_t from) {
      if (!succ[from].empty() && succ[from].back() == i) return;
      succ[from].push_back(i);
      ++p.waits[i];
    };
    for (std::size_t k = begin; k < p.accesses.size(); ++k) {
      const ReplayPlan::PlanAccess& a = p.accesses[k];
      VarWalk& w = walks[a.var];
      ReplayPlan::Gate& g = p.gates[a.gate];
      ++g.users;
      auto after_gate = [&] {
        firsts[a.gate].push_back(i);
        ++p.waits[i];
      };
      if (!writes(a.kind)) {
        if (w.last_write == UINT32_MAX) {
          after_gate();
        } else {
          edge(w.last_write);
        }
        w.reads_since.push_back(i);
        continue;
      }
      g.kind = AccessKind::write;
      if (!w.reads_since.empty()) {
        for (std::uint32_t r : w.reads_since) edge(r);
      } else if (w.last_write != UINT32_MAX) {
        edge(w.last_write);
      } else {
        after_gate();
      }
      w.last_write = i;
      w.reads_since.clear();
    }
    p.acc_begin.push_back(static_cast<std::uint32_t>(p.accesses.size()));
  }
  p.succ_begin.push_back(0);
  for (const auto& s : succ) {
    p.succ.insert(p.succ.end(), s.begin(), s.end());
    p.succ_begin.push_back(static_cast<std::uint32_t>(p.succ.size()));
  }
  for (std::size_t g = 0; g < p.gates.size(); ++g) {
    p.gates[g].first_begin = static_cast<std::uint32_t>(p.firsts.size());
    p.firsts.insert(p.firsts.end(), firsts[g].begin(), firsts[g].end());
    p.gates[g].first_end = static_cast<std::uint32_t>(p.firsts.size());
  }
  p.usable = true;
}

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
  build_plan(*data);
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
             PushOptions(d->stream_options));
    return;
  }
  if (!recording && replay_fast(segment.data_)) return;
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
bool Segment::precomputed() const noexcept { return data_ && data_->plan.usable; }
std::size_t Segment::output_count() const noexcept { return data_ ? data_->outputs : 0; }

}  // namespace depengine
