// `depengine train`: softmax regression or an MLP on Fashion-MNIST, input pipeline and
// training steps pushed to the engine; per epoch loss, accuracies, examples/s and the
// profiler's compute-lane utilization.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "commands.h"
#include "fashion_mnist/idx.h"
#include "fashion_mnist/trainer.h"

namespace depengine::cli {
namespace {

namespace fm = depengine::fashion_mnist;

struct Options {
  fm::TrainConfig train;
  int epochs = 10;
  std::string engine = "threaded";
  int threads = 0;
  std::string data = fm::kDefaultDir;
  bool profile = false;
};

int usage(std::FILE* out) {
  std::fprintf(out,
               "usage: depengine train [--model softmax|mlp] [--epochs N] [--batch B]\n"
               "                       [--engine naive|threaded] [--threads N] [--lr LR]\n"
               "                       [--lr-decay D] [--seed S] [--hidden H] [--data DIR]\n"
               "                       [--profile]\n"
               "  trains on Fashion-MNIST (IDX files in DIR, default\n"
               "  %s) and prints per epoch the loss, train and\n"
               "  test accuracy, examples/s and the share of the epoch the compute lane (model\n"
               "  ops) and the pipeline lane (shuffle, batch assembly) were busy.\n"
               "  Defaults: mlp, 10 epochs, batch 256, threaded engine\n"
               "  with DEPENGINE_CPU_THREADS or all cores, lr 0.1 times 0.8 per epoch\n"
               "  (epoch e uses lr * D^e), seed 42.\n"
               "  --profile also records each epoch's dependency graph (work, span and\n"
               "  parallelism = work/span from measured op times) and prints the profiler's\n"
               "  tables (per op name, lane, worker) of the last epoch.\n",
               fm::kDefaultDir);
  return out == stdout ? 0 : 2;
}

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw Error(std::string(flag) + ": '" + std::string(text) + "' is not a valid number");
  }
  return v;
}

Options parse(int argc, char** argv, bool& help) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
      return o;
    }
    if (arg == "--profile") {
      o.profile = true;
      o.train.record_graph = true;
      continue;
    }
    if (i + 1 >= argc) throw Error("unknown argument or missing value: " + std::string(arg));
    const std::string_view v = argv[++i];
    if (arg == "--model") {
      o.train.model = fm::parse_model_kind(std::string(v));
    } else if (arg == "--epochs") {
      o.epochs = parse_number<int>(arg, v);
      if (o.epochs < 1) throw Error("--epochs must be at least 1");
    } else if (arg == "--batch") {
      o.train.batch = parse_number<std::size_t>(arg, v);
      if (o.train.batch == 0) throw Error("--batch must be at least 1");
    } else if (arg == "--engine") {
      o.engine = v;
      if (o.engine != "naive" && o.engine != "threaded") {
        throw Error("--engine must be naive or threaded, not '" + o.engine + "'");
      }
    } else if (arg == "--threads") {
      o.threads = parse_number<int>(arg, v);
      if (o.threads < 1) throw Error("--threads must be at least 1");
    } else if (arg == "--lr") {
      o.train.lr = parse_number<float>(arg, v);
      if (!(o.train.lr > 0.0f)) throw Error("--lr must be positive");
    } else if (arg == "--lr-decay") {
      o.train.lr_decay = parse_number<float>(arg, v);
      if (!(o.train.lr_decay > 0.0f && o.train.lr_decay <= 1.0f)) {
        throw Error("--lr-decay must be in (0, 1]");
      }
    } else if (arg == "--seed") {
      o.train.seed = parse_number<std::uint64_t>(arg, v);
    } else if (arg == "--hidden") {
      o.train.hidden = parse_number<std::size_t>(arg, v);
      if (o.train.hidden == 0) throw Error("--hidden must be at least 1");
    } else if (arg == "--data") {
      o.data = v;
    } else {
      throw Error("unknown argument: " + std::string(arg));
    }
  }
  return o;
}

// A one-line bar on a terminal; nothing when stdout is a file or a pipe.
class ProgressBar {
 public:
  explicit ProgressBar(int epoch) : epoch_(epoch), tty_(isatty(STDOUT_FILENO) == 1) {}
  void operator()(std::size_t done, std::size_t total) const {
    if (!tty_ || (done % 4 != 0 && done != total)) return;
    constexpr int kWidth = 40;
    const int filled = static_cast<int>(kWidth * done / total);
    std::printf("\r  epoch %d [%.*s%*s] %zu/%zu", epoch_, filled,
                "########################################", kWidth - filled, "", done, total);
    std::fflush(stdout);
  }
  void clear() const {
    if (tty_) std::printf("\r\033[K");
  }

 private:
  int epoch_;
  bool tty_;
};

}  // namespace

int train(int argc, char** argv) {
  bool help = false;
  Options o;
  try {
    o = parse(argc, argv, help);
  } catch (const Error& e) {
    std::fprintf(stderr, "depengine train: %s\n", e.what());
    return usage(stderr);
  }
  if (help) return usage(stdout);

  auto train_set = std::make_shared<const fm::Dataset>(fm::load(o.data, fm::Split::train));
  auto test_set = std::make_shared<const fm::Dataset>(fm::load(o.data, fm::Split::test));
  auto engine = Engine::create(o.engine, {.cpu_threads = o.threads});
  fm::Trainer trainer(*engine, train_set, test_set, o.train);

  std::printf("depengine train: %s on Fashion-MNIST (%zu train, %zu test), batch %zu, lr %g "
              "(x%g per epoch), seed %llu\n"
              "engine %s, %d CPU workers, %u cores; %zu batches per epoch\n\n",
              fm::model_kind_name(o.train.model), train_set->size(), test_set->size(),
              o.train.batch, static_cast<double>(o.train.lr), static_cast<double>(o.train.lr_decay),
              static_cast<unsigned long long>(o.train.seed), o.engine.c_str(),
              engine->cpu_threads(), std::thread::hardware_concurrency(),
              trainer.batches_per_epoch());
  std::printf("%5s %8s %9s %9s %10s %10s %9s %9s\n", "epoch", "loss", "train acc", "test acc",
              "examples/s", "epoch s", "compute", "pipeline");
  double total_examples = 0, total_seconds = 0;
  for (int e = 0; e < o.epochs; ++e) {
    const ProgressBar bar(e + 1);
    const fm::EpochStats s =
        trainer.train_epoch(e, [&](std::size_t d, std::size_t t) { bar(d, t); });
    bar.clear();
    const double test_acc = trainer.evaluate();
    std::printf("%5d %8.4f %8.2f%% %8.2f%% %10.0f %10.2f %8.1f%% %8.1f%%\n", e + 1, s.loss,
                100 * s.train_accuracy, 100 * test_acc, s.examples_per_s, s.seconds,
                100 * s.compute_busy, 100 * s.pipeline_busy);
    if (o.profile) {
      std::printf("      graph: span %.1f ms of %.1f ms, parallelism (work/span) %.2f\n",
                  s.span_ms, 1e3 * s.seconds, s.parallelism);
    }
    std::fflush(stdout);
    total_examples += static_cast<double>(train_set->size());
    total_seconds += s.seconds;
  }
  std::printf("\nmean: %.0f examples/s over %d epochs (training only; compute = share of each "
              "epoch with a model op running, pipeline = the same for shuffle/batch assembly)\n",
              total_examples / total_seconds, o.epochs);
  if (o.profile) {
    std::printf("\nprofile of the last epoch:\n%s", trainer.last_profile().table().c_str());
  }
  return 0;
}

}  // namespace depengine::cli
