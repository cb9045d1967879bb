// nd::accumulate (issue 14): contributions into one array through the engine's reduce(v)
// accesses, on the naive engine and threaded engines of several sizes. Integer-valued
// inputs make the float sums exact, so every engine must give the sequential result.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "depengine/ndarray.h"

namespace depengine {
namespace {

struct Kind {
  std::string kind;
  int threads;
};

class Accumulate : public testing::TestWithParam<Kind> {
 protected:
  std::unique_ptr<Engine> e_ = Engine::create(GetParam().kind, {.cpu_threads = GetParam().threads});
  EngineScope scope_{*e_};
};

// Many ops add into one array; reads and in-place updates between runs see the combined
// value, and the result equals the sequential one.
TEST_P(Accumulate, EqualsTheSequentialSum) {
  const std::size_t n = 1000;
  NDArray total = nd::zeros({n});
  std::vector<NDArray> parts;
  for (int k = 0; k < 64; ++k) parts.push_back(nd::full({n}, static_cast<float>(k % 7)));
  for (const NDArray& p : parts) nd::accumulate(total, p);
  NDArray first = total.copy();  // a read: the run is combined before it
  total *= 2.0f;
  for (const NDArray& p : parts) nd::accumulate(total, p);
  float per = 0;
  for (int k = 0; k < 64; ++k) per += static_cast<float>(k % 7);
  EXPECT_EQ(first.to_vector(), std::vector<float>(n, per));
  EXPECT_EQ(total.to_vector(), std::vector<float>(n, 3 * per));
}

// waitall combines what is still open; the storage then holds the sum.
TEST_P(Accumulate, WaitallCombines) {
  NDArray total = nd::ones({3, 4});
  NDArray part = nd::arange(0, 12).reshape({3, 4});
  for (int k = 0; k < 10; ++k) nd::accumulate(total, part);
  waitall();
  std::vector<float> expect(12);
  for (int i = 0; i < 12; ++i) expect[static_cast<std::size_t>(i)] = 1.0f + 10.0f * static_cast<float>(i);
  EXPECT_EQ(total.to_vector(), expect);
}

// Dropping the target with contributions pending frees it after the final combine.
TEST_P(Accumulate, DroppedTargetIsCombinedThenFreed) {
  waitall();
  const std::size_t before = nd::memory_stats().in_use;
  {
    NDArray total = nd::zeros({256});
    NDArray one = nd::ones({256});
    for (int k = 0; k < 20; ++k) nd::accumulate(total, one);
  }
  waitall();
  EXPECT_EQ(nd::memory_stats().in_use, before);
}

TEST_P(Accumulate, MisuseIsAnError) {
  NDArray a = nd::zeros({4}), b = nd::zeros({5});
  EXPECT_THROW(nd::accumulate(a, b), Error);
  EXPECT_THROW(nd::accumulate(a, a), Error);
  EXPECT_THROW(nd::accumulate(a, a.reshape({2, 2})), Error);
  NDArray null;
  EXPECT_THROW(nd::accumulate(null, a), Error);
  auto other = Engine::create("naive");
  NDArray elsewhere;
  {
    EngineScope use(*other);
    elsewhere = nd::zeros({4});
  }
  EXPECT_THROW(nd::accumulate(a, elsewhere), Error);
  EXPECT_EQ(a.to_vector(), std::vector<float>(4, 0));
}

// Empty arrays have nothing to add: accumulating one failed with the engine's
// "set_reduction(var #n): the target is null", an error about its internals.
TEST_P(Accumulate, EmptyArraysAreANoOp) {
  NDArray total = nd::zeros({3, 0});
  nd::accumulate(total, nd::zeros({3, 0}));
  nd::accumulate(total, nd::ones({3, 0}));
  EXPECT_EQ(total.shape(), (Shape{3, 0}));
  EXPECT_TRUE(total.to_vector().empty());
  NDArray ok = nd::zeros({2});
  nd::accumulate(ok, nd::ones({2}));
  EXPECT_EQ(ok.to_vector(), (std::vector<float>{1, 1}));
  waitall();
}

INSTANTIATE_TEST_SUITE_P(Engines, Accumulate,
                         testing::Values(Kind{"naive", 1}, Kind{"threaded", 1},
                                         Kind{"threaded", 2}, Kind{"threaded", 4}),
                         [](const testing::TestParamInfo<Kind>& p) {
                           return p.param.kind + "_" + std::to_string(p.param.threads);
                         });

}  // namespace
}  // namespace depengine
