// nd::record / nd::replay: a recorded training step replayed with new inputs gives the same
// values, bitwise, as the step run eagerly, on the naive and threaded engines, on a
// simulated GPU and on a CUDA device (a CUDA graph; skipped without one); the arrays of the
// region outlive it; inputs are checked at replay.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "depengine/ndarray.h"
#include "depengine/nn.h"
#include "depengine/record.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::expect_error;

struct Param {
  std::string kind;
  int threads;
  bool gpu;
  bool cuda = false;  // a CUDA device (skipped when none), else the simulated one
  friend void PrintTo(const Param& p, std::ostream* os) {
    *os << p.kind << "/" << p.threads << (p.cuda ? "/cuda" : p.gpu ? "/simgpu" : "");
  }
};

class Record : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (GetParam().cuda && Device::gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int sim = GetParam().gpu && !GetParam().cuda ? 1 : 0;
    engine_ = Engine::create(GetParam().kind, {.cpu_threads = GetParam().threads, .sim_gpus = sim});
    scope_ = std::make_unique<EngineScope>(*engine_);
  }
  void TearDown() override {
    scope_.reset();
    engine_.reset();
  }
  Device device() const { return GetParam().gpu ? Device::gpu(0) : Device::cpu(); }

  // Batch k: small integers, so that every result is exact.
  NDArray batch(int k) const {
    std::vector<float> v(8 * 4);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((static_cast<int>(i) * 7 + k * 3) % 5) - 2;
    return nd::array(v, {8, 4}, device());
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineScope> scope_;
};

// One step: relu(x·w) summed, and w -= 0.25 · xᵀ·relu(x·w); temporaries made inside.
NDArray step(const NDArray& x, NDArray& w) {
  const NDArray h = nd::relu(nd::dot(x, w));
  NDArray grad = nd::dot(nd::transpose(x), h);
  grad *= 0.25f;
  w -= grad;
  return nd::sum(h);
}

TEST_P(Record, ReplayWithNewInputsEqualsEagerSteps) {
  constexpr int kSteps = 5;
  std::vector<float> eager_losses, replay_losses;
  NDArray w_eager = nd::full({4, 3}, 0.5f, device());
  for (int k = 0; k < kSteps; ++k) eager_losses.push_back(step(batch(k), w_eager).to_vector().at(0));

  NDArray w = nd::full({4, 3}, 0.5f, device());
  NDArray x = batch(0);
  NDArray loss;
  nd::Segment seg = nd::record({x}, [&] { loss = step(x, w); });
  // dot, relu, transpose, dot, *=, -=, sum (and a CUDA device's allocations): on a GPU all
  // on the compute stream, so replays launch them as one.
  EXPECT_GE(seg.ops().size(), 7u);
  EXPECT_EQ(seg.ops().one_stream(), GetParam().gpu);
  replay_losses.push_back(loss.to_vector().at(0));
  for (int k = 1; k < kSteps; ++k) {
    nd::replay(seg, {batch(k)});
    replay_losses.push_back(loss.to_vector().at(0));
  }
  EXPECT_EQ(replay_losses, eager_losses);
  EXPECT_EQ(w.to_vector(), w_eager.to_vector());
}

TEST_P(Record, ArraysOfTheRegionOutliveItAndReplayWithoutInputsReusesThem) {
  NDArray acc = nd::zeros({3}, device());
  nd::Segment seg;
  {
    NDArray one = nd::ones({3}, device());
    seg = nd::record([&] {
      NDArray t = nd::add(one, one);  // a temporary, dropped inside the region
      acc += t;
    });
  }  // `one` dropped too: the segment keeps it
  for (int i = 0; i < 3; ++i) nd::replay(seg);
  EXPECT_EQ(acc.to_vector(), (std::vector<float>{8, 8, 8}));
}

TEST_P(Record, InputsAreCheckedAtReplay) {
  NDArray x = nd::zeros({2, 3}, device());
  NDArray y;
  nd::Segment seg = nd::record({x}, [&] { y = nd::add(x, x); });
  expect_error([&] { nd::replay(seg, {nd::zeros({3, 2}, device())}); },
               {"nd::replay: input 0 has shape (3, 2)", "recorded with (2, 3)"});
  expect_error([&] { nd::replay(seg, {x.reshape({3, 2})}); }, "has shape (3, 2)");
  expect_error([&] { nd::replay(seg, {}); }, "0 inputs given, the segment was recorded with 1");
  expect_error([&] { nd::replay(seg, {NDArray{}}); }, "null");
  expect_error([&] { nd::replay(nd::Segment{}, {}); }, "not recorded");
  if (GetParam().gpu) {
    expect_error([&] { nd::replay(seg, {nd::zeros({2, 3})}); }, "is on cpu");
  }
  nd::replay(seg, {x});  // the recorded input itself: nothing copied
  nd::replay(seg, {nd::ones({2, 3}, device())});
  EXPECT_EQ(y.to_vector(), std::vector<float>(6, 2));
}

// Inputs given as each other's recorded arrays are bound to their values before the replay,
// as a function call binds its arguments: with the copies pushed one after another,
// replay(seg, {y, x}) copied y into x and then that new x into y, so both held y.
TEST_P(Record, InputsThatAreOtherRecordedInputsAreBoundToTheirOldValues) {
  NDArray x = nd::array({1, 2}, {2}, device());
  NDArray y = nd::array({10, 20}, {2}, device());
  NDArray d;
  nd::Segment seg = nd::record({x, y}, [&] { d = x - y; });
  EXPECT_EQ(d.to_vector(), (std::vector<float>{-9, -18}));
  nd::replay(seg, {y, x});  // swapped
  EXPECT_EQ(d.to_vector(), (std::vector<float>{9, 18}));
  EXPECT_EQ(x.to_vector(), (std::vector<float>{10, 20}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2}));
  nd::replay(seg, {y, y});  // y's value bound to both
  EXPECT_EQ(d.to_vector(), (std::vector<float>{0, 0}));
  EXPECT_EQ(x.to_vector(), (std::vector<float>{1, 2}));
  // x gets a new value and y gets x's old one, not the new.
  nd::replay(seg, {nd::array({3, 4}, {2}, device()), x});
  EXPECT_EQ(d.to_vector(), (std::vector<float>{2, 2}));
}

// The generator of the EngineScope that a segment's random ops drew from is kept by the
// segment, as its arrays are: replaying after that scope ended failed with "push
// 'random_uniform': var #n was deleted", after pushing the ops before it (acc += 1 ran).
TEST_P(Record, RandomOpsReplayAfterTheirScopeEnds) {
  NDArray acc = nd::zeros({4}, device());
  NDArray r;
  nd::Segment seg;
  {
    EngineScope inner(*engine_);
    seg = nd::record([&] {
      acc += 1.0f;
      r = nd::random_uniform({4}, 0.0f, 1.0f, device());
    });
  }
  const std::vector<float> first = r.to_vector();
  nd::replay(seg);
  EXPECT_EQ(acc.to_vector(), std::vector<float>(4, 2.0f));
  // The replay drew the generator's next numbers: a fresh scope's second draw.
  EngineScope fresh(*engine_);
  EXPECT_EQ(nd::random_uniform({4}, 0.0f, 1.0f, device()).to_vector(), first);
  EXPECT_EQ(nd::random_uniform({4}, 0.0f, 1.0f, device()).to_vector(), r.to_vector());
}

TEST_P(Record, BlockingInsideTheRegionIsAnError) {
  NDArray x = nd::ones({2}, device());
  expect_error([&] { (void)nd::record([&] { (void)nd::sum(x).to_vector(); }); },
               {"record", "wait_to_read"});
  expect_error([&] { (void)nd::record([&] { waitall(); }); }, {"record", "wait_all"});
  expect_error([&] { (void)nd::record([&] { (void)nd::record([] {}); }); }, "nest");
  // The engine and the arrays are usable afterwards.
  EXPECT_EQ(nd::sum(x).to_vector(), (std::vector<float>{2}));
}

INSTANTIATE_TEST_SUITE_P(Engines, Record,
                         testing::Values(Param{"naive", 1, false}, Param{"threaded", 2, false},
                                         Param{"naive", 1, true}, Param{"threaded", 2, true},
                                         Param{"threaded", 2, true, true}),
                         [](const testing::TestParamInfo<Param>& p) {
                           return p.param.kind + "_" + std::to_string(p.param.threads) +
                                  (p.param.cuda ? "_cuda" : p.param.gpu ? "_simgpu" : "");
                         });

}  // namespace
}  // namespace depengine
