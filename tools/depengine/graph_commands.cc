// `depengine run`, `depengine analyze` and `depengine generate`: graph files on the command
// line (tools/graphfile holds the loading, running and generating).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "depengine/engine.h"
#include "depengine/graph.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"
#include "graphfile.h"

namespace depengine::cli {
namespace {

namespace gf = depengine::graphfile;

// Bad command-line usage: exit code 2, like a malformed file.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "--name value" flags and positional arguments, checked against what a command accepts.
class Args {
 public:
  Args(int argc, char** argv, std::vector<std::string> valued, std::vector<std::string> switches) {
    for (int i = 0; i < argc; ++i) {
      std::string a = argv[i];
      if (a.size() > 1 && a[0] == '-' && a != "-") {
        std::string value;
        bool has_value = false;
        if (const std::size_t eq = a.find('='); eq != std::string::npos) {
          value = a.substr(eq + 1);
          a = a.substr(0, eq);
          has_value = true;
        }
        if (std::find(switches.begin(), switches.end(), a) != switches.end() && !has_value) {
          flags_[a] = "1";
        } else if (std::find(valued.begin(), valued.end(), a) != valued.end()) {
          if (!has_value) {
            if (i + 1 >= argc) throw UsageError(a + " needs a value");
            value = argv[++i];
          }
          flags_[a] = value;
        } else {
          throw UsageError("unknown option '" + a + "'");
        }
      } else {
        positional_.push_back(a);
      }
    }
  }

  bool has(const std::string& f) const { return flags_.contains(f); }
  std::string str(const std::string& f, std::string fallback = "") const {
    auto it = flags_.find(f);
    return it == flags_.end() ? fallback : it->second;
  }
  long integer(const std::string& f, long fallback, long lo, long hi) const {
    auto it = flags_.find(f);
    if (it == flags_.end()) return fallback;
    long v = 0;
    const std::string& s = it->second;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
      throw UsageError(f + " must be an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got '" + s + "'");
    }
    return v;
  }
  double number(const std::string& f, double fallback) const {
    auto it = flags_.find(f);
    if (it == flags_.end()) return fallback;
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !(v >= 0) || v > gf::kMaxCostUs) {
      throw UsageError(f + " must be a number in [0, 1e9], got '" + it->second + "'");
    }
    return v;
  }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> flags_;
  std::vector<std::string> positional_;
};

// Runs `body`, mapping bad input to exit code 2 with one message.
template <class F>
int guarded(const char* command, F body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "depengine %s: %s (see depengine %s --help)\n", command, e.what(),
                 command);
  } catch (const gf::FileError& e) {
    std::fprintf(stderr, "depengine %s: malformed graph file: %s\n", command, e.what());
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "depengine %s: %s\n", command, e.what());
  }
  return 2;
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
    "A malformed file is reported with its op index and field, exit code 2, nothing run.\n";

constexpr const char* kAnalyzeHelp =
    "usage: depengine analyze FILE|- [--unit] [--levels] [--dot OUT.dot] [--all-edges]\n"
    "                        [--json OUT.json]\n"
    "Analyzes a graph file without running it: work (sum of cost_us), span (the heaviest\n"
    "path) with the ops on it, parallelism = work/span, ops per topological level.\n"
    "--unit weighs every op 1; --levels lists the width of every level.\n";

constexpr const char* kGenerateHelp =
    "usage: depengine generate KIND [SIZES] [--cost-us C] [-o FILE]\n"
    "Writes a graph file (to standard output unless -o) for a well-known DAG:\n"
    "  cholesky  --tiles T                tiled Cholesky, T(T+1)(T+2)/6 ops (default T=4)\n"
    "  lu        --tiles T                tiled LU without pivoting, T(T+1)(2T+1)/6 ops\n"
    "  stencil   --width W --steps S      1-D 3-point stencil, double-buffered (16 x 8)\n"
    "  tree      --leaves N               binary reduction tree (64)\n"
    "  forkjoin  --width W --stages S     fork, W parallel ops, join; S times (8 x 4)\n"
    "  random    --ops N --vars V --reads R --writes W --seed S\n"
    "                                     seeded random DAG (1000 ops, 100 vars, 2, 1, 1)\n"
    "Every op costs C microseconds (default 1000).\n";

bool wants_help(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  }
  return false;
}

int sim_gpus_from(const Args& args) {
  if (args.has("--sim-gpus")) return static_cast<int>(args.integer("--sim-gpus", 0, 0, 64));
  const char* env = std::getenv("DEPENGINE_SIM_GPUS");
  return env && *env ? std::atoi(env) : 0;
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
  return guarded("run", [&] {
    const Args args(argc, argv,
                    {"--engine", "--threads", "--repeat", "--dot", "--json", "--trace",
                     "--sim-gpus"},
                    {"--all-edges", "--no-baseline"});
    const std::string file = one_file(args);
    const std::string kind = args.str("--engine", "threaded");
    if (kind != "naive" && kind != "threaded") {
      throw UsageError("--engine must be naive or threaded, got '" + kind + "'");
    }
    const int threads = static_cast<int>(args.integer("--threads", 0, 1, 1024));
    const int repeat = static_cast<int>(args.integer("--repeat", 1, 1, 1000));
    const int sim_gpus = sim_gpus_from(args);

    // Everything that can be wrong with the input is checked before anything runs.
    const gf::Program program = gf::load_program(file);
    gf::check_devices(program, std::max(Device::gpu_count(), sim_gpus));
    const Graph planned = gf::to_graph(program);
    const GraphAnalysis a = analyze(planned);
    print_analysis(program, planned, a, false);

    const EngineOptions opts{.cpu_threads = threads, .sim_gpus = sim_gpus};
    auto timed = [&](const std::string& engine_kind) {
      auto engine = Engine::create(engine_kind, opts);
      std::vector<double> walls;
      for (int r = 0; r < repeat; ++r) walls.push_back(gf::run(*engine, program));
      return std::make_pair(median(walls), engine->cpu_threads());
    };
    double naive_s = 0;
    if (kind == "threaded" && !args.has("--no-baseline")) {
      naive_s = timed("naive").first;
      std::printf("naive:    %10.3f ms  (median of %d)\n", naive_s * 1e3, repeat);
    }
    const auto [wall_s, workers] = timed(kind);
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
      auto engine = Engine::create(kind, opts);
      engine->set_observer(std::make_shared<ObserverFanout>(
          std::vector<std::shared_ptr<Observer>>{recorder, profiler}));
      const double traced_s = gf::run(*engine, program, recorder.get());
      engine.reset();
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
    const gf::Program program = gf::load_program(one_file(args));
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
                    {"--tiles", "--width", "--steps", "--leaves", "--stages", "--ops", "--vars",
                     "--reads", "--writes", "--seed", "--cost-us", "-o"},
                    {});
    if (args.positional().size() != 1) throw UsageError("expected one KIND");
    const std::string kind = args.positional().front();
    const double cost = args.number("--cost-us", 1000);
    constexpr long kMax = 1000000;
    auto size = [&](const char* flag, long fallback) {
      return static_cast<int>(args.integer(flag, fallback, 0, kMax));
    };
    gf::Program p;
    if (kind == "cholesky") {
      p = gf::generate_cholesky(size("--tiles", 4), cost);
    } else if (kind == "lu") {
      p = gf::generate_lu(size("--tiles", 4), cost);
    } else if (kind == "stencil") {
      p = gf::generate_stencil(size("--width", 16), size("--steps", 8), cost);
    } else if (kind == "tree") {
      p = gf::generate_tree(size("--leaves", 64), cost);
    } else if (kind == "forkjoin") {
      p = gf::generate_forkjoin(size("--width", 8), size("--stages", 4), cost);
    } else if (kind == "random") {
      const auto seed = static_cast<std::uint64_t>(
          args.integer("--seed", 1, 0, std::numeric_limits<long>::max()));
      p = gf::generate_random(size("--ops", 1000), size("--vars", 100), size("--reads", 2),
                              size("--writes", 1), seed, cost);
    } else {
      throw UsageError("unknown KIND '" + kind +
                       "' (expected cholesky, lu, stencil, tree, forkjoin or random)");
    }
    write_text_file(args.str("-o", "-"), gf::to_json(p));
    return 0;
  });
}

}  // namespace depengine::cli
