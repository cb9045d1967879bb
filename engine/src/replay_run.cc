#include "replay_run.h"

#include "invariant.h"

namespace depengine::detail {

ReplayRun::ReplayRun(std::shared_ptr<const SegmentData> d)
    : seg(std::move(d)),
      plan(seg->plan),
      ops(std::make_unique<Op*[]>(seg->ops.size())),
      gates(std::make_unique<ReplayGate[]>(plan.gates.size())),
      left(seg->ops.size()) {}

std::unique_ptr<ReplayRun> build_replay(std::shared_ptr<const SegmentData> seg, OpSink* sink,
                                        std::vector<OpPtr>& built) {
  auto run = std::make_unique<ReplayRun>(std::move(seg));
  const ReplayPlan& plan = run->plan;
  const std::size_t n = run->seg->ops.size();
  built.reserve(built.size() + n);
  for (std::size_t i = 0; i < n; ++i) {
    const RecordedOp& rec = run->seg->ops[i];
    OpPtr op(new Op(sink, rec.async ? OpKind::async_body : OpKind::body,
                    PushOptions(rec.options)));
    op->set_body(body_builder<SharedBody>(rec.body));
    const std::uint32_t b = plan.acc_begin[i], e = plan.acc_begin[i + 1];
    op->acc.resize(e - b);
    for (std::uint32_t k = b; k < e; ++k) {
      const ReplayPlan::PlanAccess& pa = plan.accesses[k];
      op->acc[k - b] = make_access(pa.var, op.get(), pa.kind);
    }
    op->wait.store(static_cast<int>(plan.waits[i]) + 1, std::memory_order_relaxed);
    op->replay = run.get();
    op->replay_index = static_cast<std::uint32_t>(i);
    run->ops[i] = op.get();
    built.push_back(std::move(op));
  }
  for (std::size_t g = 0; g < plan.gates.size(); ++g) {
    ReplayGate& gate = run->gates[g];
    gate.var = plan.gates[g].var;
    gate.kind = plan.gates[g].kind;
    gate.gate = true;
    gate.run = run.get();
    gate.index = static_cast<std::uint32_t>(g);
    gate.left.store(plan.gates[g].users, std::memory_order_relaxed);
  }
  return run;
}

void grant_gate(const ReplayGate& gate, ReadyList& ready) {
  const ReplayRun& run = *gate.run;
  const ReplayPlan::Gate& pg = run.plan.gates[gate.index];
  for (std::uint32_t k = pg.first_begin; k < pg.first_end; ++k) {
    count_down(run.ops[run.plan.firsts[k]], ready);
  }
}

void release_replayed(Op& op, ReadyList& ready, ReleaseAccess release, void* engine) {
  ReplayRun* run = op.replay;
  const ReplayPlan& plan = run->plan;
  const std::uint32_t i = op.replay_index;
  for (std::uint32_t k = plan.succ_begin[i]; k < plan.succ_begin[i + 1]; ++k) {
    count_down(run->ops[plan.succ[k]], ready);
  }
  for (std::uint32_t k = plan.acc_begin[i]; k < plan.acc_begin[i + 1]; ++k) {
    ReplayGate& g = run->gates[plan.accesses[k].gate];
    const std::uint32_t left = g.left.fetch_sub(1, std::memory_order_acq_rel);
    DEPENGINE_INVARIANT(left >= 1, "a replay gate's count of unfinished ops went negative");
    if (left == 1) release(engine, g.var, g.kind, ready);
  }
  op.replay = nullptr;
  if (run->left.fetch_sub(1, std::memory_order_acq_rel) == 1) delete run;
}

}  // namespace depengine::detail
