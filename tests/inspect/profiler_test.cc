// The profiler: per-op times, Chrome trace that lists every op once with no overlap on a
// worker, flow arrows along dependencies, summaries; DEPENGINE_PROFILE / DEPENGINE_RECORD.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "depengine/engine.h"
#include "depengine/graph.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"
#include "graphfile.h"

#include "scratch.h"

namespace {

namespace gf = depengine::graphfile;
using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class InspectProfiler : public ::testing::TestWithParam<int> {};

TEST_P(InspectProfiler, TraceListsEveryOpOnceWithoutOverlapPerWorker) {
  const int threads = GetParam();
  const gf::Program program = gf::generate_cholesky(5, 30);
  auto engine = depengine::Engine::create("threaded", {.cpu_threads = threads});
  auto prof = std::make_shared<depengine::Profiler>();
  engine->set_observer(prof);
  gf::run(*engine, program);
  engine.reset();

  const json trace = json::parse(prof->chrome_trace());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<std::uint64_t, int> seen;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
  std::map<std::uint64_t, int> flow_ends;
  bool cpu_named = false;
  for (const json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++seen[e["args"]["id"].get<std::uint64_t>()];
      const double ts = e["ts"].get<double>();
      const double dur = e["dur"].get<double>();
      ASSERT_TRUE(e["args"].contains("ready_us"));
      EXPECT_GE(dur, 0);
      slices[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(ts, ts + dur);
      EXPECT_LE(e["args"]["push_us"].get<double>(), e["args"]["ready_us"].get<double>());
      EXPECT_LE(e["args"]["ready_us"].get<double>(), ts);
    } else if (ph == "s") {
      flow_ends[e["id"].get<std::uint64_t>()] += 1;
    } else if (ph == "f") {
      flow_ends[e["id"].get<std::uint64_t>()] += 2;
      EXPECT_EQ(e["bp"], "e");
    } else if (ph == "M" && e["name"] == "process_name" && e["args"]["name"] == "cpu") {
      cpu_named = true;
    }
  }
  EXPECT_TRUE(cpu_named);
  ASSERT_EQ(seen.size(), program.ops.size());
  for (const auto& [id, count] : seen) EXPECT_EQ(count, 1) << "op " << id;
  // At no time do more ops run than there are workers, plus the thread in wait_all, which
  // runs queued ops while it waits.
  std::vector<std::pair<double, int>> sweep;
  for (const auto& [track, list] : slices) {
    for (const auto& [from, to] : list) {
      sweep.emplace_back(from, 1);
      sweep.emplace_back(to, -1);
    }
  }
  std::sort(sweep.begin(), sweep.end());
  int running = 0, most = 0;
  for (const auto& [t, d] : sweep) most = std::max(most, running += d);
  EXPECT_LE(most, threads + 1);
  for (auto& [track, list] : slices) {
    std::sort(list.begin(), list.end());
    for (std::size_t i = 1; i < list.size(); ++i) {
      EXPECT_LE(list[i - 1].second, list[i].first + 1e-3) << "overlap on worker " << track.second;
    }
  }
  // One flow per distinct dependency pair, each with a start and an end.
  EXPECT_EQ(flow_ends.size(), prof->dependencies().size());
  for (const auto& [id, bits] : flow_ends) EXPECT_EQ(bits, 3) << "flow " << id;

  const depengine::ProfileSummary s = prof->summary();
  EXPECT_EQ(s.ops, program.ops.size());
  std::size_t counted = 0;
  for (const auto& n : s.by_name) {
    counted += n.count;
    EXPECT_LE(n.min_us, n.mean_us);
    EXPECT_LE(n.mean_us, n.max_us);
    EXPECT_GE(n.min_us, 30);
  }
  EXPECT_EQ(counted, program.ops.size());
  ASSERT_EQ(s.by_name.size(), 4u);  // potrf, trsm, syrk, gemm
  ASSERT_EQ(s.by_lane.size(), 1u);
  EXPECT_GT(s.by_lane[0].busy_fraction, 0);
  EXPECT_LE(s.by_lane[0].busy_fraction, 1.0 + 1e-9);
  // The workers, and the thread waiting in wait_all, which runs queued ops meanwhile.
  EXPECT_LE(s.by_lane[0].mean_concurrency, threads + 1 + 1e-9);
  EXPECT_NE(s.table().find("gemm"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Workers, InspectProfiler, ::testing::Values(1, 2, 3));

TEST(InspectProfilerEvents, DependenciesMatchTheGraph) {
  const gf::Program program = gf::generate_random(200, 16, 2, 1, 11, 0);
  auto engine = depengine::Engine::create("naive");
  auto prof = std::make_shared<depengine::Profiler>();
  auto rec = std::make_shared<depengine::GraphRecorder>();
  engine->set_observer(std::make_shared<depengine::ObserverFanout>(
      std::vector<std::shared_ptr<depengine::Observer>>{rec, prof, nullptr}));
  gf::run(*engine, program);
  engine.reset();
  const depengine::Graph g = rec->graph();
  std::set<std::pair<std::uint64_t, std::uint64_t>> from_graph;
  for (const auto& e : g.edges()) from_graph.emplace(g.node(e.from).id, g.node(e.to).id);
  const auto deps = prof->dependencies();
  const std::set<std::pair<std::uint64_t, std::uint64_t>> from_profiler(deps.begin(), deps.end());
  EXPECT_EQ(from_profiler, from_graph);
  EXPECT_EQ(deps.size(), from_graph.size());
  for (const auto& op : prof->ops()) {
    EXPECT_LE(op.push_ns, op.ready_ns);
    EXPECT_LE(op.ready_ns, op.start_ns);
    EXPECT_LE(op.start_ns, op.end_ns);
    EXPECT_EQ(op.worker, 0);
  }
}

TEST(InspectProfilerEvents, FailedAndSkippedOpsAreCounted) {
  auto engine = depengine::Engine::create("threaded", {.cpu_threads = 2});
  auto prof = std::make_shared<depengine::Profiler>();
  engine->set_observer(prof);
  depengine::Var a = engine->new_var(), b = engine->new_var();
  engine->push([] { throw std::runtime_error("boom"); }, {}, {a}, {.name = "thrower"});
  engine->push([] {}, {a}, {b}, {.name = "reader"});
  EXPECT_THROW(engine->wait_all(), std::runtime_error);
  const depengine::ProfileSummary s = prof->summary();
  EXPECT_EQ(s.ops, 2u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.skipped, 1u);
  const json trace = json::parse(prof->chrome_trace());
  int instants = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "i") {
      ++instants;
      EXPECT_EQ(e["name"], "reader");
      EXPECT_TRUE(e["args"]["skipped"].get<bool>());
    }
  }
  EXPECT_EQ(instants, 1);
}

// An op name that is not UTF-8 is replaced by U+FFFD in the trace, which is still written
// (it threw nlohmann's type_error 316, so DEPENGINE_PROFILE lost the whole trace).
TEST(InspectProfilerEvents, NamesThatAreNotUtf8) {
  auto engine = depengine::Engine::create("naive");
  auto prof = std::make_shared<depengine::Profiler>();
  engine->set_observer(prof);
  depengine::Var v = engine->new_var();
  engine->push([] {}, {}, {v}, {.name = "caf\xe9"});
  engine->wait_all();
  engine.reset();
  const json trace = json::parse(prof->chrome_trace());
  std::size_t named = 0;
  for (const json& e : trace["traceEvents"]) named += e["name"] == "caf\xef\xbf\xbd";
  EXPECT_EQ(named, 1u);
}

TEST(InspectProfilerEvents, NameGroups) {
  EXPECT_EQ(depengine::name_group("gemm_3_2_1"), "gemm");
  EXPECT_EQ(depengine::name_group("gemm(3)"), "gemm");
  EXPECT_EQ(depengine::name_group("layer[2]"), "layer");
  EXPECT_EQ(depengine::name_group("add"), "add");
  EXPECT_EQ(depengine::name_group("copy_to_gpu"), "copy_to_gpu");
  EXPECT_EQ(depengine::name_group("_1"), "_1");
  EXPECT_EQ(depengine::name_group(""), "");
}

// Restores an environment variable when the test ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
};

TEST(InspectEnvironment, ProfileAndRecordAreWrittenWhenTheEngineIsDestroyed) {
  const std::string dir = depengine::test::scratch_prefix();
  const std::string trace = dir + "inspect_env_trace.json";
  const std::string dot = dir + "inspect_env_graph.dot";
  std::remove(trace.c_str());
  std::remove(dot.c_str());
  {
    ScopedEnv p("DEPENGINE_PROFILE", trace);
    ScopedEnv r("DEPENGINE_RECORD", dot);
    auto engine = depengine::Engine::create("threaded", {.cpu_threads = 2});
    gf::run(*engine, gf::generate_forkjoin(4, 2, 10));
    EXPECT_TRUE(slurp(trace).empty());  // not before the engine is destroyed
  }
  const json t = json::parse(slurp(trace));
  std::size_t slices = 0;
  for (const json& e : t["traceEvents"]) slices += e["ph"] == "X";
  EXPECT_EQ(slices, 12u);
  const depengine::Graph g = depengine::Graph::from_dot(slurp(dot));
  EXPECT_EQ(g.node_count(), 12u);
  EXPECT_DOUBLE_EQ(depengine::analyze(g, {.unit_costs = true}).span, 6);
  std::remove(trace.c_str());
  std::remove(dot.c_str());
}

// A file that cannot be written at the end (a full disk) does not cost the others: the
// trace is still written when the graph's dump fails (it stopped at the first failure).
TEST(InspectEnvironment, OneFailedWriteDoesNotLoseTheOtherFiles) {
  const std::string dir = depengine::test::scratch_prefix();
  const std::string trace = dir + "inspect_env_full_trace.json";
  const std::string dot = dir + "inspect_env_full_graph.dot";
  std::remove(trace.c_str());
  std::remove(dot.c_str());
  ASSERT_EQ(::symlink("/dev/full", dot.c_str()), 0);
  {
    ScopedEnv p("DEPENGINE_PROFILE", trace);
    ScopedEnv r("DEPENGINE_RECORD", dot);
    auto engine = depengine::Engine::create("threaded", {.cpu_threads = 2});
    gf::run(*engine, gf::generate_forkjoin(4, 2, 10));
  }
  ASSERT_FALSE(slurp(trace).empty()) << "the trace was not written";
  const json t = json::parse(slurp(trace));
  std::size_t slices = 0;
  for (const json& e : t["traceEvents"]) slices += e["ph"] == "X";
  EXPECT_EQ(slices, 12u);
  std::remove(trace.c_str());
  std::remove(dot.c_str());
}

TEST(InspectEnvironment, BadRecordValueIsAnError) {
  ScopedEnv r("DEPENGINE_RECORD", "yes please");
  EXPECT_THROW(depengine::Engine::create("naive"), depengine::Error);
}

// The process default engine writes its profile at exit (a child process runs it).
TEST(InspectEnvironment, DefaultEngineWritesTheProfileAtExit) {
  const std::string dir = depengine::test::scratch_prefix();
  const std::string trace = dir + "inspect_exit_trace.json";
  const std::string json_graph = dir + "inspect_exit_graph.json";
  std::remove(trace.c_str());
  std::remove(json_graph.c_str());
  const std::string cmd = "DEPENGINE_PROFILE='" + trace + "' DEPENGINE_RECORD='" + json_graph +
                          "' '" INSPECT_ENV_EXIT "' 2> /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const json t = json::parse(slurp(trace));
  std::size_t slices = 0;
  for (const json& e : t["traceEvents"]) slices += e["ph"] == "X";
  EXPECT_EQ(slices, 50u);
  EXPECT_EQ(depengine::Graph::from_json(slurp(json_graph)).node_count(), 50u);
  std::remove(trace.c_str());
  std::remove(json_graph.c_str());
}

}  // namespace
