// What Engine::record keeps (segment.cc) and what the threaded engine's fast replay reads
// (replay_run.h): the recorded ops, and for segments of plain CPU ops the internal edges
// between them (docs/design.md, "Segments").
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "depengine/engine.h"
#include "device/device_backend.h"
#include "op.h"

namespace depengine::detail {

// One recorded push. The body is shared between the push that recorded it and every
// replay, which call it through a SharedBody that fits in the op's inline storage.
struct RecordedOp {
  std::shared_ptr<OpFunction> body;
  bool async = false;
  PushOptions options;
  std::vector<Var> reads;
  std::vector<Var> writes;
};

// Calls a recorded body; keeps it alive for as long as the op that holds it (an async body
// may still be running when its op finishes).
class SharedBody final : public OpFunction {
 public:
  explicit SharedBody(const std::shared_ptr<OpFunction>& f) : f_(f) {}
  void call(const RunContext& ctx, Completion* done) override { f_->call(ctx, done); }

 private:
  std::shared_ptr<OpFunction> f_;
};

// The internal edges of a segment, computed once at record time, so that a replay meets the
// engine's var queues only once per var (one compound access, a "gate") and releases the
// segment's ops among themselves by counters. Edges are the ones the var queues would
// impose (RAW, WAR, WAW per var): a read waits for the var's last earlier write in the
// segment, a write for the reads since that write (or the write itself when none); an op
// with no earlier op on the var waits for the var's gate instead.
struct ReplayPlan {
  // One access of one op, duplicates merged as Op::set_accesses merges them.
  struct PlanAccess {
    VarState* var;
    AccessKind kind;
    std::uint32_t gate;  // index into gates
  };
  // A var the segment touches: one compound access in its queue, a write when some op
  // writes the var, else a read; granted, it releases `first` ops; released when the last
  // of its `users` ops finishes.
  struct Gate {
    VarState* var;
    AccessKind kind;
    std::uint32_t users;
    std::uint32_t first_begin, first_end;  // into firsts
  };
  // False when a replay takes the per-op path instead: some op has a commute or reduce
  // access or runs on a GPU.
  bool usable = false;
  std::vector<PlanAccess> accesses;       // op i's: [acc_begin[i], acc_begin[i + 1])
  std::vector<std::uint32_t> acc_begin;
  std::vector<std::uint32_t> succ;        // op i's internal successors, deduplicated
  std::vector<std::uint32_t> succ_begin;  // op i's: [succ_begin[i], succ_begin[i + 1])
  std::vector<std::uint32_t> waits;       // op i's internal predecessors + gates it waits for
  std::vector<Gate> gates;
  std::vector<std::uint32_t> firsts;
};

struct SegmentData;

// Fills `d.plan` from `d.ops`: the internal edges of a segment of plain CPU ops, each var's
// accesses taken in recording order as its queue would take them, accesses merged per op as
// Op::set_accesses merges them (a var listed twice counts once, one in both lists is a
// read-write). Leaves the plan unusable when an op has a commute or reduce access or runs
// on a GPU.
void build_plan(SegmentData& d);

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
  // The threaded engine's fast replay of CPU segments.
  ReplayPlan plan;
};

}  // namespace depengine::detail
