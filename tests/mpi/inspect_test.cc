// The graph recorder and profiler per rank: transfers appear as ops of the rank's engine, and
// write_trace merges every rank's profile into one Chrome trace with a flow per message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "depengine/dist.h"
#include "depengine/graph.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"

namespace dd = depengine::dist;

namespace {

TEST(DistInspect, RecorderAndTraceSeeTransfers) {
  dd::Context ctx;
  const int n = ctx.size();
  auto rec = std::make_shared<depengine::GraphRecorder>();
  auto prof = std::make_shared<depengine::Profiler>();
  ctx.set_observer(std::make_shared<depengine::ObserverFanout>(
      std::vector<std::shared_ptr<depengine::Observer>>{rec, prof}));
  dd::DistVar a = ctx.new_var(16, 0);
  dd::DistVar b = ctx.new_var(16, n - 1);
  ctx.push([](dd::Args x) { x.write<double>(0)[0] = 1; }, {}, {a}, {.name = "make"});
  ctx.push([](dd::Args x) { x.write<double>(0)[0] = x.read<double>(0)[0]; }, {a}, {b},
           {.name = "use"});
  ctx.wait_all();

  std::set<std::string> names;
  const depengine::Graph g = rec->graph();
  for (std::size_t i = 0; i < g.node_count(); ++i) names.insert(g.node(i).name);
  const std::string send = "send v0@1>" + std::to_string(n - 1), recv = "recv v0@1<0";
  const bool sender = n > 1 && ctx.rank() == 0, receiver = n > 1 && ctx.rank() == n - 1;
  EXPECT_EQ(names.count("make"), ctx.rank() == 0 ? 1u : 0u);
  EXPECT_EQ(names.count("use"), ctx.rank() == n - 1 ? 1u : 0u);
  EXPECT_EQ(names.count(send), sender ? 1u : 0u);
  EXPECT_EQ(names.count(recv), receiver ? 1u : 0u);
  if (receiver) {  // "use" waits for the receive (RAW on the replica)
    std::size_t r = g.node_count(), u = g.node_count();
    for (std::size_t i = 0; i < g.node_count(); ++i) {
      if (g.node(i).name == recv) r = i;
      if (g.node(i).name == "use") u = i;
    }
    auto preds = g.predecessors(u);
    EXPECT_NE(std::find(preds.begin(), preds.end(), r), preds.end());
  }

  const std::string path = ::testing::TempDir() + "dist_trace_" + std::to_string(n) + ".json";
  ctx.write_trace(path, *prof);
  if (ctx.rank() == 0) {
    std::ifstream in(path);
    const nlohmann::json t = nlohmann::json::parse(in);
    std::set<int> pids;
    int flows = 0;
    for (const auto& e : t["traceEvents"]) {
      if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
      if (e["ph"] == "s") ++flows;
    }
    EXPECT_EQ(flows, n > 1 ? 1 : 0);
    EXPECT_TRUE(pids.count(0));
    EXPECT_TRUE(pids.count(n - 1));
    std::remove(path.c_str());
  }
}

// Op names are the user's: ones that look like transfers, or are not UTF-8, still give a
// trace (on one rank only, a throw there would leave the others waiting in write_trace).
TEST(DistInspect, TraceTakesAnyOpName) {
  dd::Context ctx;
  const int n = ctx.size();
  auto prof = std::make_shared<depengine::Profiler>();
  ctx.set_observer(prof);
  dd::DistVar a = ctx.new_var(8, n - 1);
  const std::vector<std::string> names = {"send a>b", "recv x<y", "send v0@1>99999999999",
                                          "bad \xff name"};
  for (const std::string& name : names) ctx.push([](dd::Args) {}, {}, {a}, {.name = name});
  ctx.wait_all();
  const std::string path = ::testing::TempDir() + "dist_trace_names_" + std::to_string(n) + ".json";
  ASSERT_NO_THROW(ctx.write_trace(path, *prof));
  if (ctx.rank() == 0) {
    std::ifstream in(path);
    const nlohmann::json t = nlohmann::json::parse(in);
    int ops = 0, flows = 0;
    for (const auto& e : t["traceEvents"]) {
      if (e["ph"] == "X" && e["pid"] == n - 1) ++ops;
      if (e["ph"] == "s") ++flows;
    }
    EXPECT_EQ(ops, 4);
    EXPECT_EQ(flows, 0);
    std::remove(path.c_str());
  }
}

// Only rank 0 writes the file; the failure to write it is every rank's, as for wait_all.
TEST(DistInspect, TraceThatCannotBeWrittenIsAnErrorOnEveryRank) {
  dd::Context ctx;
  auto prof = std::make_shared<depengine::Profiler>();
  ctx.set_observer(prof);
  dd::DistVar a = ctx.new_var(8, ctx.size() - 1);
  ctx.push([](dd::Args) {}, {}, {a}, {.name = "op"});
  ctx.wait_all();
  const std::string path = "/nonexistent-depengine-dir/trace.json";
  try {
    ctx.write_trace(path, *prof);
    ADD_FAILURE() << "no error on rank " << ctx.rank();
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + path), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(ctx.wait_all());  // the ranks are still in step
}

}  // namespace
