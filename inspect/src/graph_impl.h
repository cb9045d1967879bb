// The Boost.Graph representation behind depengine::Graph.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "dependency_tracker.h"
#include "depengine/graph.h"

namespace depengine {

struct EdgeLabel {
  DepKind kind = DepKind::raw;
  std::uint64_t var = 0;
  std::uint64_t version = 0;
};

// vecS/vecS: vertex descriptors are node indices; out edges keep insertion order.
using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                         GraphNode, EdgeLabel>;

struct Graph::Impl {
  BoostGraph g;
  std::unordered_map<std::uint64_t, std::size_t> by_id;
  std::map<std::uint64_t, std::string> var_names;
  detail::DependencyTracker tracker;
  std::vector<detail::Dependency> scratch;
};

namespace detail {

struct GraphAccess {
  static const BoostGraph& boost_graph(const Graph& g) { return g.impl_->g; }
  static Graph::Impl& impl(Graph& g) { return *g.impl_; }
  static const Graph::Impl& impl(const Graph& g) { return *g.impl_; }
};

// Node indices in a topological order. Throws Error when the graph has a cycle.
std::vector<std::size_t> topological_order(const BoostGraph& g);

}  // namespace detail
}  // namespace depengine
