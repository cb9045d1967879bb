// The input pipeline and the training loop on small synthetic data sets: each epoch visits
// every example once in a seeded order, and a fixed seed trains to bitwise the same weights
// on the naive engine and the threaded engine with 1, 2 and 4 workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "fashion_mnist/trainer.h"

namespace depengine::fashion_mnist {
namespace {

// `count` side×side images; class c has a bright band in row c % 4 and columns up to
// c / 4 + 1, plus noise, so the classes are learnable but not trivially.
std::shared_ptr<const Dataset> synthetic(std::size_t count, unsigned seed, std::size_t side = 4) {
  auto d = std::make_shared<Dataset>();
  d->images.count = count;
  d->images.rows = d->images.cols = side;
  std::mt19937 g(seed);
  for (std::size_t i = 0; i < count; ++i) {
    const auto label = static_cast<std::uint8_t>(g() % kClasses);
    d->labels.push_back(label);
    for (std::size_t p = 0; p < side * side; ++p) {
      const bool band = p / side == label % 4u && (p % side) <= label / 4u + 1;
      d->images.pixels.push_back(static_cast<std::uint8_t>((band ? 150 : 0) + g() % 100));
    }
  }
  return d;
}

// Image i has every pixel equal to i, so a normalized batch (mean 0, stddev 1) tells
// which examples it holds.
std::shared_ptr<const Dataset> indexed(std::size_t count) {
  auto d = std::make_shared<Dataset>();
  d->images.count = count;
  d->images.rows = d->images.cols = 2;
  for (std::size_t i = 0; i < count; ++i) {
    d->labels.push_back(static_cast<std::uint8_t>(i % kClasses));
    for (int p = 0; p < 4; ++p) d->images.pixels.push_back(static_cast<std::uint8_t>(i));
  }
  return d;
}

std::vector<std::size_t> epoch_order(BatchPipeline& pipe, std::uint64_t seed, int epoch) {
  pipe.begin_epoch(seed, epoch);
  std::vector<std::size_t> order;
  for (std::size_t k = 0; k < pipe.batches(); ++k) {
    const BatchPipeline::Batch b = pipe.assemble(k);
    const std::vector<float> x = b.x.to_vector(), y = b.y.to_vector();
    for (std::size_t r = 0; r < b.y.size(); ++r) {
      const auto i = static_cast<std::size_t>(std::lround(x[r * 4] * 255.0f));
      EXPECT_EQ(x[r * 4 + 3], x[r * 4]);
      EXPECT_EQ(y[r], static_cast<float>(i % kClasses));
      order.push_back(i);
    }
  }
  return order;
}

TEST(Pipeline, EachEpochIsASeededPermutation) {
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*engine);
  BatchPipeline pipe(indexed(50), 16, 3, {.mean = 0.0f, .stddev = 1.0f});
  ASSERT_EQ(pipe.batches(), 4u);  // three of 16 and a last one of 2
  const std::vector<std::size_t> e0 = epoch_order(pipe, 7, 0), e1 = epoch_order(pipe, 7, 1);
  std::vector<std::size_t> all(50);
  std::iota(all.begin(), all.end(), 0);
  for (const auto* order : {&e0, &e1}) {
    std::vector<std::size_t> sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, all);
  EXPECT_EQ(epoch_order(pipe, 7, 0), e0);
  pipe.begin_epoch(7, 0, false);
  EXPECT_EQ(pipe.assemble(3).y.to_vector(), (std::vector<float>{8, 9}));
}

TEST(Pipeline, BadArgumentsAreRejected) {
  auto engine = Engine::create("naive");
  EngineScope use(*engine);
  EXPECT_THROW(BatchPipeline(std::make_shared<Dataset>(), 4, 2), Error);
  EXPECT_THROW(BatchPipeline(indexed(10), 0, 2), Error);
  EXPECT_THROW(BatchPipeline(indexed(10), 4, 0), Error);
  BatchPipeline pipe(indexed(10), 4, 2);
  EXPECT_THROW(pipe.assemble(3), Error);
}

struct Trained {
  std::vector<std::vector<float>> params;
  std::vector<double> losses;
  double test_accuracy = 0;
};

// Small by default; `wide` makes images of 16×16 and 300 hidden units, so the GEMMs are
// split into tiles that run in parallel.
// `replay`: steps recorded once per batch buffer and epoch, then replayed.
// The CNN (Adam unless `optimizer` says otherwise, dropout) gets images of 8×8 either way:
// 20 steps of batches of 32.
Trained train(Engine& engine, ModelKind kind, int epochs, bool wide = false, bool replay = false,
              const char* optimizer = nullptr) {
  const bool cnn = kind == ModelKind::cnn;
  const std::size_t side = cnn ? 8 : wide ? 16 : 4;
  Trainer t(engine, synthetic(cnn ? 320 : 300, 1, side), synthetic(100, 2, side),
            {.model = kind, .hidden = wide ? 300u : 32u, .batch = wide && !cnn ? 64u : 32u,
             .lr = cnn ? 0.003f : 0.1f, .optimizer = optimizer ? optimizer : cnn ? "adam" : "sgd", .seed = 5,
             .eval_batch = 40, .replay = replay});
  Trained r;
  for (int e = 0; e < epochs; ++e) {
    const EpochStats s = t.train_epoch(e);
    EXPECT_GT(s.examples_per_s, 0.0);
    EXPECT_GE(s.compute_busy, 0.0);
    EXPECT_LE(s.compute_busy, 1.0);
    r.losses.push_back(s.loss);
  }
  r.test_accuracy = t.evaluate();
  for (const NDArray& p : t.model().parameters()) r.params.push_back(p.to_vector());
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Determinism : public ::testing::TestWithParam<ModelKind> {};

TEST_P(Determinism, SameWeightsOnEveryEngineAndWorkerCount) {
  auto naive = Engine::create("naive");
  const Trained ref = train(*naive, GetParam(), 2, true);
  for (int threads : {1, 2, 4}) {
    auto threaded = Engine::create("threaded", {.cpu_threads = threads});
    const Trained run = train(*threaded, GetParam(), 2, true);
    ASSERT_EQ(run.params.size(), ref.params.size());
    for (std::size_t p = 0; p < ref.params.size(); ++p) {
      EXPECT_TRUE(bitwise_equal(run.params[p], ref.params[p]))
          << "parameter " << p << " differs with " << threads << " workers";
    }
    EXPECT_EQ(run.losses, ref.losses);
    EXPECT_EQ(run.test_accuracy, ref.test_accuracy);
  }
}

// Replayed steps (300 examples in batches of 64: four full buffers' worth and a short last
// batch, over two epochs with different learning rates) give the weights and losses of
// pushed steps, bitwise, on the naive and threaded engines.
// The CNN replays with RMSProp: Adam's bias correction is host state that a replay does not
// see (the trainer refuses it); its dropout masks replay as drawn by pushed steps.
TEST_P(Determinism, ReplayedStepsEqualPushedSteps) {
  const char* optimizer = GetParam() == ModelKind::cnn ? "rmsprop" : nullptr;
  auto naive = Engine::create("naive");
  const Trained ref = train(*naive, GetParam(), 2, true, false, optimizer);
  for (const char* kind : {"naive", "threaded"}) {
    auto e = Engine::create(kind, {.cpu_threads = 2});
    const Trained run = train(*e, GetParam(), 2, true, true, optimizer);
    ASSERT_EQ(run.params.size(), ref.params.size());
    for (std::size_t p = 0; p < ref.params.size(); ++p) {
      EXPECT_TRUE(bitwise_equal(run.params[p], ref.params[p]))
          << "parameter " << p << " differs on " << kind;
    }
    EXPECT_EQ(run.losses, ref.losses);
    EXPECT_EQ(run.test_accuracy, ref.test_accuracy);
  }
}

TEST(Training, ReplayNeedsMoreBufferThanLag) {
  auto engine = Engine::create("naive");
  EXPECT_THROW(Trainer(*engine, synthetic(30, 1), synthetic(10, 2),
                       {.prefetch = 1, .lag = 2, .replay = true}),
               Error);
}

TEST(Training, ReplayRefusesAdam) {
  auto engine = Engine::create("naive");
  try {
    Trainer(*engine, synthetic(30, 1), synthetic(10, 2), {.optimizer = "adam", .replay = true});
    ADD_FAILURE() << "replay with adam accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Determinism,
                         ::testing::Values(ModelKind::softmax, ModelKind::mlp, ModelKind::cnn),
                         [](const auto& p) { return std::string(model_kind_name(p.param)); });

TEST(Training, LossFallsAndTheModelLearns) {
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  const Trained r = train(*engine, ModelKind::mlp, 6);
  EXPECT_LT(r.losses.back(), 0.6 * r.losses.front());
  EXPECT_GT(r.test_accuracy, 0.8);
}

TEST(Training, CnnLossFallsAndTheModelLearns) {
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  const Trained r = train(*engine, ModelKind::cnn, 6);
  EXPECT_LT(r.losses.back(), 0.6 * r.losses.front());
  EXPECT_LT(r.losses.back(), 1.0);
  EXPECT_GT(r.test_accuracy, 0.7);
}

}  // namespace
}  // namespace depengine::fashion_mnist
