// libFuzzer target: any bytes given to the graph-file loader either parse or give a
// FileError; a parsed program survives a round trip through its JSON and can be analyzed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "graphfile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace depengine;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  graphfile::Program p;
  try {
    p = graphfile::parse_program(text);
  } catch (const graphfile::FileError&) {
    return 0;
  }
  const graphfile::Program again = graphfile::parse_program(graphfile::to_json(p));
  if (again.ops.size() != p.ops.size() || again.vars.size() != p.vars.size()) std::abort();
  const Graph g = graphfile::to_graph(p);
  const GraphAnalysis a = analyze(g);
  if (a.ops != p.ops.size() || a.span > a.work * (1 + 1e-9) + 1e-9) std::abort();
  (void)g.reduced_edges();
  (void)Graph::from_json(g.to_json());
  return 0;
}
