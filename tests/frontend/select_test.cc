// nd::compare and nd::slice (the frontend ops behind the Python package's comparison
// operators and basic indexing): values against a plain loop, broadcasting, negative steps,
// empty selections, and the errors for bad selections, GPU arrays and mismatched shapes.
#include <gtest/gtest.h>

#include <vector>

#include "depengine/ndarray.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::expect_error;

NDArray iota(Shape shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return nd::array(v, shape);
}

class SelectTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::unique_ptr<Engine> engine = Engine::create(GetParam(), {.cpu_threads = 2});
  EngineScope use{*engine};
};

TEST_P(SelectTest, CompareBroadcastsAndMatchesTheScalarRule) {
  const NDArray a = iota({3, 4});                          // 0..11
  const NDArray b = nd::array(std::vector<float>{1, 5, 6, 20}, {4});
  const std::vector<float> av = a.to_vector(), bv = b.to_vector();
  const struct {
    nd::Compare op;
    bool (*f)(float, float);
  } cases[] = {{nd::Compare::equal, [](float x, float y) { return x == y; }},
               {nd::Compare::not_equal, [](float x, float y) { return x != y; }},
               {nd::Compare::less, [](float x, float y) { return x < y; }},
               {nd::Compare::less_equal, [](float x, float y) { return x <= y; }},
               {nd::Compare::greater, [](float x, float y) { return x > y; }},
               {nd::Compare::greater_equal, [](float x, float y) { return x >= y; }}};
  for (const auto& c : cases) {
    const std::vector<float> got = nd::compare(a, b, c.op).to_vector();
    const std::vector<float> scalar = nd::compare(a, 5.0f, c.op).to_vector();
    ASSERT_EQ(got.size(), 12u);
    for (std::size_t i = 0; i < 12; ++i) {
      EXPECT_EQ(got[i], c.f(av[i], bv[i % 4]) ? 1.0f : 0.0f) << i;
      EXPECT_EQ(scalar[i], c.f(av[i], 5.0f) ? 1.0f : 0.0f) << i;
    }
  }
  // A column against a row: (3, 1) with (4,) gives (3, 4).
  const NDArray col = iota({3, 1});
  const NDArray r = nd::compare(col, b, nd::Compare::less);
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  const std::vector<float> rv = r.to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      EXPECT_EQ(rv[i * 4 + j], static_cast<float>(i) < bv[j] ? 1.0f : 0.0f);
}

TEST_P(SelectTest, SliceSelectsLikeNumpyBasicIndexing) {
  const NDArray a = iota({4, 6});
  // a[1] -> row 1.
  NDArray r = nd::slice(a, {{1, 1, 1, false}, {0, 1, 6, true}});
  EXPECT_EQ(r.shape(), (Shape{6}));
  EXPECT_EQ(r.to_vector(), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  // a[::2, ::-3] -> rows 0, 2; columns 5, 2.
  r = nd::slice(a, {{0, 2, 2, true}, {5, -3, 2, true}});
  EXPECT_EQ(r.shape(), (Shape{2, 2}));
  EXPECT_EQ(r.to_vector(), (std::vector<float>{5, 2, 17, 14}));
  // a[2, 3] -> 0-d.
  r = nd::slice(a, {{2, 1, 1, false}, {3, 1, 1, false}});
  EXPECT_EQ(r.shape(), Shape{});
  EXPECT_EQ(r.item(), 15.0f);
  // a[1:1] -> empty.
  r = nd::slice(a, {{1, 1, 0, true}, {0, 1, 6, true}});
  EXPECT_EQ(r.shape(), (Shape{0, 6}));
  EXPECT_TRUE(r.to_vector().empty());
}

TEST_P(SelectTest, BadSelectionsThrowBeforeAnythingIsPushed) {
  const NDArray a = iota({4, 6});
  EXPECT_THROW(nd::slice(a, {{0, 1, 4, true}}), Error);                        // too few
  EXPECT_THROW(nd::slice(a, {{0, 1, 5, true}, {0, 1, 6, true}}), Error);       // past the end
  EXPECT_THROW(nd::slice(a, {{3, -1, 5, true}, {0, 1, 6, true}}), Error);      // before 0
  EXPECT_THROW(nd::slice(a, {{0, 0, 1, true}, {0, 1, 6, true}}), Error);       // step 0
  EXPECT_THROW(nd::compare(a, iota({5}), nd::Compare::less), Error);           // shapes
  EXPECT_THROW(nd::compare(NDArray(), 1.0f, nd::Compare::less), Error);        // null
  try {
    nd::compare(a, iota({5}), nd::Compare::less);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4, 6)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(5,)"), std::string::npos);
  }
  engine->wait_all();
}

// A dimension dropped by an integer index (keep == false) selects exactly one element:
// with count 2 the slice silently returned the first row only, and with count 0 it skipped
// the bounds check and returned row 0 for an index past the end.
TEST_P(SelectTest, DroppedDimensionsMustSelectExactlyOneElement) {
  const NDArray a = iota({2, 3});
  expect_error([&] { (void)nd::slice(a, {{0, 1, 2, false}, {0, 1, 3, true}}); },
               {"slice", "dimension 0", "count 2", "1 element"});
  expect_error([&] { (void)nd::slice(a, {{5, 1, 0, false}, {0, 1, 3, true}}); },
               {"slice", "dimension 0", "count 0"});
  EXPECT_EQ(nd::slice(a, {{1, 1, 1, false}, {0, 1, 3, true}}).to_vector(),
            (std::vector<float>{3, 4, 5}));
  engine->wait_all();
}

// start + step · (count - 1) and step · stride wrapped around long: a step of 2^62 over 5
// elements "ended" at 0 and passed the bounds check, then the kernel read 2^62 floats past
// the storage (a crash, or garbage).
TEST_P(SelectTest, StepsWhoseSpanOverflowsAreRejected) {
  const NDArray a = iota({10});
  const NDArray m = iota({4, 6});
  constexpr long kHuge = 1L << 62;
  expect_error([&] { (void)nd::slice(a, {{0, kHuge, 5, true}}); }, {"slice", "dimension 0"});
  expect_error([&] { (void)nd::slice(a, {{9, -kHuge, 5, true}}); }, {"slice", "dimension 0"});
  expect_error([&] { (void)nd::slice(a, {{0, 1, std::size_t{1} << 63, true}}); },
               {"slice", "dimension 0"});
  expect_error([&] { (void)nd::slice(m, {{0, 1, 4, true}, {0, kHuge, 2, true}}); },
               {"slice", "dimension 1"});
  // One element: the step is never taken, whatever it is (numpy: a[3::2**62]).
  EXPECT_EQ(nd::slice(a, {{3, kHuge, 1, true}}).to_vector(), (std::vector<float>{3}));
  EXPECT_EQ(nd::slice(m, {{3, kHuge, 1, true}, {5, -kHuge, 1, true}}).to_vector(),
            (std::vector<float>{23}));
  engine->wait_all();
}

// Comparisons and slices once refused GPU arrays; they run on the (simulated) GPU now and
// give the CPU's bits.
TEST(SelectGpuTest, ComparisonsAndSlicesRunOnTheSimulatedGpu) {
  auto e = Engine::create("threaded", {.cpu_threads = 1, .sim_gpus = 1});
  EngineScope use(*e);
  const NDArray c = nd::arange(0, 6).reshape({2, 3});
  const NDArray g = c.copy_to(Device::gpu(0));
  const NDArray lt = nd::compare(g, 2.0f, nd::Compare::less);
  EXPECT_EQ(lt.device(), Device::gpu(0));
  EXPECT_EQ(lt.to_vector(), (std::vector<float>{1, 1, 0, 0, 0, 0}));
  const NDArray eq = nd::compare(g, nd::arange(0, 3).copy_to(Device::gpu(0)), nd::Compare::equal);
  EXPECT_EQ(eq.to_vector(), (std::vector<float>{1, 1, 1, 0, 0, 0}));
  const NDArray s = nd::slice(g, {{1, 1, 1, false}, {2, -1, 2, true}});
  EXPECT_EQ(s.device(), Device::gpu(0));
  EXPECT_EQ(s.to_vector(), (std::vector<float>{5, 4}));
  e->wait_all();
}

INSTANTIATE_TEST_SUITE_P(Engines, SelectTest, ::testing::Values("naive", "threaded"));

}  // namespace
}  // namespace depengine
