// depengine/graph.h — the dependency graph of a program: nodes are operations, edges are
// the RAW/WAR/WAW dependencies the engine inferred from their read and write sets. Record
// one with GraphRecorder, dump it as Graphviz DOT or JSON, read dumps back, and analyze it
// (work, span, critical path, parallelism, width per level).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "depengine/device.h"
#include "depengine/observer.h"

namespace depengine {

namespace detail {
struct GraphAccess;
}  // namespace detail

// Why one op waits for another, per the contract: a read waits for the last earlier write
// of the var (raw); a write waits for every read since that write (war) and for the write
// itself (waw).
enum class DepKind : std::uint8_t { raw, war, waw };

// "RAW", "WAR" or "WAW".
const char* dep_kind_name(DepKind kind) noexcept;

// One operation.
struct GraphNode {
  std::uint64_t id = 0;  // the engine's push sequence number, or any unique number
  std::string name;
  Device device;
  Lane lane = Lane::compute;
  int priority = 0;
  // The vars it accesses with the version each access saw (see VarAccess).
  std::vector<VarAccess> accesses;
  // Its cost in microseconds: measured by the recorder, or given by a graph file.
  double cost_us = 0;
};

// `to` waits for `from` because of `var`. `version` is the var's version the dependency is
// about: the one `from` wrote (RAW, WAW) or read (WAR). Nodes are indices into the graph.
struct GraphEdge {
  std::size_t from = 0;
  std::size_t to = 0;
  DepKind kind = DepKind::raw;
  std::uint64_t var = 0;
  std::uint64_t version = 0;
};

// What the dumps may leave out.
struct DumpOptions {
  // Keep only the edges between pairs of nodes that no longer path connects (the
  // transitive reduction); all edges between a kept pair stay, each with its var.
  bool transitive_reduction = false;
};

// A dependency DAG. A value type (copyable, movable; a moved-from graph may only be
// assigned to or destroyed); not thread-safe: GraphRecorder guards the one it builds and
// hands out copies.
//
//   depengine::Graph g;
//   g.add_op(info);                      // derives the edges from the accesses
//   depengine::GraphAnalysis a = depengine::analyze(g);
//   std::string dot = g.to_dot({.transitive_reduction = true});
class Graph {
 public:
  Graph();
  Graph(const Graph& other);
  Graph(Graph&& other) noexcept;
  Graph& operator=(const Graph& other);
  Graph& operator=(Graph&& other) noexcept;
  ~Graph();

  // Adds an op in push order and its dependency edges on the ops added before by add_op,
  // derived from the accesses as the contract says. Reads of one version are concurrent;
  // a read_write access gets a RAW edge from the last writer (not a second WAW one).
  // Returns the node's index. Throws Error when the id is already in the graph.
  std::size_t add_op(const OpInfo& op, double cost_us = 0);

  // Adds a node without deriving edges (for building a graph by hand or reading a dump).
  // Throws Error when the id is already in the graph.
  std::size_t add_node(GraphNode node);
  // Adds an edge between two node indices. Throws Error for an index out of range or a
  // self loop.
  void add_edge(const GraphEdge& edge);

  std::size_t node_count() const noexcept;
  std::size_t edge_count() const noexcept;
  // Precondition: index < node_count().
  const GraphNode& node(std::size_t index) const;
  // The index of the node with this id, or node_count() when there is none.
  std::size_t find(std::uint64_t id) const noexcept;
  void set_cost(std::size_t index, double cost_us);

  // Every edge, grouped by source node in node order.
  std::vector<GraphEdge> edges() const;
  // Direct successors / predecessors of a node, each once, ascending.
  std::vector<std::size_t> successors(std::size_t index) const;
  std::vector<std::size_t> predecessors(std::size_t index) const;

  // The edges whose (from, to) pair is in the transitive reduction.
  std::vector<GraphEdge> reduced_edges() const;

  // Optional names of vars (a var without one is shown as "v<id>").
  void set_var_name(std::uint64_t var, std::string name);
  std::string var_name(std::uint64_t var) const;
  // Every var some node accesses, ascending.
  std::vector<std::uint64_t> vars() const;

  // Graphviz DOT, written with Boost.Graph's write_graphviz: nodes filled by device and
  // shaped by lane, RAW edges solid, WAR dashed, WAW dotted, each labelled with its var.
  // Every field is kept as an attribute, so from_dot reads it back.
  std::string to_dot(const DumpOptions& options = {}) const;
  // JSON: {"format": "depengine-graph", "version": 1, "vars": [...], "nodes": [...],
  // "edges": [...]}; edges name nodes by id.
  std::string to_json(const DumpOptions& options = {}) const;

  // Read dumps back (boost::read_graphviz for DOT). Throw Error naming what is wrong.
  static Graph from_dot(std::string_view text);
  static Graph from_json(std::string_view text);

 private:
  friend struct detail::GraphAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Work and span of a graph weighted by its nodes' cost_us (or by 1 per node).
struct GraphAnalysis {
  std::size_t ops = 0;
  std::size_t edges = 0;
  double work = 0;         // sum of the costs
  double span = 0;         // the longest weighted path
  double parallelism = 0;  // work / span (0 for an empty graph or zero span)
  // Node indices on one longest path, first to last, and their names.
  std::vector<std::size_t> critical_path;
  std::vector<std::string> critical_path_names;
  // Ops per topological level (level 0: no predecessors; else 1 + the deepest predecessor).
  std::vector<std::size_t> level_width;
  std::size_t max_width = 0;
  // Runs of consecutive commute accesses to one var (in node order, which is push order).
  // Their ops have no edges among themselves but run one at a time, so the heaviest run's
  // total cost bounds the run time as the span does: parallelism is work divided by the
  // larger of the two.
  std::size_t commute_runs = 0;
  double heaviest_commute_run = 0;
  std::uint64_t heaviest_commute_var = 0;
  // Runs of consecutive reduce accesses to one var (concurrent: no bound of their own).
  std::size_t reduce_runs = 0;
};

struct AnalysisOptions {
  // Weigh every op 1 instead of its cost_us.
  bool unit_costs = false;
};

// Throws Error when the graph has a cycle (a hand-made or read-back one may).
GraphAnalysis analyze(const Graph& graph, const AnalysisOptions& options = {});

// An observer that records every pushed op into a Graph, with its measured run time as the
// cost. Attach it to an engine; take copies of the graph at any time.
//
//   auto rec = std::make_shared<depengine::GraphRecorder>();
//   engine->set_observer(rec);
//   ... pushes ...; engine->wait_all();
//   rec->write_dot("graph.dot");
//
// All members are thread-safe.
class GraphRecorder : public Observer {
 public:
  GraphRecorder() = default;

  void on_push(const OpInfo& op) override;
  void on_ready(std::uint64_t id) override;
  void on_start(std::uint64_t id, int worker) override;
  void on_end(std::uint64_t id, bool failed, bool skipped) override;

  // Names a var in dumps (e.g. set_var_name(v.id(), "A00")).
  void set_var_name(std::uint64_t var, std::string name);
  // A copy of what was recorded so far.
  Graph graph() const;
  // Write dumps; throw Error when the file cannot be written.
  void write_dot(const std::string& path, const DumpOptions& options = {}) const;
  void write_json(const std::string& path, const DumpOptions& options = {}) const;

 private:
  mutable std::mutex mu_;
  Graph graph_;
  // Start times (steady clock, ns) of running ops, by op id.
  std::unordered_map<std::uint64_t, std::int64_t> started_;
};

// Writes `text` to `path` ("-" is stdout). Throws Error when it cannot. A regular file is
// replaced only once the whole text is written (through a file beside it, renamed over it),
// so a failed write leaves the old file, or none; a symlink keeps pointing at the new file.
void write_text_file(const std::string& path, std::string_view text);

// The spellings dumps and graph files use: "cpu", "gpu(1)" (also "gpu" for gpu(0) and
// "gpu:1"); lane names as lane_name() gives them. Return false for anything else.
bool parse_device(std::string_view text, Device& out) noexcept;
bool parse_lane(std::string_view text, Lane& out) noexcept;

}  // namespace depengine
