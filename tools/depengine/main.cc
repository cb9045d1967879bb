// `depengine COMMAND [ARGS]`: runs scenarios, graph files and experiments on the engine.
// Exit codes (the rule is in args.h): 0 success, 1 runtime failure, 2 usage error.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string_view>

#include "args.h"
#include "commands.h"
#include "depengine/env.h"

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
  std::fprintf(out,
               "\n`depengine COMMAND --help` describes a command's arguments.\n"
               "Exit codes: 0 success, 1 runtime failure (I/O, out of memory, a failed op),\n"
               "2 usage error (bad flag or value, bad DEPENGINE_* variable, malformed file).\n");
  return out == stdout ? 0 : 2;
}

// Runs a command, mapping what it throws to one line on stderr and an exit code.
int run_command(const Command& c, int argc, char** argv) {
  using namespace depengine::cli;
  try {
    return c.run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "depengine %s: %s (see depengine %s --help)\n", c.name, e.what(), c.name);
    return kExitUsage;
  } catch (const depengine::EnvError& e) {
    std::fprintf(stderr, "depengine %s: %s\n", c.name, e.what());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "depengine %s: out of memory\n", c.name);
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "depengine %s: %s\n", c.name, e.what());
    return kExitFailure;
  }
}

// Output that did not reach standard output (a full disk, a closed pipe) turns success
// into a failure. A command that already failed has said why in its one line.
int check_stdout(const char* command, int code) {
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (code != 0 || (!flush_failed && !std::ferror(stdout))) return code;
  std::fprintf(stderr, "depengine %s: cannot write standard output%s%s\n", command,
               flush_failed && err ? ": " : "", flush_failed && err ? std::strerror(err) : "");
  return depengine::cli::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    return check_stdout("help", usage(stdout));
  }
  for (const Command& c : kCommands) {
    if (name == c.name) return check_stdout(c.name, run_command(c, argc - 2, argv + 2));
  }
  std::fprintf(stderr, "depengine: unknown command '%s'\n\n", argv[1]);
  return usage(stderr);
}
