// `depengine train`: softmax regression, an MLP or a CNN on Fashion-MNIST, input pipeline and
// training steps pushed to the engine; per epoch loss, accuracies, examples/s and the
// profiler's compute-lane utilization.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "args.h"
#include "commands.h"
#include "fashion_mnist/idx.h"
#include "fashion_mnist/trainer.h"

namespace depengine::cli {
namespace {

namespace fm = depengine::fashion_mnist;

// Bounds past which a value is a typo rather than an experiment (and would exhaust memory
// or train to inf/NaN).
constexpr int kMaxEpochs = 10000;
constexpr std::size_t kMaxBatch = 1 << 20;
constexpr std::size_t kMaxHidden = 1 << 16;
constexpr double kMaxLr = 1000;

struct Options {
  fm::TrainConfig train;
  int epochs = 10;
  std::string engine = "threaded";
  int threads = 0;
  std::string data = fm::kDefaultDir;
  bool profile = false;
  // Where to write the last epoch's Chrome trace ("": nowhere).
  std::string trace;
  // Train and test on at most this many examples of each set (0: all).
  std::size_t limit = 0;
};

void usage() {
  std::printf(
      "usage: depengine train [--model softmax|mlp|cnn] [--epochs N] [--batch B]\n"
      "                       [--engine naive|threaded] [--threads N] [--lr LR]\n"
      "                       [--optimizer sgd|adam|adadelta|rmsprop]\n"
      "                       [--lr-decay D] [--seed S] [--hidden H] [--data DIR]\n"
      "                       [--profile] [--replay] [--limit N] [--trace FILE.json]\n"
      "  trains on Fashion-MNIST (IDX files in DIR, default\n"
      "  %s) and prints per epoch the loss, train and\n"
      "  test accuracy, examples/s and the share of the epoch the compute lane (model\n"
      "  ops) and the pipeline lane (shuffle, batch assembly) were busy.\n"
      "  Defaults: mlp, 10 epochs (1 to %d), batch 256 (1 to %zu), threaded engine\n"
      "  with DEPENGINE_CPU_THREADS or all cores (1 to 1024), lr 0.1 (a finite number in\n"
      "  (0, %g]) times 0.8 per epoch (epoch e uses lr * D^e, D in (0, 1]), seed 42,\n"
      "  hidden width 256 (1 to %zu), optimizer sgd. The cnn (the second source's:\n"
      "  conv 3x3 1->32, relu, conv 3x3 32->64, relu, max-pool 2, dropout 0.25,\n"
      "  dense 128, relu, dropout 0.5, dense 10, log-softmax + NLL) defaults to\n"
      "  batch 64, adam, lr 0.001.\n"
      "  --profile also records each epoch's dependency graph (work, span and\n"
      "  parallelism = work/span from measured op times) and prints the profiler's\n"
      "  tables (per op name, lane, worker) of the last epoch.\n"
      "  --replay records the training step once per batch buffer and epoch\n"
      "  (nd::record) and replays it for the other batches (same results).\n"
      "  --limit N trains on the first N training images and tests on the first N\n"
      "  test images (1 to 60000), for a short run.\n"
      "  --trace FILE.json writes the last epoch's profile as a Chrome trace (every op\n"
      "  of its training, with lane, worker and times; open it in https://ui.perfetto.dev\n"
      "  or plot it with docs/training/plot_utilization.py).\n",
      fm::kDefaultDir, kMaxEpochs, kMaxBatch, kMaxLr, kMaxHidden);
}

// A number in (0, hi] for a float setting: one that rounds to 0 as a float (1e-50) is
// named here, not refused by the trainer after the data is read, naming no flag.
float positive_float(const Args& args, const std::string& flag, float fallback, double hi) {
  const float v = static_cast<float>(args.positive(flag, fallback, hi));
  if (!(v > 0.0f)) {
    const std::string s = args.str(flag);
    char range[32];
    std::snprintf(range, sizeof range, "(0, %g]", hi);
    throw UsageError(flag + " must be a number in " + range + ", got '" + s + "' (as a float, " +
                     s + " is 0)");
  }
  return v;
}

Options parse(const Args& args) {
  if (!args.positional().empty()) {
    throw UsageError("unexpected argument '" + args.positional().front() + "'");
  }
  Options o;
  o.profile = args.has("--profile");
  o.train.record_graph = o.profile;
  o.train.replay = args.has("--replay");
  if (args.has("--model")) {
    o.train.model = fm::parse_model_kind(args.choice("--model", "", {"softmax", "mlp", "cnn"}));
  }
  if (o.train.model == fm::ModelKind::cnn) {
    o.train.batch = 64;
    o.train.optimizer = "adam";
    o.train.lr = 0.001f;
  }
  o.train.optimizer =
      args.choice("--optimizer", o.train.optimizer, {"sgd", "adam", "adadelta", "rmsprop"});
  o.epochs = args.integer("--epochs", o.epochs, 1, kMaxEpochs);
  o.train.batch = args.integer<std::size_t>("--batch", o.train.batch, 1, kMaxBatch);
  o.engine = args.choice("--engine", o.engine, {"naive", "threaded"});
  o.threads = args.integer("--threads", o.threads, 1, 1024);
  o.train.lr = positive_float(args, "--lr", o.train.lr, kMaxLr);
  o.train.lr_decay = positive_float(args, "--lr-decay", o.train.lr_decay, 1);
  o.train.seed = args.integer<std::uint64_t>("--seed", o.train.seed, 0,
                                             std::numeric_limits<std::uint64_t>::max());
  o.train.hidden = args.integer<std::size_t>("--hidden", o.train.hidden, 1, kMaxHidden);
  o.data = args.str("--data", o.data);
  o.limit = args.integer<std::size_t>("--limit", o.limit, 1, 60000);
  if (args.has("--trace")) {
    o.trace = args.str("--trace");
    if (o.trace == "-") {
      throw UsageError("--trace '-': standard output holds the epoch table; name a file");
    }
    // Checked before the data is read and anything trains: a run that cannot write its
    // trace fails in a moment, not after its epochs. A data file is not overwritten.
    std::vector<std::string> inputs;
    for (const char* split : {"train", "t10k"}) {
      for (const char* kind : {"-images-idx3-ubyte.gz", "-labels-idx1-ubyte.gz"}) {
        inputs.push_back(o.data + "/" + split + kind);
      }
    }
    check_distinct_outputs(args, {"--trace"}, inputs);
    check_writable("--trace", o.trace);
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

// The first `limit` examples of `d` (all of them when limit is 0 or at least its size).
std::shared_ptr<const fm::Dataset> head(fm::Dataset d, std::size_t limit) {
  if (limit != 0 && limit < d.size()) {
    d.images.count = limit;
    d.images.pixels.resize(limit * d.images.pixels_per_image());
    d.labels.resize(limit);
  }
  return std::make_shared<const fm::Dataset>(std::move(d));
}

}  // namespace

int train(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    usage();
    return 0;
  }
  const Options o = parse(Args(argc, argv,
                               {"--model", "--epochs", "--batch", "--engine", "--threads", "--lr",
                                "--lr-decay", "--seed", "--hidden", "--data", "--limit",
                                "--optimizer", "--trace"},
                               {"--profile", "--replay"}));

  auto train_set = head(fm::load(o.data, fm::Split::train), o.limit);
  auto test_set = head(fm::load(o.data, fm::Split::test), o.limit);
  auto engine = Engine::create(o.engine, {.cpu_threads = o.threads});
  fm::Trainer trainer(*engine, train_set, test_set, o.train);

  std::printf("depengine train: %s on Fashion-MNIST (%zu train, %zu test), batch %zu, %s lr %g "
              "(x%g per epoch), seed %llu\n"
              "engine %s, %d CPU workers, %u cores; %zu batches per epoch%s\n\n",
              fm::model_kind_name(o.train.model), train_set->size(), test_set->size(),
              o.train.batch, o.train.optimizer.c_str(), static_cast<double>(o.train.lr), static_cast<double>(o.train.lr_decay),
              static_cast<unsigned long long>(o.train.seed), o.engine.c_str(),
              engine->cpu_threads(), std::thread::hardware_concurrency(),
              trainer.batches_per_epoch(), o.train.replay ? "; steps replayed" : "");
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
  if (!o.trace.empty()) {
    trainer.last_profiler()->write_chrome_trace(o.trace);
    std::printf("\nwrote the last epoch's Chrome trace to %s (open in https://ui.perfetto.dev)\n",
                o.trace.c_str());
  }
  return 0;
}

}  // namespace depengine::cli
