// Direct tests of the replay plan (segment_data.h, build_plan): the internal edges a fast
// replay releases its ops by, and of the run that counts them down (replay_run.h), without
// an engine. What replays compute is in segment_test.cc.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "replay_run.h"
#include "segment_data.h"

namespace depengine::detail {
namespace {

constexpr std::uint64_t kOwner = 1;

struct Plan {
  SegmentData d;
  void op(std::vector<Var> reads, std::vector<Var> writes, PushOptions o = {}) {
    d.ops.push_back(RecordedOp{nullptr, false, std::move(o), std::move(reads), std::move(writes)});
  }
  const ReplayPlan& build() {
    build_plan(d);
    return d.plan;
  }
};

std::vector<std::uint32_t> successors(const ReplayPlan& p, std::uint32_t i) {
  return {p.succ.begin() + p.succ_begin[i], p.succ.begin() + p.succ_begin[i + 1]};
}

std::vector<std::uint32_t> firsts(const ReplayPlan& p, std::uint32_t gate) {
  const ReplayPlan::Gate& g = p.gates[gate];
  return {p.firsts.begin() + g.first_begin, p.firsts.begin() + g.first_end};
}

using Ids = std::vector<std::uint32_t>;

TEST(ReplayPlan, AChainIsReleasedOpByOp) {
  Var v(new_var_state(kOwner));
  Plan plan;
  for (int i = 0; i < 3; ++i) plan.op({v}, {v});
  const ReplayPlan& p = plan.build();
  ASSERT_TRUE(p.usable);
  ASSERT_EQ(p.gates.size(), 1u);
  EXPECT_EQ(p.gates[0].kind, AccessKind::write);
  EXPECT_EQ(p.gates[0].users, 3u);
  EXPECT_EQ(firsts(p, 0), Ids{0});
  EXPECT_EQ(successors(p, 0), Ids{1});
  EXPECT_EQ(successors(p, 1), Ids{2});
  EXPECT_TRUE(successors(p, 2).empty());
  EXPECT_EQ(p.waits, (Ids{1, 1, 1}));
  // One merged access each: the var is in both lists.
  EXPECT_EQ(p.acc_begin, (Ids{0, 1, 2, 3}));
  EXPECT_EQ(p.accesses[0].kind, AccessKind::read_write);
}

// RAW: reads wait for the write before them; WAR: the next write waits for every read
// since; the reads between run together.
TEST(ReplayPlan, ReadsWaitForTheWriteAndTheNextWriteForTheReads) {
  Var v(new_var_state(kOwner)), a(new_var_state(kOwner)), b(new_var_state(kOwner));
  Plan plan;
  plan.op({}, {v});   // 0
  plan.op({v}, {a});  // 1
  plan.op({v}, {b});  // 2
  plan.op({}, {v});   // 3
  const ReplayPlan& p = plan.build();
  ASSERT_TRUE(p.usable);
  EXPECT_EQ(successors(p, 0), (Ids{1, 2}));
  EXPECT_EQ(successors(p, 1), Ids{3});
  EXPECT_EQ(successors(p, 2), Ids{3});
  // Ops 1 and 2 also wait for the gates of a and b, which nothing earlier in the segment
  // writes.
  EXPECT_EQ(p.waits, (Ids{1, 2, 2, 2}));
  ASSERT_EQ(p.gates.size(), 3u);
  EXPECT_EQ(firsts(p, p.accesses[0].gate), Ids{0});
  EXPECT_EQ(p.gates[p.accesses[0].gate].users, 4u);
}

// A var that the segment only reads has a read gate, and every reader starts from it.
TEST(ReplayPlan, AVarOnlyReadHasAReadGateReleasingEveryReader) {
  Var u(new_var_state(kOwner)), x(new_var_state(kOwner)), y(new_var_state(kOwner));
  Plan plan;
  plan.op({u}, {x});
  plan.op({u}, {y});
  const ReplayPlan& p = plan.build();
  ASSERT_TRUE(p.usable);
  const std::uint32_t gu = p.accesses[1].gate;  // op 0: x written first, then u read
  EXPECT_EQ(p.gates[gu].var, u.state());
  EXPECT_EQ(p.gates[gu].kind, AccessKind::read);
  EXPECT_EQ(firsts(p, gu), (Ids{0, 1}));
  EXPECT_TRUE(successors(p, 0).empty());
  EXPECT_EQ(p.waits, (Ids{2, 2}));
}

// An edge found twice (an op reading two vars the same op wrote) counts once.
TEST(ReplayPlan, DuplicateEdgesAndVarsCountOnce) {
  Var v(new_var_state(kOwner)), w(new_var_state(kOwner));
  Plan plan;
  plan.op({}, {v, w});
  plan.op({v, w, v}, {});
  const ReplayPlan& p = plan.build();
  ASSERT_TRUE(p.usable);
  EXPECT_EQ(successors(p, 0), Ids{1});
  EXPECT_EQ(p.waits, (Ids{2, 1}));
  EXPECT_EQ(p.acc_begin, (Ids{0, 2, 4}));
}

TEST(ReplayPlan, CommuteReduceAndGpuOpsLeaveItToTheOpByOpPath) {
  Var v(new_var_state(kOwner));
  {
    Plan plan;
    plan.op({}, {v});
    plan.op({}, {commute(v)});
    EXPECT_FALSE(plan.build().usable);
  }
  {
    Plan plan;
    plan.op({}, {reduce(v)});
    EXPECT_FALSE(plan.build().usable);
  }
  {
    Plan plan;
    plan.op({}, {v}, {.device = Device::gpu(0)});
    EXPECT_FALSE(plan.build().usable);
  }
}

// A replay run releases its ops in the plan's order: nothing before its gate is granted and
// each op's own hold is gone; then op by op along the edges; each gate is released once, by
// the segment's last op on its var.
// The engine's release of a gate, recorded in the list passed through as the engine.
struct GateReleases {
  static inline std::vector<std::pair<VarState*, AccessKind>> seen;
  static void release(void* engine, VarState* v, AccessKind kind, ReadyList&) {
    static_cast<std::vector<std::pair<VarState*, AccessKind>>*>(engine)->emplace_back(v, kind);
  }
};

// A ReadyList for a few ops: these tests make fewer ready at once than it holds.
void never_flushed(void*, Op* const*, std::size_t) {
  ADD_FAILURE() << "a ReadyList of a few ops was flushed";
}

std::vector<Op*> ops_of(const ReadyList& ready) {
  std::vector<Op*> out;
  ready.for_each([&](Op* op) { out.push_back(op); });
  return out;
}

TEST(ReplayRun, CountsDownAlongThePlanAndReleasesEachGateOnce) {
  Var v(new_var_state(kOwner)), a(new_var_state(kOwner)), b(new_var_state(kOwner));
  auto d = std::make_shared<SegmentData>();
  auto op = [&](std::vector<Var> reads, std::vector<Var> writes) {
    d->ops.push_back(RecordedOp{nullptr, false, {}, std::move(reads), std::move(writes)});
  };
  op({}, {v});   // 0
  op({v}, {a});  // 1
  op({v}, {b});  // 2
  build_plan(*d);
  ASSERT_TRUE(d->plan.usable);
  std::vector<OpPtr> built;
  std::unique_ptr<ReplayRun> run = build_replay(d, nullptr, built);
  ASSERT_EQ(built.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(built[i]->replay, run.get());
    EXPECT_EQ(built[i]->replay_index, i);
  }
  std::vector<Op*> ops;
  ReplayRun* raw_run = run.release();  // freed with its last op below
  ReadyList held(never_flushed, nullptr);
  for (OpPtr& o : built) {
    ops.push_back(o.get());
    count_down(o.release(), held);  // the engine's hold, once registered
  }
  EXPECT_TRUE(ops_of(held).empty()) << "no op is ready before its gates are granted";
  // Granting v's gate releases op 0 only; a's and b's gates release ops 1 and 2 by one
  // wait each, which they still need op 0 for.
  const ReplayPlan& p = d->plan;
  ReadyList ready(never_flushed, nullptr);
  for (std::size_t g = 0; g < p.gates.size(); ++g) grant_gate(raw_run->gates[g], ready);
  EXPECT_EQ(ops_of(ready), std::vector<Op*>{ops[0]});
  GateReleases::seen.clear();
  ReadyList after0(never_flushed, nullptr);
  release_replayed(*ops[0], after0, &GateReleases::release, &GateReleases::seen);
  EXPECT_EQ(ops_of(after0), (std::vector<Op*>{ops[1], ops[2]}));
  EXPECT_TRUE(GateReleases::seen.empty()) << "v's gate stays until its last op finishes";
  ReadyList after1(never_flushed, nullptr);
  release_replayed(*ops[1], after1, &GateReleases::release, &GateReleases::seen);
  EXPECT_TRUE(ops_of(after1).empty());
  ASSERT_EQ(GateReleases::seen.size(), 1u);
  EXPECT_EQ(GateReleases::seen[0].first, a.state());
  ReadyList after2(never_flushed, nullptr);
  release_replayed(*ops[2], after2, &GateReleases::release, &GateReleases::seen);  // frees the run
  // Op 2 was the last on v (its gate a write: op 0 writes v) and on b, in either order.
  ASSERT_EQ(GateReleases::seen.size(), 3u);
  std::vector<std::pair<VarState*, AccessKind>> last(GateReleases::seen.begin() + 1,
                                                     GateReleases::seen.end());
  std::sort(last.begin(), last.end());
  std::vector<std::pair<VarState*, AccessKind>> want{{v.state(), AccessKind::write},
                                                     {b.state(), AccessKind::write}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(last, want);
  for (Op* o : ops) {
    EXPECT_EQ(o->replay, nullptr);
    o->release();
  }
}

}  // namespace
}  // namespace depengine::detail
