// fashion_mnist/trainer.h — the training loop: per epoch, the input pipeline and the model's
// steps pushed to one engine, with the profiler attached to measure lane utilization.
//
//   auto engine = depengine::Engine::create("threaded", {.cpu_threads = 2});
//   Trainer t(*engine, train, test, {.model = ModelKind::mlp, .batch = 256, .lr = 0.1f});
//   for (int e = 0; e < 10; ++e) {
//     EpochStats s = t.train_epoch(e);
//     std::printf("%d %.4f %.3f %.3f\n", e, s.loss, s.train_accuracy, t.evaluate());
//   }
//
// The loop keeps at most `lag` steps in flight ahead of the one whose loss it reads, which
// bounds memory and drives the progress callback. A Trainer makes an EngineScope for its
// engine on the constructing thread and must be used and destroyed on that thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "depengine/engine.h"
#include "depengine/ndarray.h"
#include "depengine/profiler.h"
#include "fashion_mnist/model.h"
#include "fashion_mnist/pipeline.h"

namespace depengine::fashion_mnist {

struct TrainConfig {
  ModelKind model = ModelKind::mlp;
  std::size_t hidden = 256;
  std::size_t batch = 256;
  float lr = 0.1f;
  // gluon::Trainer's optimizer: "sgd", "adam", "adadelta" or "rmsprop".
  std::string optimizer = "sgd";
  // Epoch e trains with lr · lr_decay^e: large steps early, small ones to settle.
  float lr_decay = 0.8f;
  std::uint64_t seed = 42;
  // Batches assembled ahead of the one training (2: triple buffering).
  int prefetch = 2;
  // Steps pushed ahead of the one whose loss the loop reads.
  int lag = 2;
  std::size_t eval_batch = 1000;
  // Also record each epoch's dependency graph and analyze it (EpochStats::parallelism).
  bool record_graph = false;
  // Record the step once per batch buffer and epoch (nd::record) and replay it for the
  // later batches in that buffer; the same values as pushing every step. Needs
  // lag < prefetch + 1: a buffer's step outputs are rewritten by its next replay; and not
  // adam, whose per-step learning rate is host state.
  bool replay = false;
  Normalization norm{};
};

struct EpochStats {
  double lr = 0;              // the learning rate the epoch used
  double loss = 0;            // mean training loss over the epoch's examples
  double train_accuracy = 0;  // share predicted right by the model as it trained
  double seconds = 0;         // wall time of the epoch's training (no evaluation)
  double examples_per_s = 0;
  double compute_busy = 0;    // profiler: share of the epoch a compute-lane op was running
  double pipeline_busy = 0;   // the same for the input pipeline's lane
  // With record_graph: work / span of the epoch's graph weighted by measured op times, the
  // speedup any schedule could reach over running the ops one after another; else 0.
  double parallelism = 0;
  double span_ms = 0;
};

class Trainer {
 public:
  Trainer(Engine& engine, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, TrainConfig config);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One epoch over the training set in the order seeded by (seed, epoch). `progress` (if
  // set) is called with (batches done, batches) as the loop learns of finished steps.
  EpochStats train_epoch(int epoch,
                         const std::function<void(std::size_t, std::size_t)>& progress = {});
  // Accuracy on the test set (blocks).
  double evaluate();

  const Model& model() const noexcept { return model_; }
  // The profiler's summary of the last train_epoch (per op name, lane and worker).
  const ProfileSummary& last_profile() const noexcept { return last_profile_; }
  // The profiler that observed the last train_epoch (every op it pushed, from the first
  // batch's assembly to the last step; not evaluate()'s), e.g. for its Chrome trace:
  // trainer.last_profiler()->write_chrome_trace("epoch.json"). Null before the first epoch.
  std::shared_ptr<const Profiler> last_profiler() const noexcept { return last_profiler_; }
  std::size_t batches_per_epoch() const noexcept { return train_pipe_.batches(); }

 private:
  Engine& engine_;
  EngineScope scope_;
  TrainConfig config_;
  Model model_;
  BatchPipeline train_pipe_;
  BatchPipeline test_pipe_;
  ProfileSummary last_profile_;
  std::shared_ptr<const Profiler> last_profiler_;
};

}  // namespace depengine::fashion_mnist
