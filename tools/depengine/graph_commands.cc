// `depengine run`, `depengine analyze` and `depengine generate`: graph files on the command
// line (workloads/ holds the loading, running and generating).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "args.h"
#include "commands.h"
#include "depengine/engine.h"
#include "depengine/env.h"
#include "depengine/graph.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"
#include "graphfile.h"

namespace depengine::cli {
namespace {

namespace gf = depengine::graphfile;

// Runs `body`; a malformed graph file or a generator size out of range is a usage error
// (exit code 2). Everything else goes to main's handlers (args.h has the rule).
template <class F>
int guarded(const char* command, F body) {
  try {
    return body();
  } catch (const gf::FileError& e) {
    std::fprintf(stderr, "depengine %s: malformed graph file: %s\n", command, e.what());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return kExitUsage;
}

std::string join_path(const std::vector<std::string>& names, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i == limit && names.size() > limit + 1) {
      out += " -> ... (" + std::to_string(names.size() - limit - 1) + " more) -> " + names.back();
      break;
    }
    out += (i ? " -> " : "") + names[i];
  }
  return out;
}

void print_analysis(const gf::Program& p, const Graph& g, const GraphAnalysis& a, bool unit) {
  const std::size_t reduced = g.reduced_edges().size();
  std::printf("graph: %zu ops, %zu vars, %zu edges (%zu in the transitive reduction)\n", a.ops,
              p.vars.size(), a.edges, reduced);
  if (unit) {
    std::printf("work: %.0f ops  span: %.0f ops  parallelism: %.2f  (unit costs)\n", a.work,
                a.span, a.parallelism);
  } else {
    std::printf("work: %.3f ms  span: %.3f ms  parallelism: %.2f  (from cost_us)\n",
                a.work / 1e3, a.span / 1e3, a.parallelism);
  }
  if (a.commute_runs > 0) {
    std::printf("commute runs: %zu, heaviest %.3f %s on %s (one at a time: parallelism uses it "
                "when above the span); reduce runs: %zu\n",
                a.commute_runs, unit ? a.heaviest_commute_run : a.heaviest_commute_run / 1e3,
                unit ? "ops" : "ms", g.var_name(a.heaviest_commute_var).c_str(), a.reduce_runs);
  } else if (a.reduce_runs > 0) {
    // No commute run, so no heaviest one to name (heaviest_commute_var is 0, no var).
    std::printf("commute runs: 0; reduce runs: %zu\n", a.reduce_runs);
  }
  std::printf("levels: %zu, widest %zu\n", a.level_width.size(), a.max_width);
  std::printf("critical path (%zu ops): %s\n", a.critical_path.size(),
              join_path(a.critical_path_names, 12).c_str());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

constexpr const char* kRunHelp =
    "usage: depengine run FILE|- [--engine naive|threaded] [--threads N] [--repeat K]\n"
    "                    [--dot OUT.dot] [--all-edges] [--json OUT.json] [--trace OUT.json]\n"
    "                    [--sim-gpus N] [--no-baseline]\n"
    "Runs a graph file (or a graph JSON dump; - reads standard input): each op busy-waits\n"
    "for its cost_us. Prints work, span and parallelism from the costs, the wall time\n"
    "(median of K runs) and the measured speedup over the naive engine beside the bound\n"
    "min(parallelism, threads). --dot/--json/--trace record one more run: the dependency\n"
    "graph (DOT shows the transitive reduction unless --all-edges; costs are the measured\n"
    "times) and a Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing).\n"
    "A malformed file is reported with its op index and field, exit code 2, nothing run;\n"
    "a FILE that cannot be read, or an output that cannot be written, exits 1, also before\n"
    "anything runs. DEPENGINE_SIM_GPUS (0 to 64) is the default of --sim-gpus.\n"
    "Under mpirun (built with MPI): `mpirun -np P depengine run FILE [--block B] [--bytes N]\n"
    "[--trace OUT.json]` runs it across the ranks (docs/distributed.md).\n";

constexpr const char* kAnalyzeHelp =
    "usage: depengine analyze FILE|- [--unit] [--levels] [--dot OUT.dot] [--all-edges]\n"
    "                        [--json OUT.json]\n"
    "Analyzes a graph file without running it: work (sum of cost_us), span (the heaviest\n"
    "path) with the ops on it, parallelism = work/span, ops per topological level.\n"
    "--unit weighs every op 1; --levels lists the width of every level.\n";

constexpr const char* kGenerateHelp =
    "usage: depengine generate KIND [SIZES] [--cost-us C] [-o FILE]\n"
    "Writes a graph file (to standard output unless -o) for a well-known DAG:\n"
    "  cholesky  --tiles T [--repeats K]  tiled Cholesky, T(T+1)(T+2)/6 ops (default T=4),\n"
    "                                     K factorizations of the same tiles (1)\n"
    "  lu        --tiles T                tiled LU without pivoting, T(T+1)(2T+1)/6 ops\n"
    "  stencil   --width W --steps S      1-D 3-point stencil, double-buffered (16 x 8)\n"
    "  tree      --leaves N [--rounds K]  binary reduction tree (64); K reductions, each\n"
    "                                     round's leaves reading the last root (1)\n"
    "  forkjoin  --width W --stages S     fork, W parallel ops, join; S times (8 x 4)\n"
    "  random    --ops N --vars V --reads R --writes W --seed S\n"
    "                                     seeded random DAG (1000 ops, 100 vars, 2, 1, 1)\n"
    "  chain     --width W --steps S      W independent chains of S ops (1 x 1000)\n"
    "  independent --ops N                N ops, each writing its own var (1000)\n"
    "  fan       --ops N                  blocks of one write, 1000 reads of it, one write\n"
    "                                     (2004)\n"
    "  nearest | spread | fft  --width W --steps S\n"
    "                                     Task Bench's grids without an init row: 5 nearest,\n"
    "                                     5 spread, butterfly (W a power of two) (16 x 8)\n"
    "Every op costs C microseconds (default 1000). A file may hold at most 10^7 var\n"
    "accesses (reads + writes over all ops); larger sizes are refused up front.\n";

// The library's cap on host-simulated GPUs (DEPENGINE_SIM_GPUS).
constexpr int kMaxSimGpus = 64;

int sim_gpus_from(const Args& args) {
  if (args.has("--sim-gpus")) return args.integer("--sim-gpus", 0, 0, kMaxSimGpus);
  return static_cast<int>(env_long("DEPENGINE_SIM_GPUS", 0, kMaxSimGpus, 0));
}

// The output flags a command accepts that are given, checked to be distinct, not the input
// file and writable before the command does any work.
void check_outputs(const Args& args, const std::vector<std::string>& flags,
                   const std::vector<std::string>& inputs = {}) {
  check_distinct_outputs(args, flags, inputs);
  for (const std::string& f : flags) {
    if (args.has(f)) check_writable(f, args.str(f));
  }
}

std::string one_file(const Args& args) {
  if (args.positional().size() != 1) throw UsageError("expected exactly one FILE (or -)");
  return args.positional().front();
}

}  // namespace

int run(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kRunHelp, stdout);
    return 0;
  }
#if DEPENGINE_CLI_MPI
  if (under_mpirun()) return guarded("run", [&] { return run_dist(argc, argv); });
#endif
  return guarded("run", [&] {
    const Args args(argc, argv,
                    {"--engine", "--threads", "--repeat", "--dot", "--json", "--trace",
                     "--sim-gpus"},
                    {"--all-edges", "--no-baseline"});
    const std::string file = one_file(args);
    const std::string kind = args.choice("--engine", "threaded", {"naive", "threaded"});
    const int threads = args.integer("--threads", 0, 1, 1024);
    const int repeat = args.integer("--repeat", 1, 1, 1000);
    const int sim_gpus = sim_gpus_from(args);

    // Everything that can be wrong with the input, and every output, is checked before
    // anything runs.
    const gf::Program program = gf::load_program(file);
    gf::check_devices(program, std::max(Device::gpu_count(), sim_gpus));
    check_outputs(args, {"--dot", "--json", "--trace"}, {file});
    // Made up front so that a bad DEPENGINE_* variable is reported before anything runs.
    const EngineOptions opts{.cpu_threads = threads, .sim_gpus = sim_gpus};
    const bool baseline = kind == "threaded" && !args.has("--no-baseline");
    const auto naive_engine = baseline ? Engine::create("naive", opts) : nullptr;
    const auto engine = Engine::create(kind, opts);

    const Graph planned = gf::to_graph(program);
    const GraphAnalysis a = analyze(planned);
    print_analysis(program, planned, a, false);

    auto timed = [&](Engine& e) {
      std::vector<double> walls;
      for (int r = 0; r < repeat; ++r) walls.push_back(gf::run(e, program));
      return median(walls);
    };
    double naive_s = 0;
    if (naive_engine) {
      naive_s = timed(*naive_engine);
      std::printf("naive:    %10.3f ms  (median of %d)\n", naive_s * 1e3, repeat);
    }
    const double wall_s = timed(*engine);
    const int workers = engine->cpu_threads();
    std::printf("%-8s  %10.3f ms  (median of %d, %d worker thread%s)\n", (kind + ":").c_str(),
                wall_s * 1e3, repeat, workers, workers == 1 ? "" : "s");
    const double bound = kind == "naive" ? 1.0 : std::min(a.parallelism, double(workers));
    if (naive_s > 0 && wall_s > 0) {
      const double speedup = naive_s / wall_s;
      std::printf("speedup over naive: %.2fx; bound min(parallelism, threads) = %.2fx (%.0f%% of "
                  "it)\n",
                  speedup, bound, bound > 0 ? 100 * speedup / bound : 0.0);
    } else if (wall_s > 0 && a.work > 0) {
      std::printf("work / wall: %.2fx; bound min(parallelism, threads) = %.2fx\n",
                  a.work / 1e6 / wall_s, bound);
    }

    if (args.has("--dot") || args.has("--json") || args.has("--trace")) {
      auto recorder = std::make_shared<GraphRecorder>();
      auto profiler = std::make_shared<Profiler>();
      auto recorded = Engine::create(kind, opts);
      recorded->set_observer(std::make_shared<ObserverFanout>(
          std::vector<std::shared_ptr<Observer>>{recorder, profiler}));
      const double traced_s = gf::run(*recorded, program, recorder.get());
      recorded.reset();
      std::printf("recorded run: %.3f ms\n", traced_s * 1e3);
      if (args.has("--dot")) {
        recorder->write_dot(args.str("--dot"), {.transitive_reduction = !args.has("--all-edges")});
        std::printf("wrote the graph (DOT) to %s\n", args.str("--dot").c_str());
      }
      if (args.has("--json")) {
        recorder->write_json(args.str("--json"));
        std::printf("wrote the graph (JSON) to %s\n", args.str("--json").c_str());
      }
      if (args.has("--trace")) {
        profiler->write_chrome_trace(args.str("--trace"));
        std::printf("wrote the Chrome trace to %s (open in https://ui.perfetto.dev)\n%s",
                    args.str("--trace").c_str(), profiler->summary().table().c_str());
      }
    }
    return 0;
  });
}

int analyze(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kAnalyzeHelp, stdout);
    return 0;
  }
  return guarded("analyze", [&] {
    const Args args(argc, argv, {"--dot", "--json"}, {"--unit", "--levels", "--all-edges"});
    const std::string file = one_file(args);
    const gf::Program program = gf::load_program(file);
    check_outputs(args, {"--dot", "--json"}, {file});
    const Graph g = gf::to_graph(program);
    const bool unit = args.has("--unit");
    const GraphAnalysis a = depengine::analyze(g, {.unit_costs = unit});
    print_analysis(program, g, a, unit);
    if (args.has("--levels")) {
      std::printf("width per level:");
      for (std::size_t i = 0; i < a.level_width.size(); ++i) {
        std::printf("%s%zu", i % 20 ? " " : "\n ", a.level_width[i]);
      }
      std::printf("\n");
    }
    if (args.has("--dot")) {
      write_text_file(args.str("--dot"), g.to_dot({.transitive_reduction = !args.has("--all-edges")}));
    }
    if (args.has("--json")) write_text_file(args.str("--json"), g.to_json());
    return 0;
  });
}

int generate(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kGenerateHelp, stdout);
    return 0;
  }
  return guarded("generate", [&] {
    const Args args(argc, argv,
                    {"--tiles", "--repeats", "--width", "--steps", "--leaves", "--rounds",
                     "--stages", "--ops", "--vars", "--reads", "--writes", "--seed",
                     "--cost-us", "-o"},
                    {});
    if (args.positional().size() != 1) throw UsageError("expected one KIND");
    const std::string kind = args.positional().front();
    const double cost = args.number("--cost-us", 1000, 0, gf::kMaxCostUs);
    // Any int is taken here: the generators check each size, and the file's total size,
    // against their own ranges, and name them.
    auto size = [&](const char* flag, int fallback) {
      const long long v = args.any_integer<long long>(flag, fallback);
      if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
        throw UsageError(std::string(flag) + " is out of range, got '" + args.str(flag) + "'");
      }
      return static_cast<int>(v);
    };
    check_outputs(args, {"-o"});
    gf::Program p;
    if (kind == "cholesky") {
      p = gf::generate_cholesky(size("--tiles", 4), cost, size("--repeats", 1));
    } else if (kind == "lu") {
      p = gf::generate_lu(size("--tiles", 4), cost);
    } else if (kind == "stencil") {
      p = gf::generate_stencil(size("--width", 16), size("--steps", 8), cost);
    } else if (kind == "tree") {
      p = gf::generate_tree(size("--leaves", 64), cost, size("--rounds", 1));
    } else if (kind == "forkjoin") {
      p = gf::generate_forkjoin(size("--width", 8), size("--stages", 4), cost);
    } else if (kind == "random") {
      const auto seed = args.integer<std::uint64_t>("--seed", 1, 0,
                                                     std::numeric_limits<std::uint64_t>::max());
      p = gf::generate_random(size("--ops", 1000), size("--vars", 100), size("--reads", 2),
                              size("--writes", 1), seed, cost);
    } else if (kind == "chain") {
      p = gf::generate_chain(size("--width", 1), size("--steps", 1000), cost);
    } else if (kind == "independent") {
      p = gf::generate_independent(size("--ops", 1000), cost);
    } else if (kind == "fan") {
      p = gf::generate_fan(size("--ops", 2 * (gf::kFanReads + 2)), cost);
    } else if (kind == "nearest" || kind == "spread" || kind == "fft") {
      const gf::GridPattern g = kind == "nearest"  ? gf::GridPattern::nearest
                                : kind == "spread" ? gf::GridPattern::spread
                                                   : gf::GridPattern::fft;
      p = gf::generate_grid(g, size("--width", 16), size("--steps", 8), cost);
    } else {
      throw UsageError("unknown KIND '" + kind +
                       "' (expected cholesky, lu, stencil, tree, forkjoin, random, chain, "
                       "independent, fan, nearest, spread or fft)");
    }
    write_text_file(args.str("-o", "-"), gf::to_json(p));
    return 0;
  });
}

}  // namespace depengine::cli
