// The workload generator's shapes (graphfile.h), as the command line, the engine scenarios and
// the peers benchmark use them: sizes, dependency structure (span with unit costs), and the
// plain runner pushing exactly the program's dependencies.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "depengine/engine.h"
#include "depengine/graph.h"
#include "graphfile.h"
#include "scenarios.h"

namespace {

namespace gf = depengine::graphfile;

depengine::GraphAnalysis unit(const gf::Program& p) {
  return depengine::analyze(gf::to_graph(p), {.unit_costs = true});
}

TEST(InspectGenerate, ChainsAreIndependentColumns) {
  const gf::Program p = gf::generate_chain(3, 5, 0);
  EXPECT_EQ(p.ops.size(), 15u);
  EXPECT_EQ(p.vars.size(), 3u);
  EXPECT_EQ(unit(p).span, 5);
  EXPECT_EQ(unit(p).max_width, 3u);
}

TEST(InspectGenerate, IndependentOpsHaveNoEdges) {
  const gf::Program p = gf::generate_independent(7, 0);
  EXPECT_EQ(p.ops.size(), 7u);
  EXPECT_EQ(unit(p).edges, 0u);
}

TEST(InspectGenerate, FanBlocksWriteReadWrite) {
  const gf::Program p = gf::generate_fan(2 * (gf::kFanReads + 2), 0);
  EXPECT_EQ(p.vars.size(), 1u + gf::kFanReads);
  const depengine::GraphAnalysis a = unit(p);
  EXPECT_EQ(a.span, 6);  // write, the reads, write; twice
  EXPECT_EQ(a.max_width, static_cast<std::size_t>(gf::kFanReads));
  // A cut block: 3 ops are a write and two reads.
  EXPECT_EQ(unit(gf::generate_fan(3, 0)).span, 2);
}

TEST(InspectGenerate, GridPatternsReadTheirNeighbours) {
  // Every op of a step reads the points of the previous step's buffer its pattern names.
  const gf::Program stencil = gf::generate_grid(gf::GridPattern::stencil, 8, 3, 0);
  EXPECT_EQ(stencil.ops.size(), 24u);
  EXPECT_EQ(stencil.ops[0].reads.size(), 2u);  // point 0: itself and point 1
  EXPECT_EQ(stencil.ops[3].reads.size(), 3u);
  EXPECT_EQ(gf::generate_grid(gf::GridPattern::nearest, 16, 2, 0).ops[8].reads.size(), 5u);
  EXPECT_EQ(gf::generate_grid(gf::GridPattern::spread, 16, 2, 0).ops[8].reads.size(), 5u);
  const gf::Program fft = gf::generate_grid(gf::GridPattern::fft, 16, 4, 0);
  for (const gf::OpSpec& op : fft.ops) EXPECT_EQ(op.reads.size(), 2u) << op.name;
  EXPECT_EQ(unit(fft).span, 4);
  EXPECT_THROW(gf::generate_grid(gf::GridPattern::fft, 12, 2, 0), std::invalid_argument);
  // The stencil of `depengine generate` is the same grid after a row of init ops.
  const gf::Program with_init = gf::generate_stencil(8, 3, 0);
  ASSERT_EQ(with_init.ops.size(), 8u + stencil.ops.size());
  for (std::size_t k = 0; k < stencil.ops.size(); ++k) {
    EXPECT_EQ(with_init.ops[8 + k].name, stencil.ops[k].name);
    EXPECT_EQ(with_init.ops[8 + k].reads.size(), stencil.ops[k].reads.size());
  }
}

TEST(InspectGenerate, TreeRoundsFollowTheRoot) {
  const gf::Program once = gf::generate_tree(4, 0);
  EXPECT_EQ(once.ops.size(), 7u);
  EXPECT_EQ(unit(once).span, 3);
  const gf::Program thrice = gf::generate_tree(4, 0, 3);
  EXPECT_EQ(thrice.ops.size(), 21u);
  EXPECT_EQ(thrice.vars.size(), once.vars.size());
  EXPECT_EQ(unit(thrice).span, 9);  // each round's leaves wait for the last root
  for (std::size_t k = 0; k < once.ops.size(); ++k) EXPECT_EQ(thrice.ops[k].name, once.ops[k].name);
}

TEST(InspectGenerate, CholeskyRepeatsFactorTheSameTiles) {
  const gf::Program once = gf::generate_cholesky(3, 0);
  const gf::Program twice = gf::generate_cholesky(3, 0, 2);
  EXPECT_EQ(once.ops.size(), 10u);
  EXPECT_EQ(twice.ops.size(), 20u);
  EXPECT_EQ(twice.vars.size(), once.vars.size());
  // The second factorization waits for the first one's writes (it overlaps its tail).
  EXPECT_GT(unit(twice).span, unit(once).span);
  EXPECT_EQ(twice.ops[10].name, "potrf_r1_0");
  EXPECT_THROW(gf::generate_cholesky(64, 0, 1000), std::invalid_argument);
}

TEST(InspectGenerate, ScenarioShapes) {
  namespace b = depengine::bench;
  EXPECT_EQ(unit(b::scenario_program(b::Shape::chain, 50, 0)).span, 50);
  EXPECT_EQ(unit(b::scenario_program(b::Shape::independent, 50, 0)).edges, 0u);
  const gf::Program random = b::scenario_program(b::Shape::random_dag, 500, 0, 7);
  EXPECT_EQ(random.ops.size(), 500u);
  for (const gf::OpSpec& op : random.ops) {
    EXPECT_EQ(op.reads.size(), 2u);
    EXPECT_EQ(op.writes.size(), 1u);
  }
  EXPECT_EQ(b::scenario_program(b::Shape::fan, 1002, 0).vars.size(), 1001u);
  EXPECT_THROW(b::parse_shape("zigzag"), depengine::Error);
}

// run_plain pushes each op with exactly its program's reads and writes: the graph the
// engine records is the program's own.
TEST(InspectGenerate, PlainRunPushesTheProgramsDependencies) {
  for (const char* kind : {"naive", "threaded"}) {
    for (const gf::Program& p :
         {gf::generate_cholesky(4, 0), gf::generate_random(300, 40, 2, 1, 3, 0),
          gf::generate_fan(1500, 0)}) {
      auto engine = depengine::Engine::create(kind, {.cpu_threads = 2});
      auto recorder = std::make_shared<depengine::GraphRecorder>();
      engine->set_observer(recorder);
      EXPECT_GE(gf::run_plain(*engine, p), 0.0);
      engine->set_observer(nullptr);
      const depengine::Graph recorded = recorder->graph();
      const depengine::Graph expected = gf::to_graph(p);
      EXPECT_EQ(recorded.node_count(), expected.node_count()) << kind;
      EXPECT_EQ(recorded.edge_count(), expected.edge_count()) << kind;
      EXPECT_EQ(depengine::analyze(recorded, {.unit_costs = true}).span,
                depengine::analyze(expected, {.unit_costs = true}).span)
          << kind;
    }
  }
}

}  // namespace
