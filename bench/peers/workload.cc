#include "workload.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "graphfile.h"

namespace depengine::peers {
namespace {

// splitmix64's finalizer: a cheap bijective mix.
std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The grid patterns' width: Task Bench runs stencil_1d at 2 x threads; the 5-dependency
// patterns need at least 16 points for 5 distinct dependencies, and fft a power of two.
constexpr int kWideWidth = 16;
constexpr int kRandomVars = 1000;
constexpr std::uint64_t kRandomSeed = 20240607;
constexpr int kCholeskyTiles = 8;

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

}  // namespace

std::string_view pattern_name(Pattern p) noexcept {
  switch (p) {
    case Pattern::trivial:
      return "trivial";
    case Pattern::chain:
      return "chain";
    case Pattern::stencil_1d:
      return "stencil_1d";
    case Pattern::nearest:
      return "nearest";
    case Pattern::spread:
      return "spread";
    case Pattern::fft:
      return "fft";
    case Pattern::tree:
      return "tree";
    case Pattern::random_dag:
      return "random_dag";
    case Pattern::cholesky:
      return "cholesky";
    case Pattern::fan:
      return "fan";
  }
  return "unknown";
}

Pattern parse_pattern(std::string_view name) {
  for (Pattern p : kPatterns) {
    if (pattern_name(p) == name) return p;
  }
  throw std::invalid_argument("unknown pattern '" + std::string(name) + "'");
}

namespace {

int to_int(std::size_t n) {
  return static_cast<int>(std::min<std::size_t>(n, std::numeric_limits<int>::max()));
}

// The pattern as a program of the workload generator, about `tasks` ops.
graphfile::Program program_for(Pattern pattern, std::size_t tasks, int threads) {
  namespace gf = graphfile;
  const int narrow = 2 * std::max(threads, 1);
  const auto steps = [&](int width) { return to_int(ceil_div(tasks, width)); };
  switch (pattern) {
    case Pattern::trivial:
      return gf::generate_independent(to_int(tasks), 0);
    case Pattern::chain:
      return gf::generate_chain(narrow, steps(narrow), 0);
    case Pattern::stencil_1d:
      return gf::generate_grid(gf::GridPattern::stencil, narrow, steps(narrow), 0);
    case Pattern::nearest:
      return gf::generate_grid(gf::GridPattern::nearest, kWideWidth, steps(kWideWidth), 0);
    case Pattern::spread:
      return gf::generate_grid(gf::GridPattern::spread, kWideWidth, steps(kWideWidth), 0);
    case Pattern::fft:
      return gf::generate_grid(gf::GridPattern::fft, kWideWidth, steps(kWideWidth), 0);
    case Pattern::tree:
      return gf::generate_tree(kWideWidth, 0, steps(2 * kWideWidth - 1));
    case Pattern::random_dag:
      return gf::generate_random(to_int(tasks), kRandomVars, 2, 1, kRandomSeed, 0);
    case Pattern::cholesky: {
      constexpr int T = kCholeskyTiles;
      return gf::generate_cholesky(T, 0, steps(T * (T + 1) * (T + 2) / 6));
    }
    case Pattern::fan:
      return gf::generate_fan(to_int(tasks), 0);
  }
  throw std::invalid_argument("unknown pattern");
}

}  // namespace

Graph::Graph(Pattern pattern, std::size_t tasks, int threads) : pattern_(pattern) {
  const graphfile::Program program = program_for(pattern, std::max<std::size_t>(tasks, 1), threads);
  num_vars_ = program.vars.size();
  for (const graphfile::OpSpec& op : program.ops) {
    add(std::vector<std::uint32_t>(op.reads.begin(), op.reads.end()),
        std::vector<std::uint32_t>(op.writes.begin(), op.writes.end()));
  }
  finalize();
}

void Graph::add(std::vector<std::uint32_t> reads, std::vector<std::uint32_t> writes) {
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  std::sort(writes.begin(), writes.end());
  writes.erase(std::unique(writes.begin(), writes.end()), writes.end());
  std::vector<std::uint32_t> ro, rw, wo;
  std::set_difference(reads.begin(), reads.end(), writes.begin(), writes.end(),
                      std::back_inserter(ro));
  std::set_intersection(reads.begin(), reads.end(), writes.begin(), writes.end(),
                        std::back_inserter(rw));
  std::set_difference(writes.begin(), writes.end(), reads.begin(), reads.end(),
                      std::back_inserter(wo));
  Task t;
  starts_.push_back(flat_.size());
  t.n_ro = static_cast<std::uint32_t>(ro.size());
  t.n_rw = static_cast<std::uint32_t>(rw.size());
  t.n_wo = static_cast<std::uint32_t>(wo.size());
  flat_.insert(flat_.end(), ro.begin(), ro.end());
  flat_.insert(flat_.end(), rw.begin(), rw.end());
  flat_.insert(flat_.end(), wo.begin(), wo.end());
  tasks_.push_back(t);
}

void Graph::finalize() {
  for (std::size_t k = 0; k < tasks_.size(); ++k) tasks_[k].vars = flat_.data() + starts_[k];
}

const std::vector<std::vector<std::uint32_t>>& Graph::predecessors() const {
  if (!preds_.empty() || tasks_.empty()) return preds_;
  constexpr std::uint32_t kNone = UINT32_MAX;
  std::vector<std::uint32_t> last_writer(num_vars_, kNone);
  std::vector<std::vector<std::uint32_t>> readers(num_vars_);
  preds_.resize(tasks_.size());
  for (std::uint32_t k = 0; k < tasks_.size(); ++k) {
    const Task& t = tasks_[k];
    std::vector<std::uint32_t>& p = preds_[k];
    for (std::uint32_t v : t.read_only()) {
      if (last_writer[v] != kNone) p.push_back(last_writer[v]);
    }
    for (std::uint32_t v : t.writes()) {
      if (last_writer[v] != kNone) p.push_back(last_writer[v]);
      p.insert(p.end(), readers[v].begin(), readers[v].end());
    }
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    for (std::uint32_t v : t.read_only()) readers[v].push_back(k);
    for (std::uint32_t v : t.writes()) {
      last_writer[v] = k;
      readers[v].clear();
    }
  }
  return preds_;
}

std::size_t Graph::span() const {
  const auto& preds = predecessors();
  std::vector<std::size_t> depth(tasks_.size(), 1);
  std::size_t longest = 0;
  for (std::size_t k = 0; k < tasks_.size(); ++k) {
    for (std::uint32_t p : preds[k]) depth[k] = std::max(depth[k], depth[p] + 1);
    longest = std::max(longest, depth[k]);
  }
  return longest;
}

std::vector<Slot> Graph::initial_values() const {
  std::vector<Slot> v(num_vars_);
  for (std::size_t i = 0; i < v.size(); ++i) v[i].value = mix(i + 1);
  return v;
}

std::uint64_t busy(std::uint64_t h, std::uint64_t iters) noexcept {
  for (std::uint64_t i = 0; i < iters; ++i) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
  }
  return h;
}

void run_task(const Task& task, std::uint64_t index, Slot* values, std::uint64_t iters) noexcept {
  std::uint64_t h = mix(index + 0x9e3779b97f4a7c15ULL);
  for (std::uint32_t v : task.reads()) h = mix(h ^ values[v].value);
  h = busy(h, iters);
  for (std::uint32_t v : task.writes()) values[v].value = mix(h ^ v);
}

double busy_rounds_per_ns() {
  static const double rate = [] {
    using clock = std::chrono::steady_clock;
    // Many short samples, the fastest kept: on a shared machine some of them run without
    // being preempted, which long samples rarely do.
    constexpr std::uint64_t kRounds = 200'000;
    double best = 0;
    std::uint64_t sink = 1;
    for (int rep = 0; rep < 200; ++rep) {
      const auto t0 = clock::now();
      sink = busy(sink, kRounds);
      const double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count();
      best = std::max(best, static_cast<double>(kRounds) / ns);
    }
    // Keeps the loop observable.
    if (sink == 42) best *= 1.0000001;
    return best;
  }();
  return rate;
}

}  // namespace depengine::peers
