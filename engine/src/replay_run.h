// The threaded engine's fast replay of a segment of plain CPU ops (ReplayPlan, in
// segment_data.h): one compound access per var (a gate) enters the var queues, and the
// segment's ops wait for their gates and their internal predecessors by counters. This
// unit builds a replay's ops and gates, and does the counting when a gate is granted and
// when a replayed op finishes; the engine registers the ops under its push lock (numbering,
// epochs, accounting) and queues the gates (threaded_engine.cc, replay_fast).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "op.h"
#include "ready_list.h"
#include "segment_data.h"

namespace depengine::detail {

// A var's compound access in one fast replay (ReplayPlan::Gate): queued in the var's queue
// like any access; granted, it releases the segment's first ops on the var; released when
// the last of the segment's ops on the var has finished.
// Aligned so that a var queue's word for it has room for the kind and the gate bit (Waiting).
struct alignas(Waiting::kFreeBits) ReplayGate : Access {
  ReplayGate() : Access{} {}
  ReplayRun* run = nullptr;
  std::uint32_t index = 0;
  std::atomic<std::uint32_t> left{0};  // the segment's ops on the var not yet finished
};

// One fast replay: its ops and gates, alive until its last op has finished (every gate has
// then been granted and released). The segment it keeps holds the plan and the vars.
struct ReplayRun {
  explicit ReplayRun(std::shared_ptr<const SegmentData> d);
  std::shared_ptr<const SegmentData> seg;
  const ReplayPlan& plan;
  std::unique_ptr<Op*[]> ops;
  std::unique_ptr<ReplayGate[]> gates;
  std::atomic<std::size_t> left;  // ops not yet finished
};

// Makes the ops of a replay of `seg` (usable plan) for `sink`, into `built` in segment
// order, and the run that orders them: each op waits for its plan's count of gates and
// internal predecessors, plus one hold of its own that the engine counts down once the op is
// registered. Nothing is registered or queued yet; a throw (bad_alloc) frees what was built.
std::unique_ptr<ReplayRun> build_replay(std::shared_ptr<const SegmentData> seg, OpSink* sink,
                                        std::vector<OpPtr>& built);

// A gate granted in its var's queue: the segment's first ops on the var lose one wait.
void grant_gate(const ReplayGate& gate, ReadyList& ready);

// Releases an access of `kind` to `v` in its var queue, collecting what that makes ready
// (`engine`: the engine's core, passed through).
using ReleaseAccess = void (*)(void* engine, VarState* v, AccessKind kind, ReadyList& ready);

// A finished op of a fast replay: its internal successors lose one predecessor, and the gate
// of each var it was the segment's last op on is released (`release`). The run is freed with
// its last op.
void release_replayed(Op& op, ReadyList& ready, ReleaseAccess release, void* engine);

}  // namespace depengine::detail
