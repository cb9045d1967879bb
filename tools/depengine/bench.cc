// `depengine bench`: the engine scenarios on the naive and threaded engines, one table.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "scenarios.h"

namespace depengine::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int ops_for(double op_us, int scale) {
  const int base = op_us >= 20 ? 4000 : op_us >= 1 ? 40000 : 200000;
  return std::max(1000, base / scale);
}

constexpr const char* kHelp =
    "usage: depengine bench [--threads N] [--repeat K] [--scenario NAME] [--cost US]\n"
    "                       [--quick]\n\n"
    "Pushes each scenario (chain, independent, random_dag, fan) with empty, ~1 us and\n"
    "~20 us ops into the naive engine and the threaded engine with N workers (default:\n"
    "the cores; 1 to 1024), K times each (default 5; 1 to 1000), and prints median ns per\n"
    "op, push to completion, and the threaded engine's speedup over naive. --cost US (0 to\n"
    "1e6) runs only ops of that cost; --quick runs fewer ops, 3 times.\n";

}  // namespace

int bench(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const Args args(argc, argv, {"--threads", "--repeat", "--scenario", "--cost"}, {"--quick"});
  if (!args.positional().empty()) {
    throw UsageError("unexpected argument '" + args.positional().front() + "'");
  }
  const int scale = args.has("--quick") ? 10 : 1;
  const int threads = args.integer(
      "--threads", static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 1, 1024);
  const int repeat = args.integer("--repeat", args.has("--quick") ? 3 : 5, 1, 1000);
  std::vector<bench::Shape> shapes(std::begin(bench::kShapes), std::end(bench::kShapes));
  if (args.has("--scenario")) {
    try {
      shapes = {bench::parse_shape(args.str("--scenario"))};
    } catch (const Error& e) {
      throw UsageError(std::string("--scenario: ") + e.what());
    }
  }
  std::vector<double> costs = {0.0, 1.0, 20.0};
  if (args.has("--cost")) costs = {args.number("--cost", 0, 0, 1e6)};

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
        const graphfile::Program program =
            bench::scenario_program(shape, ops, op_us, static_cast<std::uint32_t>(r + 1));
        tn.push_back(graphfile::run_plain(*naive, program));
        tt.push_back(graphfile::run_plain(*threaded, program));
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
