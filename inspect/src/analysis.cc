// Work, span, critical path and level widths of a dependency graph.
#include <algorithm>
#include <unordered_map>

#include "graph_impl.h"

namespace depengine {

GraphAnalysis analyze(const Graph& graph, const AnalysisOptions& options) {
  GraphAnalysis a;
  const std::size_t n = graph.node_count();
  a.ops = n;
  a.edges = graph.edge_count();
  if (n == 0) return a;
  const BoostGraph& g = detail::GraphAccess::boost_graph(graph);
  const std::vector<std::size_t> order = detail::topological_order(g);

  auto cost = [&](std::size_t v) { return options.unit_costs ? 1.0 : g[v].cost_us; };
  // finish[v]: the heaviest path ending at v, v included; via[v]: its previous node.
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<double> finish(n, 0);
  std::vector<std::size_t> via(n, kNone);
  std::vector<std::size_t> level(n, 0);
  for (std::size_t v : order) {
    double best = 0;
    for (auto [it, end] = boost::in_edges(v, g); it != end; ++it) {
      const std::size_t u = boost::source(*it, g);
      level[v] = std::max(level[v], level[u] + 1);
      if (via[v] == kNone || finish[u] > best) {
        best = finish[u];
        via[v] = u;
      }
    }
    finish[v] = best + cost(v);
    a.work += cost(v);
  }

  std::size_t last = order.front();
  for (std::size_t v : order) {
    if (finish[v] > finish[last]) last = v;
  }
  a.span = finish[last];
  for (std::size_t v = last; v != kNone; v = via[v]) a.critical_path.push_back(v);
  std::reverse(a.critical_path.begin(), a.critical_path.end());
  for (std::size_t v : a.critical_path) a.critical_path_names.push_back(g[v].name);
  // Commute and reduce runs, in node order.
  struct Run {
    AccessMode mode = AccessMode::read;
    double cost = 0;
  };
  std::unordered_map<std::uint64_t, Run> runs;
  for (std::size_t v = 0; v < n; ++v) {
    for (const VarAccess& acc : g[v].accesses) {
      Run& r = runs[acc.var];
      const bool grouped = acc.mode == AccessMode::commute || acc.mode == AccessMode::reduce;
      if (grouped && r.mode != acc.mode) {
        if (acc.mode == AccessMode::commute) ++a.commute_runs;
        if (acc.mode == AccessMode::reduce) ++a.reduce_runs;
        r.cost = 0;
      }
      r.mode = acc.mode;
      if (acc.mode != AccessMode::commute) continue;
      r.cost += cost(v);
      if (r.cost > a.heaviest_commute_run) {
        a.heaviest_commute_run = r.cost;
        a.heaviest_commute_var = acc.var;
      }
    }
  }
  const double bound = std::max(a.span, a.heaviest_commute_run);
  a.parallelism = bound > 0 ? a.work / bound : 0;

  for (std::size_t v = 0; v < n; ++v) {
    if (level[v] >= a.level_width.size()) a.level_width.resize(level[v] + 1, 0);
    ++a.level_width[level[v]];
  }
  a.max_width = *std::max_element(a.level_width.begin(), a.level_width.end());
  return a;
}

}  // namespace depengine
