// DOT and JSON dumps: written with Boost.Graph's graphviz support / JSON, read back
// identical, reduced on request; bad dumps give errors, not crashes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "depengine/error.h"
#include "depengine/graph.h"
#include "graphfile.h"

#include "scratch.h"

namespace {

using depengine::Graph;
using depengine::GraphEdge;

void expect_same(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.node_count(), b.node_count());
  for (std::size_t i = 0; i < a.node_count(); ++i) {
    const auto& x = a.node(i);
    const auto& y = b.node(i);
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.lane, y.lane);
    EXPECT_EQ(x.priority, y.priority);
    EXPECT_DOUBLE_EQ(x.cost_us, y.cost_us);
    ASSERT_EQ(x.accesses.size(), y.accesses.size());
    for (std::size_t k = 0; k < x.accesses.size(); ++k) {
      EXPECT_EQ(x.accesses[k].var, y.accesses[k].var);
      EXPECT_EQ(x.accesses[k].version, y.accesses[k].version);
      EXPECT_EQ(x.accesses[k].mode, y.accesses[k].mode);
    }
  }
  const auto ea = a.edges();
  const auto eb = b.edges();
  ASSERT_EQ(ea.size(), eb.size());
  for (std::size_t i = 0; i < ea.size(); ++i) {
    EXPECT_EQ(ea[i].from, eb[i].from);
    EXPECT_EQ(ea[i].to, eb[i].to);
    EXPECT_EQ(ea[i].kind, eb[i].kind);
    EXPECT_EQ(ea[i].var, eb[i].var);
    EXPECT_EQ(ea[i].version, eb[i].version);
  }
  for (std::uint64_t v : a.vars()) EXPECT_EQ(a.var_name(v), b.var_name(v));
}

// A program with every kind of edge, devices, lanes, priorities and awkward names.
Graph sample() {
  namespace gf = depengine::graphfile;
  gf::Program p = gf::generate_random(60, 8, 2, 1, 3, 12.5);
  p.ops[3].device = depengine::Device::gpu(1);
  p.ops[3].lane = depengine::Lane::copy_to_device;
  p.ops[4].lane = depengine::Lane::priority;
  p.ops[5].priority = -7;
  p.ops[6].name = "quote \" back\\slash, {braces}; semi=colon";
  p.ops[7].name = "trailing backslash\\";
  p.vars[0] = "var \"zero\"";
  return gf::to_graph(p);
}

TEST(InspectDump, DotRoundTrip) {
  const Graph g = sample();
  const std::string dot = g.to_dot();
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("style=dashed"), std::string::npos);  // WAR
  EXPECT_NE(dot.find("style=dotted"), std::string::npos);  // WAW
  expect_same(g, Graph::from_dot(dot));
}

TEST(InspectDump, JsonRoundTrip) {
  const Graph g = sample();
  expect_same(g, Graph::from_json(g.to_json()));
}

TEST(InspectDump, ReducedDumpsKeepOnlyTheReduction) {
  const Graph g = sample();
  const Graph from_dot = Graph::from_dot(g.to_dot({.transitive_reduction = true}));
  const Graph from_json = Graph::from_json(g.to_json({.transitive_reduction = true}));
  const auto reduced = g.reduced_edges();
  EXPECT_LT(reduced.size(), g.edge_count());
  EXPECT_EQ(from_dot.edge_count(), reduced.size());
  EXPECT_EQ(from_json.edge_count(), reduced.size());
  // Reduction keeps reachability, so the analysis is unchanged.
  EXPECT_DOUBLE_EQ(depengine::analyze(from_dot).span, depengine::analyze(g).span);
  EXPECT_EQ(depengine::analyze(from_json).level_width, depengine::analyze(g).level_width);
}

// Op and var names are bytes (C++ callers push Latin-1 or cut UTF-8): the JSON dump
// replaces what is not UTF-8 with U+FFFD instead of failing as a whole (it threw
// nlohmann's type_error 316, so DEPENGINE_RECORD lost the dump).
TEST(InspectDump, JsonDumpOfNamesThatAreNotUtf8) {
  Graph g;
  depengine::GraphNode n;
  n.name = "caf\xe9";
  n.accesses = {{1, 1, depengine::AccessMode::write}};
  g.add_node(n);
  g.set_var_name(1, "\xff");
  const Graph back = Graph::from_json(g.to_json());
  ASSERT_EQ(back.node_count(), 1u);
  EXPECT_EQ(back.node(0).name, "caf\xef\xbf\xbd");
  EXPECT_EQ(back.var_name(1), "\xef\xbf\xbd");
}

// Boost's DOT reader recurses once per nested subgraph: 100000 of them overflowed the stack
// (a segfault, from Python's Graph.from_dot too). A depth no dump has is an Error.
TEST(InspectDump, DeeplyNestedDotIsAnError) {
  for (const std::string open : {"subgraph {", "{"}) {
    std::string dot = "digraph G {";
    for (int i = 0; i < 100000; ++i) dot += open;
    dot += std::string(100000, '}') + "}";
    try {
      Graph::from_dot(dot);
      ADD_FAILURE() << "accepted";
    } catch (const depengine::Error& e) {
      EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
    }
  }
  // Braces inside quoted strings are text, not nesting.
  std::string quoted = "digraph G { label=\"" + std::string(100000, '{') + "\"; }";
  EXPECT_EQ(Graph::from_dot(quoted).node_count(), 0u);
}

TEST(InspectDump, EmptyGraphRoundTrips) {
  EXPECT_EQ(Graph::from_dot(Graph().to_dot()).node_count(), 0u);
  EXPECT_EQ(Graph::from_json(Graph().to_json()).node_count(), 0u);
}

TEST(InspectDump, GraphvizRendersTheDump) {
  if (std::system("command -v dot > /dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz not installed";
  const std::string path = depengine::test::scratch_prefix() + "inspect_dump_render.dot";
  depengine::write_text_file(path, sample().to_dot());
  EXPECT_EQ(std::system(("dot -Tsvg -o /dev/null '" + path + "'").c_str()), 0);
  std::remove(path.c_str());
}

TEST(InspectDump, BadDotIsAnError) {
  EXPECT_THROW(Graph::from_dot("digraph G { 0 -> "), depengine::Error);
  EXPECT_THROW(Graph::from_dot("digraph G { 0 [op=\"x\"]; }"), depengine::Error);
  EXPECT_THROW(Graph::from_dot("digraph G { 0 [op=\"1\", device=\"cpu\", lane=\"sideways\", "
                               "priority=\"0\", cost_us=\"1\"]; }"),
               depengine::Error);
}

TEST(InspectDump, BadJsonIsAnErrorNamingNodeAndField) {
  auto message = [](const std::string& text) {
    try {
      Graph::from_json(text);
    } catch (const depengine::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message("[]").find("top level"), std::string::npos);
  const std::string node0 =
      R"({"id": 1, "name": "a", "device": "cpu", "lane": "compute", "priority": 0,
          "cost_us": 1, "accesses": []})";
  EXPECT_EQ(message(R"({"nodes": [)" + node0 + "]}"), "no error");
  EXPECT_NE(message(R"({"nodes": [)" + node0 + R"(, {"id": 2}]})").find("node 1: field 'name'"),
            std::string::npos);
  EXPECT_NE(message(R"({"nodes": [)" + node0 + "," + node0 + "]}").find("duplicate"),
            std::string::npos);
  EXPECT_NE(message(R"({"nodes": [)" + node0 +
                    R"(], "edges": [{"from": 1, "to": 9, "kind": "RAW", "var": 1, "version": 1}]})")
                .find("edge 0: field 'to'"),
            std::string::npos);
  // The message lists every mode a dump may hold (it left out commute and reduce, which
  // dumps of those accesses carry).
  const std::string sideways =
      R"({"nodes": [{"id": 1, "name": "a", "device": "cpu", "lane": "compute", "priority": 0,
          "cost_us": 1, "accesses": [{"var": 1, "version": 1, "mode": "sideways"}]}]})";
  EXPECT_NE(message(sideways).find("must be read, write, read_write, commute or reduce"),
            std::string::npos)
      << message(sideways);
}

// Issue 11, item 13/14: a repeated key used to be taken silently (the last one counted).
TEST(InspectDump, JsonRepeatingAKeyIsAnErrorNamingThePlace) {
  auto message = [](const std::string& text) {
    try {
      Graph::from_json(text);
    } catch (const depengine::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string node = R"({"id": 1, "name": "a", "device": "cpu", "lane": "compute",
      "priority": 0, "cost_us": 1, "accesses": [{"var": 1, "version": 1, "mode": "write"}]})";
  EXPECT_EQ(message(R"({"nodes": [)" + node + R"(], "nodes": []})"),
            "graph JSON: top level: field 'nodes': duplicate key");
  std::string twice = node;
  twice.replace(twice.find(R"("name": "a")"), 11, R"("name": "a", "name": "b")");
  EXPECT_EQ(message(R"({"nodes": [)" + node + ", " + twice.replace(7, 1, "2") + "]}"),
            "graph JSON: node 1: field 'name': duplicate key");
  std::string access = node;
  access.replace(access.find(R"("mode": "write")"), 15, R"("mode": "write", "var": 2)");
  EXPECT_EQ(message(R"({"nodes": [)" + access + "]}"),
            "graph JSON: node 0 access 0: field 'var': duplicate key");
}

// Vars are told apart by id; names are labels, and may repeat, but an id may not.
TEST(InspectDump, JsonVarsAreKeyedById) {
  const std::string nodes = R"("nodes": [{"id": 1, "name": "a", "device": "cpu",
      "lane": "compute", "priority": 0, "cost_us": 1,
      "accesses": [{"var": 1, "version": 1, "mode": "write"},
                   {"var": 2, "version": 1, "mode": "write"}]}])";
  const Graph g = Graph::from_json(
      "{" + nodes + R"(, "vars": [{"id": 1, "name": "A"}, {"id": 2, "name": "A"}]})");
  EXPECT_EQ(g.vars(), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(g.var_name(1), "A");
  EXPECT_EQ(g.var_name(2), "A");
  try {
    Graph::from_json("{" + nodes +
                     R"(, "vars": [{"id": 1, "name": "A"}, {"id": 1, "name": "B"}]})");
    FAIL() << "a repeated var id was accepted";
  } catch (const depengine::Error& e) {
    EXPECT_STREQ(e.what(), "graph JSON: var 1: field 'id': duplicate var id");
  }
  // Every dump since format version 1 gives each var its id; an entry without one is
  // refused, not matched by name.
  try {
    Graph::from_json("{" + nodes + R"(, "vars": [{"name": "A"}]})");
    FAIL() << "a var without an id was accepted";
  } catch (const depengine::Error& e) {
    EXPECT_STREQ(e.what(), "graph JSON: var 0: field 'id': missing");
  }
}

}  // namespace
