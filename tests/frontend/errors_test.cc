// Frontend errors: shape mismatches throw depengine::Error naming the op and both shapes
// with nothing pushed; a failure inside a running op reaches the next blocker on any
// array that depends on it; arrays dropped while their ops are pending are safe.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "depengine/ndarray.h"
#include "depengine/ndarray_ops.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::PushCounter;
using depengine::test::expect_error;

class FrontendErrors : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    engine_ = Engine::create(GetParam(), {.cpu_threads = 2});
    counter_ = std::make_shared<PushCounter>();
    engine_->set_observer(counter_);
    scope_ = std::make_unique<EngineScope>(*engine_);
  }
  void TearDown() override {
    scope_.reset();
    engine_->wait_all();
  }
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<PushCounter> counter_;
  std::unique_ptr<EngineScope> scope_;
};

TEST_P(FrontendErrors, ShapeMismatchNamesOpAndShapesAndPushesNothing) {
  NDArray a = nd::ones({2, 3}), b = nd::ones({4, 5}), v = nd::ones({4});
  NDArray empty = nd::ones({0, 3}), cube = nd::ones({2, 2, 2});
  const int before = counter_->pushes.load();
  expect_error([&] { (void)(a + b); }, {"add", "(2, 3)", "(4, 5)"});
  expect_error([&] { (void)(a * v); }, {"mul", "(2, 3)", "(4,)"});
  expect_error([&] { (void)nd::dot(a, b); }, {"dot", "(2, 3)", "(4, 5)"});
  expect_error([&] { a += b; }, {"add", "(4, 5)", "(2, 3)"});
  expect_error([&] { v -= a; }, {"sub", "(2, 3)", "(4,)"});
  expect_error([&] { (void)nd::sum(a, 2); }, {"sum", "axis 2", "(2, 3)"});
  expect_error([&] { (void)nd::max(empty); }, {"max", "(0, 3)"});
  expect_error([&] { (void)a.reshape({4, 2}); }, {"reshape", "(2, 3)", "(4, 2)"});
  expect_error([&] { (void)a.item(); }, {"item", "(2, 3)"});
  expect_error([&] { (void)nd::transpose(cube, {0, 0, 1}); }, {"transpose", "repeated", "(2, 2, 2)"});
  expect_error([&] { (void)nd::array({1, 2, 3}, {2, 2}); }, {"array", "(2, 2)"});
  EXPECT_EQ(counter_->pushes.load(), before);
}

TEST_P(FrontendErrors, MisuseIsRejectedAtTheCall) {
  NDArray null;
  expect_error([&] { (void)(null + 1.0f); }, {"add", "null"});
  expect_error([&] { null.wait_to_read(); }, {"wait_to_read", "null"});
  expect_error([&] { (void)nd::zeros({2}, Device::gpu(0)); }, {"zeros", "gpu(0)"});
  expect_error([&] { (void)nd::arange(0, 1, 0); }, {"arange"});
  expect_error([&] { (void)nd::random_normal({2}, 0.0f, -1.0f); }, {"random_normal"});
  auto other = Engine::create("naive");
  NDArray here = nd::ones({2});
  NDArray there;
  {
    EngineScope use(*other);
    there = nd::ones({2});
  }
  expect_error([&] { (void)(here + there); }, {"add", "different engines"});
  there = NDArray();
}

// Parameters that give no finite numbers are rejected at the call, as numpy does
// (OverflowError for a range that overflows): random_uniform(-FLT_MAX, FLT_MAX) filled the
// array with inf, a -inf bound or an inf stddev with inf and nan. And the messages print
// the values given: std::to_string printed 1e-7 as "0.000000" ("low 0.000000 is above
// high 0.000000"), and called a nan stddev "negative".
TEST_P(FrontendErrors, RandomParametersThatGiveNoFiniteNumbersAreRejected) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr float big = std::numeric_limits<float>::max();
  const int before = counter_->pushes.load();
  expect_error([&] { (void)nd::random_uniform({4}, -big, big); },
               {"random_uniform", "-3.4028235e+38", "3.4028235e+38", "overflows"});
  expect_error([&] { (void)nd::random_uniform({4}, -inf, 0.0f); }, {"random_uniform", "-inf"});
  expect_error([&] { (void)nd::random_uniform({4}, 0.0f, inf); }, {"random_uniform", "inf"});
  expect_error([&] { (void)nd::random_uniform({4}, nan, 1.0f); }, {"random_uniform", "nan"});
  expect_error([&] { (void)nd::random_uniform({4}, 1e-7f, 1e-8f); },
               {"random_uniform", "low 1e-07", "high 1e-08"});
  expect_error([&] { (void)nd::random_normal({4}, 0.0f, -1e-9f); },
               {"random_normal", "-1e-09"});
  expect_error([&] { (void)nd::random_normal({4}, 0.0f, nan); }, {"random_normal", "nan"});
  expect_error([&] { (void)nd::random_normal({4}, 0.0f, inf); }, {"random_normal", "inf"});
  expect_error([&] { (void)nd::random_normal({4}, inf, 1.0f); }, {"random_normal", "inf"});
  EXPECT_EQ(counter_->pushes.load(), before);
  // The widest range that does not overflow, and the degenerate ones, still work.
  for (float x : nd::random_uniform({64}, -big / 2, big / 2).to_vector()) {
    EXPECT_TRUE(std::isfinite(x)) << x;
  }
  EXPECT_EQ(nd::random_uniform({2}, 3.0f, 3.0f).to_vector(), (std::vector<float>{3, 3}));
  EXPECT_EQ(nd::random_normal({2}, 5.0f, 0.0f).to_vector(), (std::vector<float>{5, 5}));
}

TEST_P(FrontendErrors, FailureSurfacesAtEveryBlockerDownstream) {
  NDArray a = nd::ones({4, 4});
  // A user op that writes `a` and fails, as a custom kernel might.
  engine_->push([] { throw std::runtime_error("kernel exploded"); }, {}, {a.var()},
                {.name = "custom"});
  NDArray b = a + 1.0f;
  NDArray c = nd::dot(b, b);
  NDArray s = nd::sum(c);
  NDArray unrelated = nd::full({2}, 3.0f);
  auto expect_original = [](auto&& f) {
    depengine::test::expect_runtime_error(f, "kernel exploded");
  };
  expect_original([&] { c.wait_to_read(); });
  expect_original([&] { (void)b.to_vector(); });
  expect_original([&] { (void)s.item(); });
  expect_original([&] {
    std::ostringstream os;
    os << c;
  });
  expect_original([&] { waitall(); });
  waitall();  // the failure was reported once; the engine goes on
  EXPECT_EQ(unrelated.to_vector(), (std::vector<float>{3, 3}));
  EXPECT_EQ((unrelated * 2.0f).to_vector(), (std::vector<float>{6, 6}));
}

TEST_P(FrontendErrors, ArraysDroppedWhilePendingAreSafe) {
  waitall();
  const std::size_t base = nd::memory_stats().in_use;
  std::atomic<bool> open{false};
  NDArray gate = nd::zeros({1000});
  NDArray result;
  if (std::string(GetParam()) == "threaded") {
    // Holds every op below pending until the arrays they use have been dropped.
    engine_->push(
        [&open] {
          while (!open.load()) std::this_thread::yield();
        },
        {}, {gate.var()}, {.name = "gate"});
  }
  {
    NDArray x = gate + 1.0f;
    NDArray y = nd::dot(x.reshape({10, 100}), nd::ones({100, 10}));
    NDArray z = nd::sum(y) * 2.0f;
    gate = NDArray();  // the last handles go while their ops wait
    result = z;
  }
  NDArray dropped = result + 1.0f;
  dropped = NDArray();
  open.store(true);
  EXPECT_EQ(result.item(), 2.0f * 1000.0f * 10.0f);
  result = NDArray();
  waitall();
  EXPECT_EQ(nd::memory_stats().in_use, base);
}

// An observer that throws in on_push used to make delete_var throw, and ~Chunk then freed
// the storage at once, under the kernels still using it (ASan: heap-use-after-free). The
// observer is contained now: every op runs, storage is freed after its last use, and
// waitall reports the observer's failure.
TEST_P(FrontendErrors, ArraysDroppedUnderAThrowingObserverAreSafe) {
  struct Throwing final : Observer {
    void on_push(const OpInfo&) override { throw std::runtime_error("observer broke"); }
    void on_ready(std::uint64_t) override {}
    void on_start(std::uint64_t, int) override {}
    void on_end(std::uint64_t, bool, bool) override {}
  };
  waitall();
  const std::size_t base = nd::memory_stats().in_use;
  std::atomic<bool> open{false};
  NDArray gate = nd::zeros({1000});
  waitall();
  engine_->set_observer(std::make_shared<Throwing>());
  if (std::string(GetParam()) == "threaded") {
    engine_->push(
        [&open] {
          while (!open.load()) std::this_thread::yield();
        },
        {}, {gate.var()}, {.name = "gate"});
  }
  NDArray result;
  {
    NDArray x = gate + 1.0f;
    NDArray y = nd::dot(x.reshape({10, 100}), nd::ones({100, 10}));
    result = nd::sum(y) * 2.0f;
    gate = NDArray();
  }
  open.store(true);
  EXPECT_EQ(result.item(), 2.0f * 1000.0f * 10.0f);
  result = NDArray();
  expect_error([] { waitall(); }, "Observer::on_push");
  engine_->set_observer(counter_);
  waitall();
  EXPECT_EQ(nd::memory_stats().in_use, base);
}

INSTANTIATE_TEST_SUITE_P(Engines, FrontendErrors, ::testing::Values("naive", "threaded"));

}  // namespace
}  // namespace depengine
