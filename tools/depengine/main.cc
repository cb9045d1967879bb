// `depengine COMMAND [ARGS]`: runs scenarios, graph files and experiments on the engine.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include "commands.h"

namespace {

struct Command {
  const char* name;
  const char* help;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"demo", "d2l 13.2: asynchrony, barriers, sync vs async, CPU overlap, memory bound",
     depengine::cli::demo},
    {"train", "softmax regression or an MLP on Fashion-MNIST; accuracy, examples/s, utilization",
     depengine::cli::train},
    {"bench", "per-op overhead and speedup of the naive and threaded engines", depengine::cli::bench},
    {"run", "run a graph file; time, work, span, speedup over naive; dumps and trace",
     depengine::cli::run},
    {"analyze", "work, span, parallelism and critical path of a graph file", depengine::cli::analyze},
    {"generate", "write graph files: cholesky, lu, stencil, tree, forkjoin, random",
     depengine::cli::generate},
};

int usage(std::FILE* out) {
  std::fprintf(out, "usage: depengine COMMAND [ARGS]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out, "\n`depengine COMMAND --help` describes a command's arguments.\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") return usage(stdout);
  for (const Command& c : kCommands) {
    if (name == c.name) {
      try {
        return c.run(argc - 2, argv + 2);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "depengine %s: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "depengine: unknown command '%s'\n\n", argv[1]);
  return usage(stderr);
}
