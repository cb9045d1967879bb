#include "workload.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <iterator>
#include <random>
#include <stdexcept>

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
constexpr std::uint32_t kWideWidth = 16;
constexpr std::uint32_t kRandomVars = 1000;
constexpr std::uint64_t kRandomSeed = 20240607;
constexpr std::uint32_t kCholeskyTiles = 8;

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
  }
  return "unknown";
}

Pattern parse_pattern(std::string_view name) {
  for (Pattern p : kPatterns) {
    if (pattern_name(p) == name) return p;
  }
  throw std::invalid_argument("unknown pattern '" + std::string(name) + "'");
}

Graph::Graph(Pattern pattern, std::size_t tasks, int threads) : pattern_(pattern) {
  tasks = std::max<std::size_t>(tasks, 1);
  const auto narrow = static_cast<std::uint32_t>(2 * std::max(threads, 1));
  // A grid of `width` points and `steps` steps over two buffers of `width` vars; the point
  // (t, i) reads `deps(t, i)` of the buffer step t - 1 wrote and writes its own point of the
  // other buffer.
  auto grid = [&](std::uint32_t width, auto deps) {
    num_vars_ = 2 * static_cast<std::size_t>(width);
    const std::size_t steps = ceil_div(tasks, width);
    for (std::size_t t = 0; t < steps; ++t) {
      const std::uint32_t in = ((t + 1) % 2) * width;
      const std::uint32_t out = (t % 2) * width;
      for (std::uint32_t i = 0; i < width; ++i) {
        std::vector<std::uint32_t> reads;
        for (std::uint32_t d : deps(t, i)) reads.push_back(in + d);
        add(std::move(reads), {out + i});
      }
    }
  };
  switch (pattern) {
    case Pattern::trivial:
      num_vars_ = tasks;
      for (std::uint32_t k = 0; k < tasks; ++k) add({}, {k});
      break;
    case Pattern::chain: {
      num_vars_ = narrow;
      const std::size_t steps = ceil_div(tasks, narrow);
      for (std::size_t t = 0; t < steps; ++t) {
        for (std::uint32_t i = 0; i < narrow; ++i) add({i}, {i});
      }
      break;
    }
    case Pattern::stencil_1d:
      grid(narrow, [&](std::size_t, std::uint32_t i) {
        std::vector<std::uint32_t> d;
        for (std::int64_t j = std::int64_t{i} - 1; j <= std::int64_t{i} + 1; ++j) {
          if (j >= 0 && j < narrow) d.push_back(static_cast<std::uint32_t>(j));
        }
        return d;
      });
      break;
    case Pattern::nearest:
      grid(kWideWidth, [](std::size_t, std::uint32_t i) {
        std::vector<std::uint32_t> d;
        for (std::int64_t j = std::int64_t{i} - 2; j <= std::int64_t{i} + 2; ++j) {
          if (j >= 0 && j < kWideWidth) d.push_back(static_cast<std::uint32_t>(j));
        }
        return d;
      });
      break;
    case Pattern::spread:
      grid(kWideWidth, [](std::size_t, std::uint32_t i) {
        std::vector<std::uint32_t> d;
        for (std::uint32_t k = 0; k < 5; ++k) d.push_back((i + k * (kWideWidth / 5)) % kWideWidth);
        return d;
      });
      break;
    case Pattern::fft:
      grid(kWideWidth, [](std::size_t t, std::uint32_t i) {
        const std::uint32_t stages = std::bit_width(kWideWidth) - 1;
        return std::vector<std::uint32_t>{i, i ^ (1u << (t % stages))};
      });
      break;
    case Pattern::tree: {
      // Levels of 16, 8, 4, 2, 1 vars; the root is the last var.
      std::vector<std::uint32_t> level_start;
      std::uint32_t n = 0;
      for (std::uint32_t w = kWideWidth; w >= 1; w /= 2) {
        level_start.push_back(n);
        n += w;
      }
      num_vars_ = n;
      const std::uint32_t root = n - 1;
      const std::size_t rounds = ceil_div(tasks, 2 * kWideWidth - 1);
      for (std::size_t r = 0; r < rounds; ++r) {
        for (std::uint32_t i = 0; i < kWideWidth; ++i) add({root}, {i});
        std::uint32_t w = kWideWidth / 2;
        for (std::size_t l = 1; l < level_start.size(); ++l, w /= 2) {
          for (std::uint32_t j = 0; j < w; ++j) {
            add({level_start[l - 1] + 2 * j, level_start[l - 1] + 2 * j + 1}, {level_start[l] + j});
          }
        }
      }
      break;
    }
    case Pattern::random_dag: {
      num_vars_ = kRandomVars;
      std::mt19937_64 rng(kRandomSeed);
      std::uniform_int_distribution<std::uint32_t> pick(0, kRandomVars - 1);
      for (std::size_t k = 0; k < tasks; ++k) {
        const std::uint32_t a = pick(rng), b = pick(rng), c = pick(rng);
        add({a, b}, {c});
      }
      break;
    }
    case Pattern::cholesky: {
      constexpr std::uint32_t T = kCholeskyTiles;
      auto tile = [](std::uint32_t i, std::uint32_t j) { return i * (i + 1) / 2 + j; };
      num_vars_ = T * (T + 1) / 2;
      const std::size_t per = T + T * (T - 1) + T * (T - 1) * (T - 2) / 6;
      const std::size_t reps = ceil_div(tasks, per);
      for (std::size_t r = 0; r < reps; ++r) {
        for (std::uint32_t k = 0; k < T; ++k) {
          add({tile(k, k)}, {tile(k, k)});                                  // potrf
          for (std::uint32_t i = k + 1; i < T; ++i) add({tile(k, k), tile(i, k)}, {tile(i, k)});  // trsm
          for (std::uint32_t i = k + 1; i < T; ++i) {
            add({tile(i, k), tile(i, i)}, {tile(i, i)});  // syrk
            for (std::uint32_t j = k + 1; j < i; ++j) {
              add({tile(i, k), tile(j, k), tile(i, j)}, {tile(i, j)});  // gemm
            }
          }
        }
      }
      break;
    }
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
