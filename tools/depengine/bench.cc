// `depengine bench`: the engine scenarios on the naive and threaded engines, one table.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "floor.h"
#include "machine.h"
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
    "1e6) runs only ops of that cost; --quick runs fewer ops, 3 times.\n\n"
    "Beside them, the machine's floor for an engine that hands each op to a worker: the\n"
    "one-way latency of a cache line between two threads, and per scenario the cost of the\n"
    "least such an engine does (floor.h: allocate the op, update each var's line on push and\n"
    "on finish, pass the op through a spinning single-producer ring), with the threaded\n"
    "engine's cost over it. The cores' distance changes from run to run on a virtual machine,\n"
    "so only figures of the same run compare.\n";

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

  // Measured before the engines exist, so that no pool thread competes for the cores.
  const double line_ns = bench::line_transfer_ns();
  auto naive = Engine::create("naive");
  auto threaded = Engine::create("threaded", {.cpu_threads = threads});
  std::printf("depengine bench: %d worker thread(s), %u core(s), median of %d runs\n", threads,
              std::thread::hardware_concurrency(), repeat);
  std::printf("cache line between two threads: %.0f ns one way\n\n", line_ns);
  std::printf("%-12s %8s %8s %14s %14s %9s %7s %12s %10s\n", "scenario", "op cost", "ops",
              "naive ns/op", "threaded ns/op", "speedup", "ideal", "floor ns/op", "over floor");
  for (bench::Shape shape : shapes) {
    for (double op_us : costs) {
      const int ops = ops_for(op_us, scale);
      std::vector<double> tn, tt, tf;
      for (int r = 0; r < repeat; ++r) {
        const graphfile::Program program =
            bench::scenario_program(shape, ops, op_us, static_cast<std::uint32_t>(r + 1));
        tn.push_back(graphfile::run_plain(*naive, program));
        tt.push_back(graphfile::run_plain(*threaded, program));
        // The floor moves no work, only the hand-off: measured for empty ops only.
        if (op_us == 0) tf.push_back(handoff_floor_ns(program));
      }
      const double n_ns = median(tn) * 1e9 / ops, t_ns = median(tt) * 1e9 / ops;
      char cost[32];
      if (op_us == 0) {
        std::snprintf(cost, sizeof cost, "empty");
      } else {
        std::snprintf(cost, sizeof cost, "%g us", op_us);
      }
      std::printf("%-12s %8s %8d %14.0f %14.0f %8.2fx %6.1fx",
                  std::string(bench::shape_name(shape)).c_str(), cost, ops, n_ns, t_ns,
                  n_ns / t_ns, bench::ideal_speedup(shape, threads));
      if (tf.empty()) {
        std::printf(" %12s %10s\n", "-", "-");
      } else {
        const double f_ns = median(tf);
        std::printf(" %12.0f %9.2fx\n", f_ns, t_ns / f_ns);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace depengine::cli
