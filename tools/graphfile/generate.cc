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

}  // namespace

Program generate_cholesky(int tiles, double cost_us) {
  check_range("--tiles", tiles, 1, 64);
  check_cost(cost_us);
  Writer w(cost_us);
  auto a = [](int i, int j) { return id({i, j}, "A"); };
  // Right-looking tiled Cholesky of the lower triangle. The panel (potrf, trsm) is on the
  // critical path, so it gets priority.
  for (int k = 0; k < tiles; ++k) {
    w.op(id({k}, "potrf"), {a(k, k)}, {a(k, k)}, 2);
    for (int i = k + 1; i < tiles; ++i) w.op(id({i, k}, "trsm"), {a(k, k), a(i, k)}, {a(i, k)}, 1);
    for (int i = k + 1; i < tiles; ++i) {
      w.op(id({i, k}, "syrk"), {a(i, k), a(i, i)}, {a(i, i)});
      for (int j = k + 1; j < i; ++j) {
        w.op(id({i, j, k}, "gemm"), {a(i, k), a(j, k), a(i, j)}, {a(i, j)});
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
  check_range("--width", width, 1, 1000000);
  check_range("--steps", steps, 1, 1000000);
  check_range("--width x --steps", static_cast<long>(width) * steps, 1, 1000000);
  check_cost(cost_us);
  Writer w(cost_us);
  // Two buffers: step s reads buffer (s-1)%2 and writes buffer s%2.
  auto x = [](int buf, int i) { return std::string(buf ? "b_" : "a_") + std::to_string(i); };
  for (int i = 0; i < width; ++i) w.op(id({i}, "init"), {}, {x(0, i)});
  for (int s = 1; s <= steps; ++s) {
    for (int i = 0; i < width; ++i) {
      std::vector<std::string> reads{x((s - 1) % 2, i)};
      if (i > 0) reads.push_back(x((s - 1) % 2, i - 1));
      if (i + 1 < width) reads.push_back(x((s - 1) % 2, i + 1));
      w.op(id({s, i}, "step"), reads, {x(s % 2, i)});
    }
  }
  return w.take();
}

Program generate_tree(int leaves, double cost_us) {
  check_range("--leaves", leaves, 1, 1000000);
  check_cost(cost_us);
  Writer w(cost_us);
  auto v = [](int level, int i) { return id({level, i}, "v"); };
  for (int i = 0; i < leaves; ++i) w.op(id({i}, "leaf"), {}, {v(0, i)});
  int level = 0;
  for (int n = leaves; n > 1; n = (n + 1) / 2, ++level) {
    for (int i = 0; 2 * i < n; ++i) {
      std::vector<std::string> reads{v(level, 2 * i)};
      if (2 * i + 1 < n) reads.push_back(v(level, 2 * i + 1));
      w.op(id({level + 1, i}, "sum"), reads, {v(level + 1, i)});
    }
  }
  return w.take();
}

Program generate_forkjoin(int width, int stages, double cost_us) {
  check_range("--width", width, 1, 1000000);
  check_range("--stages", stages, 1, 1000000);
  check_range("--width x --stages", static_cast<long>(width) * stages, 1, 1000000);
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
