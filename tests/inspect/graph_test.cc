// The graph recorder and analysis: edges exactly as the contract orders accesses, and known
// graphs with known work, span and widths.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "depengine/engine.h"
#include "depengine/error.h"
#include "depengine/graph.h"
#include "graphfile.h"

namespace {

using depengine::AccessMode;
using depengine::DepKind;
using depengine::Graph;
using depengine::GraphEdge;
using depengine::OpInfo;
using depengine::VarAccess;

// (from, to, kind, var) of every edge, as a sorted set.
using EdgeKey = std::tuple<std::size_t, std::size_t, DepKind, std::uint64_t>;
std::set<EdgeKey> edge_set(const std::vector<GraphEdge>& edges) {
  std::set<EdgeKey> s;
  for (const GraphEdge& e : edges) s.emplace(e.from, e.to, e.kind, e.var);
  return s;
}

// Adds op `id` with the given accesses (versions as the engine would number them).
struct Program {
  Graph g;
  std::map<std::uint64_t, std::uint64_t> versions;
  std::uint64_t next = 0;
  std::size_t op(std::vector<std::pair<std::uint64_t, AccessMode>> acc, double cost = 1) {
    std::vector<VarAccess> a;
    for (auto [var, mode] : acc) {
      const std::uint64_t v = mode == AccessMode::read ? versions[var] : ++versions[var];
      a.push_back({var, v, mode});
    }
    const std::string name = "op" + std::to_string(next);
    return g.add_op(OpInfo{next++, name, {}, {}, 0, a}, cost);
  }
};

depengine::GraphNode node(std::uint64_t id, std::string name) {
  depengine::GraphNode n;
  n.id = id;
  n.name = std::move(name);
  return n;
}

constexpr auto R = AccessMode::read;
constexpr auto W = AccessMode::write;
constexpr auto RW = AccessMode::read_write;

// Contract point 2: a read waits for the last earlier write (RAW).
TEST(InspectGraph, ReadAfterWriteGivesRawEdge) {
  Program p;
  p.op({{1, W}});
  p.op({{1, R}});
  EXPECT_EQ(edge_set(p.g.edges()), (std::set<EdgeKey>{{0, 1, DepKind::raw, 1}}));
  EXPECT_EQ(p.g.edges()[0].version, 1u);
}

// Reads of one version run concurrently: no edges among them; the next write waits for
// each read (WAR) and for the write before (WAW).
TEST(InspectGraph, ReadsOfOneVersionAreConcurrentAndTheNextWriteWaitsForAll) {
  Program p;
  p.op({{1, W}});
  p.op({{1, R}});
  p.op({{1, R}});
  p.op({{1, W}});
  EXPECT_EQ(edge_set(p.g.edges()), (std::set<EdgeKey>{{0, 1, DepKind::raw, 1},
                                                      {0, 2, DepKind::raw, 1},
                                                      {1, 3, DepKind::war, 1},
                                                      {2, 3, DepKind::war, 1},
                                                      {0, 3, DepKind::waw, 1}}));
  // The WAW edge is implied by the RAW + WAR paths, so the reduction drops it.
  EXPECT_EQ(edge_set(p.g.reduced_edges()), (std::set<EdgeKey>{{0, 1, DepKind::raw, 1},
                                                              {0, 2, DepKind::raw, 1},
                                                              {1, 3, DepKind::war, 1},
                                                              {2, 3, DepKind::war, 1}}));
}

TEST(InspectGraph, WriteAfterWriteGivesWawEdge) {
  Program p;
  p.op({{1, W}});
  p.op({{1, W}});
  EXPECT_EQ(edge_set(p.g.edges()), (std::set<EdgeKey>{{0, 1, DepKind::waw, 1}}));
}

TEST(InspectGraph, WriteAfterReadOfInitialVersionGivesWarEdge) {
  Program p;
  p.op({{1, R}});
  p.op({{1, W}});
  EXPECT_EQ(edge_set(p.g.edges()), (std::set<EdgeKey>{{0, 1, DepKind::war, 1}}));
  EXPECT_EQ(p.g.edges()[0].version, 0u);
}

// A var in both lists is one read-write access: RAW from the last writer, WAR from the
// readers since; no second WAW edge for the same pair.
TEST(InspectGraph, ReadWriteAccessIsOrderedAsAWrite) {
  Program p;
  p.op({{1, W}});
  p.op({{1, R}, {2, W}});
  p.op({{1, RW}});
  p.op({{1, R}});
  EXPECT_EQ(edge_set(p.g.edges()), (std::set<EdgeKey>{{0, 1, DepKind::raw, 1},
                                                      {0, 2, DepKind::raw, 1},
                                                      {1, 2, DepKind::war, 1},
                                                      {2, 3, DepKind::raw, 1}}));
}

// Issue 14: the ops of a commute (or reduce) run get no edges among themselves; each waits
// for the accesses before the run, and the next access of another mode waits for all of
// them (RAW for a reader, WAW for a writer or the next run of reduce accesses).
TEST(InspectGraph, CommuteAndReduceRunsAreUnorderedInside) {
  constexpr auto C = AccessMode::commute;
  constexpr auto RED = AccessMode::reduce;
  Program p;
  p.op({{1, W}});    // 0
  p.op({{1, R}});    // 1
  p.op({{1, C}});    // 2
  p.op({{1, C}});    // 3
  p.op({{1, RED}});  // 4: a new run
  p.op({{1, RED}});  // 5
  p.op({{1, RW}});   // 6: as the engine's reduce_combine
  EXPECT_EQ(edge_set(p.g.edges()), (std::set<EdgeKey>{{0, 1, DepKind::raw, 1},
                                                      {0, 2, DepKind::raw, 1},
                                                      {0, 3, DepKind::raw, 1},
                                                      {1, 2, DepKind::war, 1},
                                                      {1, 3, DepKind::war, 1},
                                                      {2, 4, DepKind::waw, 1},
                                                      {3, 4, DepKind::waw, 1},
                                                      {2, 5, DepKind::waw, 1},
                                                      {3, 5, DepKind::waw, 1},
                                                      {4, 6, DepKind::raw, 1},
                                                      {5, 6, DepKind::raw, 1}}));
  const std::string dot = p.g.to_dot();
  EXPECT_NE(dot.find("(commute)"), std::string::npos);
  EXPECT_NE(dot.find("(reduce)"), std::string::npos);
  const Graph back = Graph::from_json(p.g.to_json());
  EXPECT_EQ(back.node(2).accesses[0].mode, C);
  EXPECT_EQ(back.node(4).accesses[0].mode, RED);
}

TEST(InspectGraph, IndependentVarsGiveNoEdges) {
  Program p;
  p.op({{1, W}});
  p.op({{2, W}});
  p.op({{3, R}});
  EXPECT_EQ(p.g.edge_count(), 0u);
}

// The recorder attached to real engines sees the same graph as the offline derivation from
// the graph file, for a program with every kind of dependency.
class InspectRecorder : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(InspectRecorder, RecordedGraphEqualsTheDerivedOne) {
  const auto [kind, threads] = GetParam();
  namespace gf = depengine::graphfile;
  const gf::Program program = gf::generate_random(300, 20, 2, 1, 7, 0);
  auto engine = depengine::Engine::create(kind, {.cpu_threads = threads});
  auto rec = std::make_shared<depengine::GraphRecorder>();
  engine->set_observer(rec);
  gf::run(*engine, program, rec.get());
  engine.reset();
  const Graph recorded = rec->graph();
  const Graph derived = gf::to_graph(program);
  ASSERT_EQ(recorded.node_count(), derived.node_count());
  // Compare by op names and var names, since ids differ.
  auto named = [](const Graph& g) {
    std::set<std::tuple<std::string, std::string, DepKind, std::string>> s;
    for (const GraphEdge& e : g.edges()) {
      s.emplace(g.node(e.from).name, g.node(e.to).name, e.kind, g.var_name(e.var));
    }
    return s;
  };
  EXPECT_EQ(named(recorded), named(derived));
  for (std::size_t i = 0; i < recorded.node_count(); ++i) {
    EXPECT_EQ(recorded.node(i).name, derived.node(i).name);
    EXPECT_EQ(recorded.node(i).accesses.size(), derived.node(i).accesses.size());
    EXPECT_GE(recorded.node(i).cost_us, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, InspectRecorder,
                         ::testing::Values(std::make_tuple("naive", 1),
                                           std::make_tuple("threaded", 1),
                                           std::make_tuple("threaded", 2),
                                           std::make_tuple("threaded", 3)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param)) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

TEST(InspectRecorder, MeasuresOpTimes) {
  auto engine = depengine::Engine::create("threaded", {.cpu_threads = 2});
  auto rec = std::make_shared<depengine::GraphRecorder>();
  engine->set_observer(rec);
  depengine::Var a = engine->new_var();
  engine->push([] { depengine::graphfile::spin_for_us(2000); }, {}, {a}, {.name = "slow"});
  engine->wait_all();
  const Graph g = rec->graph();
  ASSERT_EQ(g.node_count(), 1u);
  EXPECT_EQ(g.node(0).name, "slow");
  EXPECT_GE(g.node(0).cost_us, 2000);
}

TEST(InspectAnalysis, ChainSpanEqualsWork) {
  Program p;
  for (int i = 0; i < 10; ++i) p.op({{1, RW}}, 1 + i);
  const auto a = depengine::analyze(p.g);
  EXPECT_DOUBLE_EQ(a.work, 55);
  EXPECT_DOUBLE_EQ(a.span, 55);
  EXPECT_DOUBLE_EQ(a.parallelism, 1);
  EXPECT_EQ(a.critical_path.size(), 10u);
  EXPECT_EQ(a.level_width, std::vector<std::size_t>(10, 1));
}

TEST(InspectAnalysis, IndependentOpsHaveSpanOfTheLargestCost) {
  Program p;
  for (int i = 0; i < 8; ++i) p.op({{static_cast<std::uint64_t>(i + 1), W}}, i == 5 ? 50 : 10);
  const auto a = depengine::analyze(p.g);
  EXPECT_DOUBLE_EQ(a.work, 120);
  EXPECT_DOUBLE_EQ(a.span, 50);
  EXPECT_EQ(a.critical_path_names, std::vector<std::string>{"op5"});
  EXPECT_EQ(a.level_width, std::vector<std::size_t>{8});
  EXPECT_EQ(a.max_width, 8u);
}

TEST(InspectAnalysis, EmptyGraph) {
  const auto a = depengine::analyze(Graph{});
  EXPECT_EQ(a.ops, 0u);
  EXPECT_EQ(a.span, 0);
  EXPECT_EQ(a.parallelism, 0);
  EXPECT_TRUE(a.critical_path.empty());
}

TEST(InspectAnalysis, CycleIsAnError) {
  Graph g;
  g.add_node(node(1, "a"));
  g.add_node(node(2, "b"));
  g.add_edge({0, 1, DepKind::raw, 1, 1});
  g.add_edge({1, 0, DepKind::raw, 1, 2});
  EXPECT_THROW(depengine::analyze(g), depengine::Error);
  EXPECT_THROW(g.add_edge({0, 0, DepKind::raw, 1, 1}), depengine::Error);
  EXPECT_THROW(g.add_edge({0, 7, DepKind::raw, 1, 1}), depengine::Error);
  EXPECT_THROW(g.add_node(node(1, "again")), depengine::Error);
}

// Tiled Cholesky with T tiles: T(T+1)(T+2)/6 ops and a unit-cost span of 3T-2.
TEST(InspectAnalysis, TiledCholeskyOpsAndSpan) {
  for (int t = 1; t <= 10; ++t) {
    const Graph g = depengine::graphfile::to_graph(depengine::graphfile::generate_cholesky(t, 5));
    const auto a = depengine::analyze(g, {.unit_costs = true});
    EXPECT_EQ(a.ops, static_cast<std::size_t>(t * (t + 1) * (t + 2) / 6)) << "T=" << t;
    EXPECT_DOUBLE_EQ(a.span, 3 * t - 2) << "T=" << t;
    EXPECT_EQ(a.critical_path_names.front(), "potrf_0");
    EXPECT_EQ(a.critical_path_names.back(), "potrf_" + std::to_string(t - 1));
    const auto weighted = depengine::analyze(g);
    EXPECT_DOUBLE_EQ(weighted.span, 5.0 * (3 * t - 2));
  }
}

TEST(InspectAnalysis, OtherGeneratedShapes) {
  namespace gf = depengine::graphfile;
  for (int t = 1; t <= 6; ++t) {
    const auto a = depengine::analyze(gf::to_graph(gf::generate_lu(t, 1)));
    EXPECT_EQ(a.ops, static_cast<std::size_t>(t * (t + 1) * (2 * t + 1) / 6));
    EXPECT_DOUBLE_EQ(a.span, 3 * t - 2);  // getrf, trsm, gemm per step; last step only getrf
  }
  const auto tree = depengine::analyze(gf::to_graph(gf::generate_tree(64, 1)));
  EXPECT_EQ(tree.ops, 127u);
  EXPECT_DOUBLE_EQ(tree.span, 7);
  EXPECT_EQ(tree.level_width.front(), 64u);
  const auto fj = depengine::analyze(gf::to_graph(gf::generate_forkjoin(8, 3, 1)));
  EXPECT_EQ(fj.ops, 30u);
  EXPECT_DOUBLE_EQ(fj.span, 9);
  EXPECT_EQ(fj.max_width, 8u);
  const auto st = depengine::analyze(gf::to_graph(gf::generate_stencil(16, 8, 1)));
  EXPECT_EQ(st.ops, 16u * 9);
  EXPECT_DOUBLE_EQ(st.span, 9);
  EXPECT_EQ(st.level_width, std::vector<std::size_t>(9, 16));
}

TEST(InspectAnalysis, RandomGeneratorIsDeterministic) {
  namespace gf = depengine::graphfile;
  EXPECT_EQ(gf::to_json(gf::generate_random(200, 30, 2, 1, 42, 3)),
            gf::to_json(gf::generate_random(200, 30, 2, 1, 42, 3)));
  EXPECT_NE(gf::to_json(gf::generate_random(200, 30, 2, 1, 42, 3)),
            gf::to_json(gf::generate_random(200, 30, 2, 1, 43, 3)));
  EXPECT_THROW(gf::generate_random(10, 3, 4, 1, 1, 1), std::invalid_argument);
  EXPECT_THROW(gf::generate_cholesky(0, 1), std::invalid_argument);
}

TEST(InspectGraph, TransitiveReductionOfAChainWithShortcuts) {
  Graph g;
  for (std::uint64_t i = 0; i < 4; ++i) g.add_node(node(i, "n" + std::to_string(i)));
  g.add_edge({0, 1, DepKind::raw, 1, 1});
  g.add_edge({1, 2, DepKind::raw, 1, 2});
  g.add_edge({2, 3, DepKind::raw, 1, 3});
  g.add_edge({0, 2, DepKind::raw, 2, 1});
  g.add_edge({0, 3, DepKind::waw, 3, 1});
  g.add_edge({1, 3, DepKind::war, 4, 1});
  EXPECT_EQ(edge_set(g.reduced_edges()), (std::set<EdgeKey>{{0, 1, DepKind::raw, 1},
                                                            {1, 2, DepKind::raw, 1},
                                                            {2, 3, DepKind::raw, 1}}));
  EXPECT_EQ(g.successors(0), (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_EQ(g.predecessors(3), (std::vector<std::size_t>{0, 1, 2}));
}

}  // namespace
