#include "fashion_mnist/trainer.h"

#include <chrono>
#include <cmath>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "depengine/graph.h"
#include "depengine/nn.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"
#include "depengine/record.h"

namespace depengine::fashion_mnist {
namespace {

ModelConfig model_config(const Dataset& train, const TrainConfig& c) {
  return {.kind = c.model,
          .inputs = train.images.pixels_per_image(),
          .hidden = c.hidden,
          .classes = static_cast<std::size_t>(kClasses),
          .rows = train.images.rows,
          .cols = train.images.cols,
          .optimizer = c.optimizer};
}

const std::shared_ptr<const Dataset>& check_shapes(const std::shared_ptr<const Dataset>& train,
                                                   const std::shared_ptr<const Dataset>& test) {
  if (!train || !test) throw Error("Trainer: a data set is missing");
  if (train->images.pixels_per_image() != test->images.pixels_per_image()) {
    throw Error("Trainer: training images have " +
                std::to_string(train->images.pixels_per_image()) + " pixels, test images " +
                std::to_string(test->images.pixels_per_image()));
  }
  return train;
}

// Attaches an observer for one epoch and detaches it however the epoch ends.
class Observing {
 public:
  Observing(Engine& e, std::shared_ptr<Observer> o) : engine_(e) { e.set_observer(std::move(o)); }
  ~Observing() { engine_.set_observer(nullptr); }
  Observing(const Observing&) = delete;
  Observing& operator=(const Observing&) = delete;

 private:
  Engine& engine_;
};

double busy(const ProfileSummary& s, Lane lane) {
  for (const LaneSummary& l : s.by_lane) {
    if (l.device.is_cpu() && l.lane == lane) return l.busy_fraction;
  }
  return 0.0;
}

}  // namespace

Trainer::Trainer(Engine& engine, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, TrainConfig config)
    : engine_(engine),
      scope_(engine),
      config_(config),
      model_(model_config(*check_shapes(train, test), config), config.seed),
      train_pipe_(std::move(train), config.batch, config.prefetch + 1, config.norm),
      test_pipe_(std::move(test), config.eval_batch, 2, config.norm) {
  if (config_.prefetch < 0 || config_.lag < 0) {
    throw Error("Trainer: prefetch and lag must not be negative");
  }
  if (config_.replay && config_.lag >= config_.prefetch + 1) {
    throw Error("Trainer: replay needs lag < prefetch + 1 (a batch buffer's step outputs are "
                "rewritten by its next replay, before the loop would read them)");
  }
  if (config_.replay && config_.optimizer == "adam") {
    throw Error("Trainer: replay cannot use adam: its bias correction changes the learning rate "
                "every step on the host, which a replayed step does not see (use sgd, adadelta "
                "or rmsprop)");
  }
  if (!(config_.lr > 0.0f)) throw Error("Trainer: the learning rate must be positive");
  if (!(config_.lr_decay > 0.0f && config_.lr_decay <= 1.0f)) {
    throw Error("Trainer: the learning-rate decay must be in (0, 1]");
  }
}

EpochStats Trainer::train_epoch(int epoch,
                                const std::function<void(std::size_t, std::size_t)>& progress) {
  using Clock = std::chrono::steady_clock;
  engine_.wait_all();
  auto profiler = std::make_shared<Profiler>();
  auto recorder = config_.record_graph ? std::make_shared<GraphRecorder>() : nullptr;
  std::vector<std::shared_ptr<Observer>> observers{profiler, recorder};
  std::optional<Observing> observing(std::in_place, engine_,
                                     std::make_shared<ObserverFanout>(std::move(observers)));
  const auto t0 = Clock::now();

  const float lr = config_.lr * std::pow(config_.lr_decay, static_cast<float>(epoch));
  const std::size_t nb = train_pipe_.batches();
  const std::size_t prefetch = static_cast<std::size_t>(config_.prefetch);
  train_pipe_.begin_epoch(config_.seed, epoch);
  std::deque<BatchPipeline::Batch> ready;
  for (std::size_t k = 0; k < std::min(prefetch, nb); ++k) ready.push_back(train_pipe_.assemble(k));

  struct InFlight {
    Model::Step step;
    std::size_t rows;
  };
  // With replay: the step recorded for each batch buffer this epoch (the learning rate is
  // part of it), keyed by the buffer's var, and the arrays its replays rewrite.
  struct Recorded {
    std::uint64_t buffer;
    nd::Segment segment;
    Model::Step out;
  };
  std::vector<Recorded> recorded;
  auto train_step = [&](const BatchPipeline::Batch& b) -> Model::Step {
    if (!config_.replay) return model_.train_step(b.x, b.y, lr);
    for (const Recorded& r : recorded) {
      if (r.buffer == b.x.var().id()) {
        nd::replay(r.segment, {b.x, b.y});
        return r.out;
      }
    }
    Recorded r{b.x.var().id(), {}, {}};
    r.segment = nd::record({b.x, b.y}, [&] { r.out = model_.train_step(b.x, b.y, lr); });
    recorded.push_back(r);
    return r.out;
  };
  std::deque<InFlight> in_flight;
  double loss_sum = 0, correct = 0;
  std::size_t done = 0;
  auto collect = [&] {
    const InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    loss_sum += static_cast<double>(f.step.loss.item()) * static_cast<double>(f.rows);
    correct += f.step.correct.item();
    if (progress) progress(++done, nb);
  };
  for (std::size_t k = 0; k < nb; ++k) {
    if (k + prefetch < nb) ready.push_back(train_pipe_.assemble(k + prefetch));
    const BatchPipeline::Batch b = prefetch == 0 ? train_pipe_.assemble(k) : ready.front();
    if (prefetch > 0) ready.pop_front();
    in_flight.push_back({train_step(b), b.x.shape()[0]});
    while (in_flight.size() > static_cast<std::size_t>(config_.lag)) collect();
  }
  while (!in_flight.empty()) collect();
  engine_.wait_all();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  observing.reset();

  last_profile_ = profiler->summary();
  last_profiler_ = std::move(profiler);
  const ProfileSummary& summary = last_profile_;
  const double n = static_cast<double>(train_pipe_.data().size());
  GraphAnalysis graph;
  if (recorder) graph = analyze(recorder->graph());
  return {.lr = lr,
          .loss = loss_sum / n,
          .train_accuracy = correct / n,
          .seconds = seconds,
          .examples_per_s = n / seconds,
          .compute_busy = busy(summary, Lane::compute),
          .pipeline_busy = busy(summary, Lane::copy_to_device),
          .parallelism = graph.parallelism,
          .span_ms = graph.span / 1e3};
}

double Trainer::evaluate() {
  test_pipe_.begin_epoch(0, 0, false);
  std::vector<NDArray> counts;
  for (std::size_t k = 0; k < test_pipe_.batches(); ++k) {
    const BatchPipeline::Batch b = test_pipe_.assemble(k);
    counts.push_back(nd::count_correct(model_.forward(b.x), b.y));
  }
  double correct = 0;
  for (const NDArray& c : counts) correct += c.item();
  return correct / static_cast<double>(test_pipe_.data().size());
}

}  // namespace depengine::fashion_mnist
