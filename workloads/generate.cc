// Graph files for well-known DAG shapes.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "graphfile.h"

namespace depengine::graphfile {
namespace {

void check_range(const char* what, long value, long lo, long hi) {
  if (value < lo || value > hi) {
    throw std::invalid_argument(std::string(what) + " must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got " + std::to_string(value));
  }
}

void check_cost(double cost_us) {
  if (!(cost_us >= 0) || cost_us > kMaxCostUs) {
    throw std::invalid_argument("--cost-us must be in [0, 1e9], got " + std::to_string(cost_us));
  }
}

// `width` columns of `rows` rows (steps, stages), at most 10^6 ops.
void check_grid(int width, const char* rows_flag, int rows) {
  check_range("--width", width, 1, 1000000);
  check_range(rows_flag, rows, 1, 1000000);
  check_range((std::string("--width x ") + rows_flag).c_str(), static_cast<long>(width) * rows, 1,
              1000000);
}

// Builds a Program op by op, naming vars on first use.
class Writer {
 public:
  explicit Writer(double cost_us) : cost_us_(cost_us) {}

  void op(std::string name, std::initializer_list<std::string> reads,
          std::initializer_list<std::string> writes, int priority = 0) {
    OpSpec s;
    s.name = std::move(name);
    s.cost_us = cost_us_;
    s.priority = priority;
    for (const std::string& r : reads) s.reads.push_back(var(r));
    for (const std::string& w : writes) s.writes.push_back(var(w));
    p_.ops.push_back(std::move(s));
  }
  void op(std::string name, const std::vector<std::string>& reads,
          const std::vector<std::string>& writes) {
    OpSpec s;
    s.name = std::move(name);
    s.cost_us = cost_us_;
    for (const std::string& r : reads) s.reads.push_back(var(r));
    for (const std::string& w : writes) s.writes.push_back(var(w));
    p_.ops.push_back(std::move(s));
  }

  Program take() {
    for (OpSpec& s : p_.ops) {
      for (auto* list : {&s.reads, &s.writes}) {
        std::sort(list->begin(), list->end());
        list->erase(std::unique(list->begin(), list->end()), list->end());
      }
    }
    return std::move(p_);
  }

 private:
  std::size_t var(const std::string& name) {
    auto [it, inserted] = index_.try_emplace(name, p_.vars.size());
    if (inserted) p_.vars.push_back(name);
    return it->second;
  }

  double cost_us_;
  Program p_;
  std::unordered_map<std::string, std::size_t> index_;
};

std::string id(std::initializer_list<int> parts, const char* prefix) {
  std::string s = prefix;
  for (int p : parts) s += "_" + std::to_string(p);
  return s;
}

// Op names of a repeated shape: "name_r_..." from the second repetition on, so the first
// (and a shape made once) keeps the names it always had.
std::string id(int repetition, std::initializer_list<int> parts, const char* prefix) {
  if (repetition == 0) return id(parts, prefix);
  std::string s = std::string(prefix) + "_r" + std::to_string(repetition);
  for (int p : parts) s += "_" + std::to_string(p);
  return s;
}

// `steps` steps over a grid of `width` points in two buffers of vars: point i of step s
// (from 1) reads the points `deps(s, i)` of the buffer step s - 1 wrote and writes its own
// point of the other buffer. Buffer 0 ("a_i") is read first.
template <class Deps>
void grid(Writer& w, int width, int steps, const Deps& deps) {
  auto x = [](int buf, int i) { return std::string(buf ? "b_" : "a_") + std::to_string(i); };
  for (int s = 1; s <= steps; ++s) {
    for (int i = 0; i < width; ++i) {
      std::vector<std::string> reads;
      for (int d : deps(s, i)) reads.push_back(x((s - 1) % 2, d));
      w.op(id({s, i}, "step"), reads, {x(s % 2, i)});
    }
  }
}

// The points within `radius` of i on a line of `width` (i first).
std::vector<int> neighbours(int i, int radius, int width) {
  std::vector<int> d{i};
  for (int k = 1; k <= radius; ++k) {
    if (i - k >= 0) d.push_back(i - k);
    if (i + k < width) d.push_back(i + k);
  }
  return d;
}

}  // namespace

std::string_view grid_pattern_name(GridPattern p) noexcept {
  switch (p) {
    case GridPattern::stencil:
      return "stencil";
    case GridPattern::nearest:
      return "nearest";
    case GridPattern::spread:
      return "spread";
    case GridPattern::fft:
      return "fft";
  }
  return "unknown";
}

Program generate_cholesky(int tiles, double cost_us, int repeats) {
  check_range("--tiles", tiles, 1, 64);
  check_range("--repeats", repeats, 1, 1000000);
  check_range("--tiles x --repeats (ops)",
              static_cast<long>(tiles) * (tiles + 1) * (tiles + 2) / 6 * repeats, 1, 1000000);
  check_cost(cost_us);
  Writer w(cost_us);
  auto a = [](int i, int j) { return id({i, j}, "A"); };
  // Right-looking tiled Cholesky of the lower triangle. The panel (potrf, trsm) is on the
  // critical path, so it gets priority. A repetition factors the same tiles again.
  for (int r = 0; r < repeats; ++r) {
    for (int k = 0; k < tiles; ++k) {
      w.op(id(r, {k}, "potrf"), {a(k, k)}, {a(k, k)}, 2);
      for (int i = k + 1; i < tiles; ++i) {
        w.op(id(r, {i, k}, "trsm"), {a(k, k), a(i, k)}, {a(i, k)}, 1);
      }
      for (int i = k + 1; i < tiles; ++i) {
        w.op(id(r, {i, k}, "syrk"), {a(i, k), a(i, i)}, {a(i, i)});
        for (int j = k + 1; j < i; ++j) {
          w.op(id(r, {i, j, k}, "gemm"), {a(i, k), a(j, k), a(i, j)}, {a(i, j)});
        }
      }
    }
  }
  return w.take();
}

Program generate_lu(int tiles, double cost_us) {
  check_range("--tiles", tiles, 1, 64);
  check_cost(cost_us);
  Writer w(cost_us);
  auto a = [](int i, int j) { return id({i, j}, "A"); };
  for (int k = 0; k < tiles; ++k) {
    w.op(id({k}, "getrf"), {a(k, k)}, {a(k, k)}, 2);
    for (int j = k + 1; j < tiles; ++j) w.op(id({k, j}, "trsmu"), {a(k, k), a(k, j)}, {a(k, j)}, 1);
    for (int i = k + 1; i < tiles; ++i) w.op(id({i, k}, "trsml"), {a(k, k), a(i, k)}, {a(i, k)}, 1);
    for (int i = k + 1; i < tiles; ++i) {
      for (int j = k + 1; j < tiles; ++j) {
        w.op(id({i, j, k}, "gemm"), {a(i, k), a(k, j), a(i, j)}, {a(i, j)});
      }
    }
  }
  return w.take();
}

Program generate_stencil(int width, int steps, double cost_us) {
  check_grid(width, "--steps", steps);
  check_cost(cost_us);
  Writer w(cost_us);
  // Two buffers: step s reads buffer (s-1)%2 and writes buffer s%2.
  for (int i = 0; i < width; ++i) w.op(id({i}, "init"), {}, {"a_" + std::to_string(i)});
  grid(w, width, steps, [width](int, int i) { return neighbours(i, 1, width); });
  return w.take();
}

Program generate_grid(GridPattern pattern, int width, int steps, double cost_us) {
  check_grid(width, "--steps", steps);
  check_cost(cost_us);
  if (pattern == GridPattern::fft && (width & (width - 1)) != 0) {
    throw std::invalid_argument("--width must be a power of two for fft, got " +
                                std::to_string(width));
  }
  Writer w(cost_us);
  switch (pattern) {
    case GridPattern::stencil:
      grid(w, width, steps, [width](int, int i) { return neighbours(i, 1, width); });
      break;
    case GridPattern::nearest:
      grid(w, width, steps, [width](int, int i) { return neighbours(i, 2, width); });
      break;
    case GridPattern::spread:
      grid(w, width, steps, [width](int, int i) {
        std::vector<int> d;
        for (int k = 0; k < 5; ++k) d.push_back((i + k * (width / 5)) % width);
        return d;
      });
      break;
    case GridPattern::fft: {
      int stages = 0;
      while ((2 << stages) <= width) ++stages;
      grid(w, width, steps, [stages](int s, int i) {
        return stages == 0 ? std::vector<int>{i}
                           : std::vector<int>{i, i ^ (1 << ((s - 1) % stages))};
      });
      break;
    }
  }
  return w.take();
}

Program generate_chain(int width, int steps, double cost_us) {
  check_grid(width, "--steps", steps);
  check_cost(cost_us);
  Writer w(cost_us);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < width; ++i) {
      const std::string v = id({i}, "c");
      w.op(id({s, i}, "link"), {v}, {v});
    }
  }
  return w.take();
}

Program generate_independent(int ops, double cost_us) {
  check_range("--ops", ops, 1, 1000000);
  check_cost(cost_us);
  Writer w(cost_us);
  for (int k = 0; k < ops; ++k) w.op(id({k}, "op"), {}, {id({k}, "v")});
  return w.take();
}

Program generate_fan(int ops, double cost_us) {
  check_range("--ops", ops, 1, 1000000);
  check_cost(cost_us);
  Writer w(cost_us);
  constexpr int kBlock = kFanReads + 2;
  for (int k = 0; k < ops; ++k) {
    const int b = k / kBlock, i = k % kBlock;
    if (i == 0 || i == kBlock - 1) {
      w.op(id({b, i}, "write"), {}, {"hub"});
    } else {
      w.op(id({b, i}, "read"), {"hub"}, {id({i - 1}, "v")});
    }
  }
  return w.take();
}

Program generate_tree(int leaves, double cost_us, int rounds) {
  check_range("--leaves", leaves, 1, 1000000);
  check_range("--rounds", rounds, 1, 1000000);
  check_range("--leaves x --rounds", static_cast<long>(leaves) * rounds, 1, 1000000);
  check_cost(cost_us);
  Writer w(cost_us);
  auto v = [](int level, int i) { return id({level, i}, "v"); };
  int levels = 0;
  for (int n = leaves; n > 1; n = (n + 1) / 2) ++levels;
  const std::string root = v(levels, 0);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < leaves; ++i) {
      w.op(id(r, {i}, "leaf"), r == 0 ? std::vector<std::string>{} : std::vector<std::string>{root},
           {v(0, i)});
    }
    int level = 0;
    for (int n = leaves; n > 1; n = (n + 1) / 2, ++level) {
      for (int i = 0; 2 * i < n; ++i) {
        std::vector<std::string> reads{v(level, 2 * i)};
        if (2 * i + 1 < n) reads.push_back(v(level, 2 * i + 1));
        w.op(id(r, {level + 1, i}, "sum"), reads, {v(level + 1, i)});
      }
    }
  }
  return w.take();
}

Program generate_forkjoin(int width, int stages, double cost_us) {
  check_grid(width, "--stages", stages);
  check_cost(cost_us);
  Writer w(cost_us);
  std::vector<std::string> ys;
  for (int i = 0; i < width; ++i) ys.push_back(id({i}, "y"));
  for (int s = 0; s < stages; ++s) {
    w.op(id({s}, "fork"), s == 0 ? std::vector<std::string>{} : std::vector<std::string>{"x"},
         {"x"});
    for (int i = 0; i < width; ++i) w.op(id({s, i}, "work"), {"x"}, {ys[i]});
    std::vector<std::string> reads = ys;
    reads.push_back("x");
    w.op(id({s}, "join"), reads, {"x"});
  }
  return w.take();
}

Program generate_random(int ops, int vars, int reads, int writes, std::uint64_t seed,
                        double cost_us) {
  check_range("--ops", ops, 1, 1000000);
  check_range("--vars", vars, 1, 1000000);
  check_range("--reads", reads, 0, vars < 64 ? vars : 64);
  check_range("--writes", writes, 0, vars < 64 ? vars : 64);
  check_range("--ops x (--reads + --writes)", static_cast<long>(ops) * (reads + writes), 0,
              kMaxGeneratedAccesses);
  check_cost(cost_us);
  // splitmix64: fully specified, so a seed gives the same file with every standard library.
  std::uint64_t state = seed;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  auto pick = [&](int count) {
    std::vector<std::string> out;
    while (static_cast<int>(out.size()) < count) {
      std::string v = id({static_cast<int>(next() % static_cast<std::uint64_t>(vars))}, "v");
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
    }
    return out;
  };
  Writer w(cost_us);
  for (int k = 0; k < ops; ++k) {
    std::vector<std::string> r = pick(reads);
    w.op(id({k}, "op"), r, pick(writes));
  }
  return w.take();
}

}  // namespace depengine::graphfile
