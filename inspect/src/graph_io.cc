// Dumps of depengine::Graph: Graphviz DOT through Boost.Graph's graphviz support, and JSON.
#include <algorithm>
#include <boost/graph/graphviz.hpp>
#include <charconv>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "depengine/error.h"
#include "graph_impl.h"

namespace depengine {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Deeper than any dump (its accesses sit at depth 5): a text of nested brackets is refused
// as soon as the parser reaches this depth, not after building the whole tree (a 10 MB one
// took 1.27 GB and 4 s).
constexpr std::size_t kMaxJsonDepth = 64;

[[noreturn]] void too_deep(const std::string& what) {
  throw Error(what + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
              " levels (no graph dump is)");
}

const char* mode_code(AccessMode m) {
  switch (m) {
    case AccessMode::read:
      return "r";
    case AccessMode::write:
      return "w";
    case AccessMode::read_write:
      return "rw";
    case AccessMode::commute:
      return "c";
    case AccessMode::reduce:
      return "red";
  }
  return "?";
}

const char* mode_name(AccessMode m) {
  switch (m) {
    case AccessMode::read:
      return "read";
    case AccessMode::write:
      return "write";
    case AccessMode::read_write:
      return "read_write";
    case AccessMode::commute:
      return "commute";
    case AccessMode::reduce:
      return "reduce";
  }
  return "?";
}

bool parse_mode(std::string_view s, AccessMode& out) {
  for (AccessMode m : {AccessMode::read, AccessMode::write, AccessMode::read_write,
                      AccessMode::commute, AccessMode::reduce}) {
    if (s == mode_code(m) || s == mode_name(m)) {
      out = m;
      return true;
    }
  }
  return false;
}

bool parse_kind(std::string_view s, DepKind& out) {
  for (DepKind k : {DepKind::raw, DepKind::war, DepKind::waw}) {
    if (s == dep_kind_name(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Shortest text that reads back as the same double.
std::string format_double(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::to_string(v);
}

// A DOT quoted string. Boost's reader turns \" into " and keeps other backslash pairs, so
// backslashes are doubled here and halved by dot_unquote.
std::string dot_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

std::string dot_unquote(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\\') ++i;
    out += s[i];
  }
  return out;
}

// "r:3@0 w:4@1 rw:5@2"
std::string accesses_text(const std::vector<VarAccess>& acc) {
  std::string out;
  for (const VarAccess& a : acc) {
    if (!out.empty()) out += ' ';
    out += mode_code(a.mode);
    out += ':' + std::to_string(a.var) + '@' + std::to_string(a.version);
  }
  return out;
}

bool parse_accesses(std::string_view s, std::vector<VarAccess>& out) {
  out.clear();
  while (!s.empty()) {
    const std::size_t sp = s.find(' ');
    std::string_view item = s.substr(0, sp);
    s = sp == std::string_view::npos ? std::string_view() : s.substr(sp + 1);
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    const std::size_t at = item.find('@');
    if (colon == std::string_view::npos || at == std::string_view::npos || at < colon) {
      return false;
    }
    VarAccess a;
    if (!parse_mode(item.substr(0, colon), a.mode) ||
        !parse_number(item.substr(colon + 1, at - colon - 1), a.var) ||
        !parse_number(item.substr(at + 1), a.version)) {
      return false;
    }
    out.push_back(a);
  }
  return true;
}

// Fill colour by device (hue) and lane (saturation), in Graphviz's "H S V" form.
std::string fill_color(const GraphNode& n) {
  const double hue = n.device.is_cpu() ? 0.58 : std::fmod(0.30 + 0.17 * n.device.id, 1.0);
  double sat = 0.30;
  switch (n.lane) {
    case Lane::compute:
      sat = 0.30;
      break;
    case Lane::copy_to_device:
    case Lane::copy_from_device:
      sat = 0.15;
      break;
    case Lane::priority:
      sat = 0.60;
      break;
  }
  return format_double(hue) + " " + format_double(sat) + " 1.0";
}

const char* lane_shape(Lane lane) {
  switch (lane) {
    case Lane::compute:
      return "box";
    case Lane::copy_to_device:
      return "invhouse";
    case Lane::copy_from_device:
      return "house";
    case Lane::priority:
      return "octagon";
  }
  return "box";
}

struct EdgeStyle {
  const char* style;
  const char* color;
};

EdgeStyle edge_style(DepKind k) {
  switch (k) {
    case DepKind::raw:
      return {"solid", "black"};
    case DepKind::war:
      return {"dashed", "#3182bd"};
    case DepKind::waw:
      return {"dotted", "#de2d26"};
  }
  return {"solid", "black"};
}

std::string var_names_json(const Graph& graph) {
  json names = json::object();
  for (std::uint64_t v : graph.vars()) {
    const std::string name = graph.var_name(v);
    if (name != "v" + std::to_string(v)) names[std::to_string(v)] = name;
  }
  return names.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A graph with the same nodes and only the chosen edges, for writing.
BoostGraph with_edges(const Graph& graph, const std::vector<GraphEdge>& edges) {
  BoostGraph out;
  for (std::size_t i = 0; i < graph.node_count(); ++i) boost::add_vertex(graph.node(i), out);
  for (const GraphEdge& e : edges) {
    boost::add_edge(e.from, e.to, EdgeLabel{e.kind, e.var, e.version}, out);
  }
  return out;
}

struct NodeWriter {
  const BoostGraph* g;
  void operator()(std::ostream& out, std::size_t v) const {
    const GraphNode& n = (*g)[v];
    std::string tooltip = n.name + " (op " + std::to_string(n.id) + ", " + n.device.str() + " " +
                          lane_name(n.lane) + ", " + format_double(n.cost_us) + " us)";
    out << "[label=" << dot_quote(n.name) << ", opname=" << dot_quote(n.name)
        << ", op=\"" << n.id << "\", device=\"" << n.device.str() << "\", lane=\""
        << lane_name(n.lane) << "\", priority=\"" << n.priority << "\", cost_us=\""
        << format_double(n.cost_us) << "\", accesses=\"" << accesses_text(n.accesses)
        << "\", shape=" << lane_shape(n.lane) << ", fillcolor=\"" << fill_color(n)
        << "\", tooltip=" << dot_quote(tooltip) << "]";
  }
};

// " (commute)" or " (reduce)" when either end accesses `var` that way: an edge into or out
// of a run whose ops are not ordered among themselves.
std::string run_suffix(const GraphNode& from, const GraphNode& to, std::uint64_t var) {
  for (const GraphNode* n : {&to, &from}) {
    for (const VarAccess& a : n->accesses) {
      if (a.var != var) continue;
      if (a.mode == AccessMode::commute) return " (commute)";
      if (a.mode == AccessMode::reduce) return " (reduce)";
    }
  }
  return "";
}

struct EdgeWriter {
  const BoostGraph* g;
  const Graph* graph;
  void operator()(std::ostream& out, BoostGraph::edge_descriptor e) const {
    const EdgeLabel& l = (*g)[e];
    const EdgeStyle st = edge_style(l.kind);
    out << "[kind=\"" << dep_kind_name(l.kind) << "\", var=\"" << l.var << "\", version=\""
        << l.version << "\", label="
        << dot_quote(graph->var_name(l.var) + run_suffix((*g)[boost::source(e, *g)],
                                                         (*g)[boost::target(e, *g)], l.var))
        << ", style=" << st.style
        << ", color=\"" << st.color << "\"]";
  }
};

struct GraphWriter {
  std::string var_names;
  bool reduced;
  void operator()(std::ostream& out) const {
    out << "rankdir=TB;\n"
        << "node [style=filled, fontname=\"Helvetica\", fontsize=10];\n"
        << "edge [fontname=\"Helvetica\", fontsize=8, fontcolor=\"#636363\"];\n"
        << "depengine_format=\"depengine-graph 1\";\n"
        << "transitive_reduction=\"" << (reduced ? "true" : "false") << "\";\n"
        << "var_names=" << dot_quote(var_names) << ";\n";
  }
};

// What read_graphviz fills in: every attribute as text, validated afterwards.
struct DotVertex {
  std::string node_id, opname, op, device, lane, priority, cost_us, accesses;
};
struct DotEdge {
  std::string kind, var, version;
};
struct DotGraphProps {
  std::string var_names;
};
using DotGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, DotVertex,
                                       DotEdge, DotGraphProps>;

[[noreturn]] void dot_error(const std::string& where, const std::string& what) {
  throw Error("DOT dump: " + where + ": " + what);
}

void set_var_names(Graph& graph, const json& names, const std::string& origin) {
  if (!names.is_object()) throw Error(origin + ": var names must be an object");
  for (const auto& [key, value] : names.items()) {
    std::uint64_t id = 0;
    if (!parse_number(std::string_view(key), id) || !value.is_string()) {
      throw Error(origin + ": bad var name entry '" + key + "'");
    }
    graph.set_var_name(id, value.get<std::string>());
  }
}

// Boost's DOT reader recurses once per nested subgraph ("{" or "subgraph {"), so a deep
// nesting overflowed the stack; dumps nest one level. Braces inside quoted strings, HTML
// strings and comments are not nesting.
constexpr int kMaxDotNesting = 256;

void check_dot_nesting(std::string_view text) {
  int depth = 0, html = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (html > 0) {
      html += c == '<' ? 1 : c == '>' ? -1 : 0;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) i += text[i] == '\\';
    } else if (c == '<') {
      html = 1;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = std::min(text.find('\n', i), text.size());
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      i = end == std::string_view::npos ? text.size() : end + 1;
    } else if (c == '#' && (i == 0 || text[i - 1] == '\n')) {
      i = std::min(text.find('\n', i), text.size());
    } else if (c == '{' && ++depth > kMaxDotNesting) {
      dot_error("syntax", "subgraphs nested deeper than " + std::to_string(kMaxDotNesting));
    } else if (c == '}') {
      --depth;
    }
  }
}

}  // namespace

std::string Graph::to_dot(const DumpOptions& options) const {
  const BoostGraph g =
      with_edges(*this, options.transitive_reduction ? reduced_edges() : edges());
  std::ostringstream out;
  boost::write_graphviz(out, g, NodeWriter{&g}, EdgeWriter{&g, this},
                        GraphWriter{var_names_json(*this), options.transitive_reduction});
  return out.str();
}

Graph Graph::from_dot(std::string_view text) {
  DotGraph dg;
  boost::dynamic_properties dp(boost::ignore_other_properties);
  dp.property("node_id", boost::get(&DotVertex::node_id, dg));
  dp.property("opname", boost::get(&DotVertex::opname, dg));
  dp.property("op", boost::get(&DotVertex::op, dg));
  dp.property("device", boost::get(&DotVertex::device, dg));
  dp.property("lane", boost::get(&DotVertex::lane, dg));
  dp.property("priority", boost::get(&DotVertex::priority, dg));
  dp.property("cost_us", boost::get(&DotVertex::cost_us, dg));
  dp.property("accesses", boost::get(&DotVertex::accesses, dg));
  dp.property("kind", boost::get(&DotEdge::kind, dg));
  dp.property("var", boost::get(&DotEdge::var, dg));
  dp.property("version", boost::get(&DotEdge::version, dg));
  boost::ref_property_map<DotGraph*, std::string> names(dg[boost::graph_bundle].var_names);
  dp.property("var_names", names);
  check_dot_nesting(text);
  try {
    if (!boost::read_graphviz(std::string(text), dg, dp)) dot_error("graph", "not a graph");
  } catch (const boost::graph_exception& e) {
    dot_error("syntax", e.what());
  }

  // The reader orders vertices by node name as text ("10" before "2"); dumps name nodes by
  // index, so numeric names restore the written order.
  const std::size_t nv = boost::num_vertices(dg);
  std::vector<std::size_t> order(nv);
  std::vector<std::uint64_t> numeric(nv, 0);
  bool all_numeric = true;
  for (std::size_t v = 0; v < nv; ++v) {
    order[v] = v;
    all_numeric = all_numeric && parse_number(std::string_view(dg[v].node_id), numeric[v]);
  }
  if (all_numeric) {
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return numeric[a] < numeric[b]; });
  }
  std::vector<std::size_t> index_of(nv);
  for (std::size_t i = 0; i < nv; ++i) index_of[order[i]] = i;

  Graph out;
  for (std::size_t v : order) {
    const DotVertex& d = dg[v];
    const std::string where = "node '" + d.node_id + "'";
    GraphNode n;
    n.name = dot_unquote(d.opname);
    if (!parse_number(std::string_view(d.op), n.id)) dot_error(where, "bad or missing 'op' id");
    if (!parse_device(d.device, n.device)) dot_error(where, "bad or missing 'device'");
    if (!parse_lane(d.lane, n.lane)) dot_error(where, "bad or missing 'lane'");
    if (!parse_number(std::string_view(d.priority), n.priority)) {
      dot_error(where, "bad or missing 'priority'");
    }
    if (!parse_number(std::string_view(d.cost_us), n.cost_us) || !(n.cost_us >= 0)) {
      dot_error(where, "bad or missing 'cost_us'");
    }
    if (!parse_accesses(d.accesses, n.accesses)) dot_error(where, "bad 'accesses'");
    if (out.find(n.id) != out.node_count()) dot_error(where, "duplicate op id " + d.op);
    out.add_node(std::move(n));
  }
  std::vector<GraphEdge> edges;
  for (auto [it, end] = boost::edges(dg); it != end; ++it) {
    const DotEdge& d = dg[*it];
    const std::size_t from = boost::source(*it, dg);
    const std::size_t to = boost::target(*it, dg);
    const std::string where = "edge '" + dg[from].node_id + "' -> '" + dg[to].node_id + "'";
    GraphEdge e{index_of[from], index_of[to], DepKind::raw, 0, 0};
    if (!parse_kind(d.kind, e.kind)) dot_error(where, "bad or missing 'kind'");
    if (!parse_number(std::string_view(d.var), e.var)) dot_error(where, "bad or missing 'var'");
    if (!parse_number(std::string_view(d.version), e.version)) {
      dot_error(where, "bad or missing 'version'");
    }
    if (from == to) dot_error(where, "a self loop");
    edges.push_back(e);
  }
  // Each node's out edges keep file order; sources go in node order, as they were written.
  std::stable_sort(edges.begin(), edges.end(),
                   [](const GraphEdge& a, const GraphEdge& b) { return a.from < b.from; });
  for (const GraphEdge& e : edges) out.add_edge(e);
  const std::string& vn = dg[boost::graph_bundle].var_names;
  if (!vn.empty()) {
    auto depth_limit = [](int depth, json::parse_event_t, json&) {
      if (static_cast<std::size_t>(depth) >= kMaxJsonDepth) too_deep("DOT dump: 'var_names'");
      return true;
    };
    json parsed = json::parse(dot_unquote(vn), depth_limit, false);
    if (parsed.is_discarded()) dot_error("graph", "'var_names' is not JSON");
    set_var_names(out, parsed, "DOT dump: graph");
  }
  return out;
}

std::string Graph::to_json(const DumpOptions& options) const {
  ordered_json doc;
  doc["format"] = "depengine-graph";
  doc["version"] = 1;
  doc["transitive_reduction"] = options.transitive_reduction;
  ordered_json vars = ordered_json::array();
  for (std::uint64_t v : this->vars()) {
    ordered_json var;
    var["id"] = v;
    var["name"] = var_name(v);
    vars.push_back(std::move(var));
  }
  doc["vars"] = std::move(vars);
  ordered_json nodes = ordered_json::array();
  for (std::size_t i = 0; i < node_count(); ++i) {
    const GraphNode& n = node(i);
    ordered_json j;
    j["id"] = n.id;
    j["name"] = n.name;
    j["device"] = n.device.str();
    j["lane"] = lane_name(n.lane);
    j["priority"] = n.priority;
    j["cost_us"] = n.cost_us;
    ordered_json acc = ordered_json::array();
    for (const VarAccess& a : n.accesses) {
      ordered_json x;
      x["var"] = a.var;
      x["version"] = a.version;
      x["mode"] = mode_name(a.mode);
      acc.push_back(std::move(x));
    }
    j["accesses"] = std::move(acc);
    nodes.push_back(std::move(j));
  }
  doc["nodes"] = std::move(nodes);
  ordered_json edges_json = ordered_json::array();
  for (const GraphEdge& e : options.transitive_reduction ? reduced_edges() : edges()) {
    ordered_json j;
    j["from"] = node(e.from).id;
    j["to"] = node(e.to).id;
    j["kind"] = dep_kind_name(e.kind);
    j["var"] = e.var;
    j["version"] = e.version;
    edges_json.push_back(std::move(j));
  }
  doc["edges"] = std::move(edges_json);
  // Names are bytes; what is not UTF-8 becomes U+FFFD rather than failing the whole dump.
  return doc.dump(1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

namespace {

[[noreturn]] void json_error(const std::string& where, const std::string& field,
                             const std::string& what) {
  throw Error("graph JSON: " + where + ": field '" + field + "': " + what);
}

const json& member(const json& obj, const char* field, const std::string& where) {
  auto it = obj.find(field);
  if (it == obj.end()) json_error(where, field, "missing");
  return *it;
}

std::uint64_t get_u64(const json& obj, const char* field, const std::string& where) {
  const json& v = member(obj, field, where);
  if (!v.is_number_unsigned()) json_error(where, field, "must be a non-negative integer");
  return v.get<std::uint64_t>();
}

std::string get_string(const json& obj, const char* field, const std::string& where) {
  const json& v = member(obj, field, where);
  if (!v.is_string()) json_error(where, field, "must be a string");
  return v.get<std::string>();
}

// A parser callback that rejects an object repeating a key (nlohmann's parser keeps the
// last one), naming the place as the other errors do: "node 3 access 0", "edge 2", and
// nesting beyond kMaxJsonDepth.
class DuplicateKeys {
 public:
  bool operator()(int, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        count_element();
        if (stack_.size() == kMaxJsonDepth) too_deep("graph JSON");
        stack_.push_back({event == E::object_start, {}, {}, 0});
        break;
      case E::object_end:
      case E::array_end:
        stack_.pop_back();
        break;
      case E::key: {
        Frame& top = stack_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) json_error(where(), top.key, "duplicate key");
        break;
      }
      case E::value:
        count_element();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;       // objects: the key being read
    std::size_t elements;  // arrays: how many elements so far
  };

  void count_element() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().elements;
  }

  std::string where() const {
    std::string out;
    for (std::size_t i = 1; i < stack_.size(); ++i) {
      if (stack_[i - 1].object) continue;  // the array's element is named below
      const std::string list = i >= 2 ? stack_[i - 2].key : "element";
      const std::string item = list == "nodes"      ? "node"
                               : list == "edges"    ? "edge"
                               : list == "vars"     ? "var"
                               : list == "accesses" ? "access"
                                                    : list;
      out += (out.empty() ? "" : " ") + item + " " + std::to_string(stack_[i - 1].elements - 1);
    }
    return out.empty() ? "top level" : out;
  }

  std::vector<Frame> stack_;
};

}  // namespace

Graph Graph::from_json(std::string_view text) {
  // nlohmann's lexer takes a NUL byte for the end of the input (what followed was ignored).
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw Error("graph JSON: a NUL byte at byte " + std::to_string(nul + 1) + " (not text)");
  }
  DuplicateKeys duplicates;
  json doc = json::parse(text, std::ref(duplicates), false);
  if (doc.is_discarded()) throw Error("graph JSON: not valid JSON");
  if (!doc.is_object()) throw Error("graph JSON: the top level must be an object");
  const std::string top = "top level";
  const json& nodes = member(doc, "nodes", top);
  if (!nodes.is_array()) json_error(top, "nodes", "must be an array");
  Graph out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const json& j = nodes[i];
    const std::string where = "node " + std::to_string(i);
    if (!j.is_object()) throw Error("graph JSON: " + where + ": must be an object");
    GraphNode n;
    n.id = get_u64(j, "id", where);
    n.name = get_string(j, "name", where);
    if (!parse_device(get_string(j, "device", where), n.device)) {
      json_error(where, "device", "unknown device");
    }
    if (!parse_lane(get_string(j, "lane", where), n.lane)) json_error(where, "lane", "unknown lane");
    const json& prio = member(j, "priority", where);
    if (!prio.is_number_integer() || prio.get<std::int64_t>() < INT32_MIN ||
        prio.get<std::int64_t>() > INT32_MAX ||
        (prio.is_number_unsigned() && prio.get<std::uint64_t>() > INT32_MAX)) {
      json_error(where, "priority", "must be an integer in the range of int");
    }
    n.priority = prio.get<int>();
    const json& cost = member(j, "cost_us", where);
    if (!cost.is_number() || !(cost.get<double>() >= 0) || !std::isfinite(cost.get<double>())) {
      json_error(where, "cost_us", "must be a finite non-negative number");
    }
    n.cost_us = cost.get<double>();
    const json& acc = member(j, "accesses", where);
    if (!acc.is_array()) json_error(where, "accesses", "must be an array");
    for (std::size_t k = 0; k < acc.size(); ++k) {
      const std::string aw = where + " access " + std::to_string(k);
      if (!acc[k].is_object()) throw Error("graph JSON: " + aw + ": must be an object");
      VarAccess a;
      a.var = get_u64(acc[k], "var", aw);
      a.version = get_u64(acc[k], "version", aw);
      if (!parse_mode(get_string(acc[k], "mode", aw), a.mode)) {
        json_error(aw, "mode", "must be read, write, read_write, commute or reduce");
      }
      n.accesses.push_back(a);
    }
    if (out.find(n.id) != out.node_count()) json_error(where, "id", "duplicate node id");
    out.add_node(std::move(n));
  }
  if (auto it = doc.find("edges"); it != doc.end()) {
    if (!it->is_array()) json_error(top, "edges", "must be an array");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& j = (*it)[i];
      const std::string where = "edge " + std::to_string(i);
      if (!j.is_object()) throw Error("graph JSON: " + where + ": must be an object");
      GraphEdge e;
      e.from = out.find(get_u64(j, "from", where));
      if (e.from == out.node_count()) json_error(where, "from", "names no node");
      e.to = out.find(get_u64(j, "to", where));
      if (e.to == out.node_count()) json_error(where, "to", "names no node");
      if (e.from == e.to) json_error(where, "to", "a self loop");
      if (!parse_kind(get_string(j, "kind", where), e.kind)) {
        json_error(where, "kind", "must be RAW, WAR or WAW");
      }
      e.var = get_u64(j, "var", where);
      e.version = get_u64(j, "version", where);
      out.add_edge(e);
    }
  }
  if (auto it = doc.find("vars"); it != doc.end()) {
    if (!it->is_array()) json_error(top, "vars", "must be an array");
    std::set<std::uint64_t> ids;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& j = (*it)[i];
      const std::string where = "var " + std::to_string(i);
      if (!j.is_object()) throw Error("graph JSON: " + where + ": must be an object");
      // Vars are told apart by id; names are labels and may repeat.
      const std::uint64_t id = get_u64(j, "id", where);
      if (!ids.insert(id).second) json_error(where, "id", "duplicate var id");
      if (j.contains("name")) out.set_var_name(id, get_string(j, "name", where));
    }
  }
  return out;
}

}  // namespace depengine
