// depengine::Graph: nodes, edges derived from accesses, transitive reduction.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/graph/topological_sort.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>

#include "depengine/error.h"
#include "graph_impl.h"

namespace depengine {

const char* dep_kind_name(DepKind kind) noexcept {
  switch (kind) {
    case DepKind::raw:
      return "RAW";
    case DepKind::war:
      return "WAR";
    case DepKind::waw:
      return "WAW";
  }
  return "unknown";
}

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::Graph(const Graph& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Graph::Graph(Graph&& other) noexcept : impl_(std::move(other.impl_)) {}
Graph& Graph::operator=(const Graph& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Graph& Graph::operator=(Graph&& other) noexcept {
  impl_ = std::move(other.impl_);
  return *this;
}
Graph::~Graph() = default;

std::size_t Graph::add_node(GraphNode node) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  if (impl_->by_id.contains(node.id)) {
    throw Error("Graph: a node with id " + std::to_string(node.id) + " is already present");
  }
  const std::uint64_t id = node.id;
  const std::size_t index = boost::add_vertex(std::move(node), impl_->g);
  impl_->by_id.emplace(id, index);
  return index;
}

void Graph::add_edge(const GraphEdge& edge) {
  const std::size_t n = node_count();
  if (edge.from >= n || edge.to >= n) {
    throw Error("Graph: edge " + std::to_string(edge.from) + " -> " + std::to_string(edge.to) +
                " names a node index out of range (" + std::to_string(n) + " nodes)");
  }
  if (edge.from == edge.to) {
    throw Error("Graph: edge " + std::to_string(edge.from) + " -> itself");
  }
  boost::add_edge(edge.from, edge.to, EdgeLabel{edge.kind, edge.var, edge.version}, impl_->g);
}

std::size_t Graph::add_op(const OpInfo& op, double cost_us) {
  GraphNode node{op.id,     std::string(op.name),
                 op.device, op.lane,
                 op.priority, std::vector<VarAccess>(op.accesses.begin(), op.accesses.end()),
                 cost_us};
  const std::size_t index = add_node(std::move(node));
  impl_->tracker.add(index, op.accesses, impl_->scratch);
  for (const detail::Dependency& d : impl_->scratch) {
    add_edge({static_cast<std::size_t>(d.from), index, d.kind, d.var, d.version});
  }
  return index;
}

std::size_t Graph::node_count() const noexcept { return impl_ ? boost::num_vertices(impl_->g) : 0; }
std::size_t Graph::edge_count() const noexcept { return impl_ ? boost::num_edges(impl_->g) : 0; }

const GraphNode& Graph::node(std::size_t index) const { return impl_->g[index]; }

std::size_t Graph::find(std::uint64_t id) const noexcept {
  if (!impl_) return 0;
  auto it = impl_->by_id.find(id);
  return it == impl_->by_id.end() ? node_count() : it->second;
}

void Graph::set_cost(std::size_t index, double cost_us) { impl_->g[index].cost_us = cost_us; }

std::vector<GraphEdge> Graph::edges() const {
  std::vector<GraphEdge> out;
  if (!impl_) return out;
  out.reserve(edge_count());
  // By source, then in insertion order: boost::edges() would give global insertion order,
  // which a DOT reader cannot restore.
  for (std::size_t v = 0; v < boost::num_vertices(impl_->g); ++v) {
    for (auto [it, end] = boost::out_edges(v, impl_->g); it != end; ++it) {
      const EdgeLabel& l = impl_->g[*it];
      out.push_back({v, boost::target(*it, impl_->g), l.kind, l.var, l.version});
    }
  }
  return out;
}

std::vector<std::size_t> Graph::successors(std::size_t index) const {
  std::vector<std::size_t> out;
  for (auto [it, end] = boost::adjacent_vertices(index, impl_->g); it != end; ++it) {
    out.push_back(*it);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::size_t> Graph::predecessors(std::size_t index) const {
  std::vector<std::size_t> out;
  for (auto [it, end] = boost::in_edges(index, impl_->g); it != end; ++it) {
    out.push_back(boost::source(*it, impl_->g));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace detail {

std::vector<std::size_t> topological_order(const BoostGraph& g) {
  std::vector<std::size_t> order;
  order.reserve(boost::num_vertices(g));
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    throw Error("the graph has a cycle, so it is not a dependency DAG");
  }
  std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace detail

std::vector<GraphEdge> Graph::reduced_edges() const {
  const std::size_t n = node_count();
  if (n == 0) return {};
  const BoostGraph& g = impl_->g;
  const std::vector<std::size_t> order = detail::topological_order(g);
  std::vector<std::size_t> pos(n);
  for (std::size_t i = 0; i < n; ++i) pos[order[i]] = i;

  // For each node, visit its direct successors in topological order; one already reached
  // from an earlier successor is implied. Searches stop past the last successor, so a
  // graph whose edges are local stays cheap.
  std::vector<std::size_t> stamp(n, 0);
  std::vector<std::size_t> stack;
  std::set<std::pair<std::size_t, std::size_t>> kept;
  for (std::size_t u = 0; u < n; ++u) {
    std::vector<std::size_t> succ = successors(u);
    if (succ.empty()) continue;
    std::sort(succ.begin(), succ.end(),
              [&](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
    const std::size_t limit = pos[succ.back()];
    const std::size_t mark = u + 1;
    for (std::size_t s : succ) {
      if (stamp[s] == mark) continue;
      kept.emplace(u, s);
      stack.assign(1, s);
      while (!stack.empty()) {
        const std::size_t x = stack.back();
        stack.pop_back();
        for (auto [it, end] = boost::adjacent_vertices(x, g); it != end; ++it) {
          if (stamp[*it] != mark && pos[*it] <= limit) {
            stamp[*it] = mark;
            stack.push_back(*it);
          }
        }
      }
    }
  }
  std::vector<GraphEdge> out;
  for (const GraphEdge& e : edges()) {
    if (kept.contains({e.from, e.to})) out.push_back(e);
  }
  return out;
}

void Graph::set_var_name(std::uint64_t var, std::string name) {
  impl_->var_names[var] = std::move(name);
}

std::string Graph::var_name(std::uint64_t var) const {
  if (impl_) {
    auto it = impl_->var_names.find(var);
    if (it != impl_->var_names.end()) return it->second;
  }
  return "v" + std::to_string(var);
}

std::vector<std::uint64_t> Graph::vars() const {
  std::set<std::uint64_t> seen;
  for (std::size_t i = 0; i < node_count(); ++i) {
    for (const VarAccess& a : node(i).accesses) seen.insert(a.var);
  }
  return {seen.begin(), seen.end()};
}

namespace {

// Writes all of `text` to `fd`; false (errno set) when a write fails.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

[[noreturn]] void cannot_write(const std::string& path, int err) {
  throw Error("cannot write '" + path + "'" + (err ? std::string(": ") + std::strerror(err) : ""));
}

// Opens a new file beside `target` for writing, with `mode` (before the umask); -1 when none
// can be made there (a folder that is not writable, say).
int open_beside(const std::string& target, mode_t mode, std::string& name) {
  static std::atomic<unsigned> counter{0};
  for (int tries = 0; tries < 100; ++tries) {
    name = target + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

}  // namespace

void write_text_file(const std::string& path, std::string_view text) {
  if (path == "-") {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout)) {
      throw Error("cannot write to standard output");
    }
    return;
  }
  // A regular file, or a new one, is written beside itself and renamed over its place once
  // whole: a write that fails part way (a full disk) leaves neither a partial file nor a
  // truncated old one. A symlink's target is the file replaced. Anything else (a FIFO,
  // /dev/null, /dev/full) is written in place, as is a file whose folder takes no new file.
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists || S_ISREG(st.st_mode)) {
    std::string target = path;
    if (exists) {
      if (char* real = ::realpath(path.c_str(), nullptr)) {
        target = real;
        std::free(real);
      }
    }
    std::string temp;
    const int fd = open_beside(target, exists ? (st.st_mode & 07777) : 0666, temp);
    if (fd >= 0) {
      // open() applies the umask; an existing file keeps its own mode exactly.
      bool ok = !exists || ::fchmod(fd, st.st_mode & 07777) == 0;
      ok = ok && write_all(fd, text);
      int err = ok ? 0 : errno;
      if (::close(fd) != 0 && ok) {  // some file systems report a full disk only here
        ok = false;
        err = errno;
      }
      if (ok && ::rename(temp.c_str(), target.c_str()) != 0) {
        ok = false;
        err = errno;
      }
      if (!ok) {
        ::unlink(temp.c_str());
        cannot_write(path, err);
      }
      return;
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) cannot_write(path, errno);
  const bool ok = write_all(fd, text);
  const int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) cannot_write(path, errno);
  if (!ok) cannot_write(path, err);
}

bool parse_device(std::string_view text, Device& out) noexcept {
  if (text == "cpu") {
    out = Device::cpu();
    return true;
  }
  if (text == "gpu") {
    out = Device::gpu(0);
    return true;
  }
  std::string_view digits;
  if (text.starts_with("gpu(") && text.ends_with(")")) {
    digits = text.substr(4, text.size() - 5);
  } else if (text.starts_with("gpu:")) {
    digits = text.substr(4);
  } else {
    return false;
  }
  if (digits.empty() || digits.size() > 4) return false;
  int id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    id = id * 10 + (c - '0');
  }
  out = Device::gpu(id);
  return true;
}

bool parse_lane(std::string_view text, Lane& out) noexcept {
  for (Lane l : {Lane::compute, Lane::copy_to_device, Lane::copy_from_device, Lane::priority}) {
    if (text == lane_name(l)) {
      out = l;
      return true;
    }
  }
  return false;
}

}  // namespace depengine
