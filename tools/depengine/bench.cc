// `depengine bench`: the engine scenarios on the naive and threaded engines, one table.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "commands.h"
#include "scenarios.h"

namespace depengine::cli {
namespace {

int parse_positive(std::string_view flag, const char* text) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < 1 || v > 10'000'000) {
    throw Error(std::string(flag) + " expects a positive integer, got '" + text + "'");
  }
  return static_cast<int>(v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int ops_for(double op_us, int scale) {
  const int base = op_us >= 20 ? 4000 : op_us >= 1 ? 40000 : 200000;
  return std::max(1000, base / scale);
}

}  // namespace

int bench(int argc, char** argv) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repeat = 5;
  int scale = 1;
  std::vector<bench::Shape> shapes(std::begin(bench::kShapes), std::end(bench::kShapes));
  std::vector<double> costs = {0.0, 1.0, 20.0};
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw Error(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      threads = parse_positive(a, value());
    } else if (a == "--repeat") {
      repeat = parse_positive(a, value());
    } else if (a == "--quick") {
      scale = 10;
      repeat = 3;
    } else if (a == "--scenario") {
      shapes = {bench::parse_shape(value())};
    } else if (a == "--cost") {
      const char* text = value();
      char* end = nullptr;
      const double us = std::strtod(text, &end);
      if (!*text || *end || !(us >= 0 && us <= 1e6)) {
        throw Error(std::string("--cost expects microseconds in [0, 1e6], got '") + text + "'");
      }
      costs = {us};
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: depengine bench [--threads N] [--repeat K] [--scenario NAME] [--cost US]\n"
          "                       [--quick]\n\n"
          "Pushes each scenario (chain, independent, random_dag, fan) with empty, ~1 us and\n"
          "~20 us ops into the naive engine and the threaded engine with N workers (default:\n"
          "the cores), K times each (default 5), and prints median ns per op, push to\n"
          "completion, and the threaded engine's speedup over naive.\n");
      return 0;
    } else {
      std::fprintf(stderr, "depengine bench: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }

  auto naive = Engine::create("naive");
  auto threaded = Engine::create("threaded", {.cpu_threads = threads});
  std::printf("depengine bench: %d worker thread(s), %u core(s), median of %d runs\n\n", threads,
              std::thread::hardware_concurrency(), repeat);
  std::printf("%-12s %8s %8s %14s %14s %9s %7s\n", "scenario", "op cost", "ops", "naive ns/op",
              "threaded ns/op", "speedup", "ideal");
  for (bench::Shape shape : shapes) {
    for (double op_us : costs) {
      const int ops = ops_for(op_us, scale);
      std::vector<double> tn, tt;
      for (int r = 0; r < repeat; ++r) {
        tn.push_back(bench::run_scenario(*naive, shape, ops, op_us, static_cast<std::uint32_t>(r + 1)));
        tt.push_back(bench::run_scenario(*threaded, shape, ops, op_us, static_cast<std::uint32_t>(r + 1)));
      }
      const double n_ns = median(tn) * 1e9 / ops, t_ns = median(tt) * 1e9 / ops;
      char cost[32];
      if (op_us == 0) {
        std::snprintf(cost, sizeof cost, "empty");
      } else {
        std::snprintf(cost, sizeof cost, "%g us", op_us);
      }
      std::printf("%-12s %8s %8d %14.0f %14.0f %8.2fx %6.1fx\n",
                  std::string(bench::shape_name(shape)).c_str(), cost, ops, n_ns, t_ns,
                  n_ns / t_ns, bench::ideal_speedup(shape, threads));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace depengine::cli
