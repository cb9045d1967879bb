// Shape limits (issue 11, item 8): every call that makes a shape checks, before anything is
// pushed or allocated, that it has at most kMaxNdim dimensions and that its element count
// and byte size fit (the product of its non-zero dimensions times 4 bytes at most
// PTRDIFF_MAX, numpy's rule). A shape that does not fit throws depengine::Error naming the
// op and the shape, and the engine goes on: the next op works. Before the checks, such
// shapes wrapped around size_t: zeros({1 << 62}) allocated 0 bytes and its fill wrote past
// the block, a (2^32, 2^32) array had size 0, reshape accepted shapes whose product wrapped
// to the current size, arange(0, 1e30) converted 1e30 to size_t (undefined), and printing an
// array of 100,000 dimensions overflowed the stack.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "depengine/ndarray.h"
#include "depengine/nn.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::PushCounter;
using depengine::test::expect_error;

constexpr std::size_t k2e32 = std::size_t{1} << 32;
constexpr std::size_t k2e40 = std::size_t{1} << 40;
constexpr std::size_t k2e62 = std::size_t{1} << 62;

std::string repr(const NDArray& a) {
  std::ostringstream os;
  os << a;
  return os.str();
}

class ShapeLimits : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    engine_ = Engine::create(GetParam(), {.cpu_threads = 2, .sim_gpus = 1});
    counter_ = std::make_shared<PushCounter>();
    engine_->set_observer(counter_);
    scope_ = std::make_unique<EngineScope>(*engine_);
  }
  void TearDown() override {
    scope_.reset();
    engine_->wait_all();
  }

  // `f` throws Error with every one of `parts` in its message, pushes nothing, allocates
  // nothing, and the engine still runs ops afterwards.
  template <class F>
  void expect_rejected(F&& f, std::initializer_list<const char*> parts) {
    waitall();
    const int pushes = counter_->pushes.load();
    const std::size_t in_use = nd::memory_stats().in_use;
    expect_error(f, parts);
    EXPECT_EQ(counter_->pushes.load(), pushes) << "a rejected call pushed an op";
    EXPECT_EQ(nd::memory_stats().in_use, in_use) << "a rejected call allocated storage";
    EXPECT_EQ((nd::ones({2}) + 1.0f).to_vector(), (std::vector<float>{2, 2}));
    waitall();
  }

  std::unique_ptr<Engine> engine_;
  std::shared_ptr<PushCounter> counter_;
  std::unique_ptr<EngineScope> scope_;
};

TEST_P(ShapeLimits, ByteCountThatWrapsIsRejected) {
  // 2^62 floats are 2^64 bytes, which wrapped to a 0-byte block that the fill overran.
  expect_rejected([] { (void)nd::zeros({k2e62}); },
                  {"zeros", "(4611686018427387904,)", "bytes", "PTRDIFF_MAX"});
  // 2^61 floats are 2^63 bytes: no wrap, but more than one object may have.
  expect_rejected([] { (void)nd::ones({std::size_t{1} << 61}); },
                  {"ones", "(2305843009213693952,)", "bytes"});
  expect_rejected([] { (void)nd::zeros({k2e62}, Device::gpu(0)); }, {"zeros", "bytes"});
}

TEST_P(ShapeLimits, ElementCountThatWrapsIsRejected) {
  const char* shape = "(4294967296, 4294967296)";
  const char* problem = "more elements than fit in size_t";
  expect_rejected([] { (void)nd::zeros({k2e32, k2e32}); }, {"zeros", shape, problem});
  expect_rejected([] { (void)nd::full({k2e32, k2e32}, 1.0f); }, {"full", shape, problem});
  expect_rejected([] { (void)nd::random_uniform({k2e32, k2e32}); },
                  {"random_uniform", shape, problem});
  expect_rejected([] { (void)nd::random_normal({k2e32, k2e32}); },
                  {"random_normal", shape, problem});
  // No values fill a shape whose count wrapped to 0.
  expect_rejected([] { (void)nd::array(std::vector<float>{}, {k2e32, k2e32}); },
                  {"array", shape, problem});
  expect_rejected([] { (void)nd::zeros({k2e32, k2e32}, Device::gpu(0)); },
                  {"zeros", shape, problem});
  // A zero dimension does not excuse the others (numpy: "array is too big"): their product
  // is what the strides and loops of every kernel are computed from.
  expect_rejected([] { (void)nd::zeros({0, k2e32, k2e32}); },
                  {"zeros", "(0, 4294967296, 4294967296)", "non-zero dimensions"});
}

// Shape holds size_t, so a negative dimension (numpy's reshape(-1) idiom) arrives as a huge
// one; the error said only "shape (18446744073709551615,) is too big". It now names the
// dimension and the negative number it came from.
TEST_P(ShapeLimits, NegativeDimensionsAreNamedAsSuch) {
  constexpr std::size_t minus_one = static_cast<std::size_t>(-1);
  expect_rejected([] { (void)nd::zeros({minus_one}); },
                  {"zeros", "(18446744073709551615,)", "dimension 0", "-1", "negative"});
  NDArray six = nd::ones({6});
  waitall();
  expect_rejected([&] { (void)six.reshape({2, minus_one}); },
                  {"reshape", "dimension 1", "-1", "negative"});
  expect_rejected([&] { (void)six.reshape({static_cast<std::size_t>(-3), 0}); },
                  {"reshape", "dimension 0", "-3", "negative"});
}

TEST_P(ShapeLimits, ReshapeWrappingToTheSameSizeIsRejected) {
  NDArray four = nd::ones({4});
  NDArray empty = nd::zeros({0});
  waitall();
  // 4 · (2^62 + 1) = 2^64 + 4 wraps to 4: the view would read far past the 4 floats.
  expect_rejected([&] { (void)four.reshape({4, k2e62 + 1}); },
                  {"reshape", "(4, 4611686018427387905)", "more elements than fit"});
  expect_rejected([&] { (void)empty.reshape({k2e32, k2e32}); },
                  {"reshape", "(4294967296, 4294967296)"});
  EXPECT_EQ(four.reshape({2, 2}).to_vector(), (std::vector<float>{1, 1, 1, 1}));
}

TEST_P(ShapeLimits, BroadcastResultThatOverflowsIsRejected) {
  // Empty inputs whose broadcast shape (0, 2^40, 2^40) has 2^80 as its non-zero product.
  NDArray a = nd::zeros({0, k2e40, 1});
  NDArray b = nd::zeros({0, 1, k2e40});
  waitall();
  expect_rejected([&] { (void)(a + b); }, {"add", "(0, 1099511627776, 1099511627776)"});
  expect_rejected([&] { (void)nd::maximum(a, b); },
                  {"maximum", "(0, 1099511627776, 1099511627776)"});
}

TEST_P(ShapeLimits, MatrixProductsThatDoNotFitAreRejected) {
  // (2^40, 0) · (0, 2^40): the (2^40, 2^40) product wrapped to 0 elements, and the k = 0
  // path of the GEMM then wrote its zeros through a null pointer. Now m is rejected first:
  // BLAS takes int sizes.
  NDArray tall = nd::zeros({k2e40, 0});
  NDArray wide = nd::zeros({0, k2e40});
  waitall();
  expect_rejected([&] { (void)nd::dot(tall, wide); },
                  {"dot", "m = 1099511627776", "2147483647", "(1099511627776, 0)",
                   "(0, 1099511627776)"});
  expect_rejected([&] { (void)nd::gemm(tall, wide, false, false); },
                  {"gemm", "m = 1099511627776", "(1099511627776, 0)"});
  expect_rejected([&] { (void)nd::gemm(wide, tall, true, true); },
                  {"gemm", "m = 1099511627776", "(0, 1099511627776)"});
  // Dimensions within int whose product has (2^31 - 1)^2 elements: 2^64 - 2^34 + 4 bytes,
  // which wrapped around size_t.
  const std::size_t int_max = 2147483647;
  NDArray rows = nd::zeros({int_max, 0});
  NDArray cols = nd::zeros({0, int_max});
  waitall();
  expect_rejected([&] { (void)nd::dot(rows, cols); },
                  {"dot", "(2147483647, 2147483647)", "bytes"});
  expect_rejected([&] { (void)nd::gemm(cols, rows, true, true); },
                  {"gemm", "(2147483647, 2147483647)", "bytes"});
  // Nothing to compute: m = 0 passes whatever k is.
  EXPECT_EQ(nd::dot(wide, tall).shape(), (Shape{0, 0}));
  EXPECT_EQ(nd::dot(wide, tall).to_vector(), std::vector<float>{});
}

// A shape within the limits whose storage the allocator refuses (2^50 floats, 4 PiB: more
// than the 47-bit address space, whatever the overcommit policy) threw std::bad_alloc, which
// names neither the op nor the shape. Now it is an Error that does, nothing is pushed or
// kept, and the engine goes on.
TEST_P(ShapeLimits, StorageTheAllocatorRefusesIsAnErrorNamingTheOpAndShape) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator aborts on a failed allocation instead of throwing";
#endif
  const Shape huge{k2e40, 1024};
  const char* shape = "(1099511627776, 1024)";
  expect_rejected([&] { (void)nd::zeros(huge); }, {"zeros", shape, "out of memory", "bytes"});
  expect_rejected([&] { (void)nd::random_normal(huge); }, {"random_normal", shape});
  expect_rejected([&] { (void)nd::ones(huge, Device::gpu(0)); }, {"ones", shape, "gpu(0)"});
  // A product within BLAS's int sizes whose (2^20, 2^30) result cannot be allocated.
  NDArray tall = nd::zeros({std::size_t{1} << 20, 0});
  NDArray wide = nd::zeros({0, std::size_t{1} << 30});
  waitall();
  expect_rejected([&] { (void)nd::dot(tall, wide); }, {"dot", "(1048576, 1073741824)"});
}

TEST_P(ShapeLimits, EmptyArraysWithHugeDimensionsStillWork) {
  // Valid: the non-zero product 2^59 floats is 2^61 bytes. The transpose kernel divided by
  // 32 · 2^59, which wraps to 0.
  NDArray a = nd::zeros({0, std::size_t{1} << 59});
  NDArray t = nd::transpose(a);
  EXPECT_EQ(t.shape(), (Shape{std::size_t{1} << 59, 0}));
  EXPECT_EQ(t.to_vector(), std::vector<float>{});
  EXPECT_EQ(nd::sum(a, 1).shape(), (Shape{0}));
  EXPECT_EQ(repr(a), "array([], shape=(0, 576460752303423488))");
}

TEST_P(ShapeLimits, TooManyDimensionsAreRejectedAndPrintingTheMostWorks) {
  // An array of 100,000 dimensions overflowed the stack in the printer's recursion.
  expect_rejected(
      [] {
        std::ostringstream os;
        os << nd::zeros(Shape(100000, 1));
      },
      {"zeros", "100000 dimensions", "32"});
  expect_rejected([] { (void)nd::ones(Shape(kMaxNdim + 1, 1)); }, {"ones", "33 dimensions"});
  NDArray most = nd::full(Shape(kMaxNdim, 1), 2.0f);
  expect_rejected([&] { (void)most.reshape(Shape(kMaxNdim + 1, 1)); },
                  {"reshape", "33 dimensions"});
  expect_rejected([] { (void)nd::array(std::vector<float>{1}, Shape(kMaxNdim + 1, 1)); },
                  {"array", "33 dimensions"});
  const std::string open(kMaxNdim, '['), close(kMaxNdim, ']');
  EXPECT_EQ(repr(most), "array(" + open + "2." + close + ")");
  EXPECT_EQ(repr(most + most), "array(" + open + "4." + close + ")");
}

TEST_P(ShapeLimits, ArangeRejectsCountsThatDoNotFit) {
  // 1e30 elements: converting the count to size_t was undefined.
  expect_rejected([] { (void)nd::arange(0, 1e30); }, {"arange", "1e+30"});
  expect_rejected([] { (void)nd::arange(0, 1, 1e-300); }, {"arange", "1e-300", "size_t"});
  // stop - start overflows to inf.
  expect_rejected([] { (void)nd::arange(-1e308, 1e308); }, {"arange"});
  expect_rejected([] { (void)nd::arange(1e308, -1e308, -1); }, {"arange"});
  // Fits in size_t, but its bytes do not fit in one array.
  expect_rejected([] { (void)nd::arange(0, 4e18); }, {"arange", "bytes"});
  EXPECT_EQ(nd::arange(5, 0, -2).to_vector(), (std::vector<float>{5, 3, 1}));
}

TEST_P(ShapeLimits, ArangeRejectsNonFiniteArgumentsAndZeroStep) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr double inf = std::numeric_limits<double>::infinity();
  expect_rejected([] { (void)nd::arange(0, nan); }, {"arange", "nan"});
  expect_rejected([] { (void)nd::arange(nan, 1); }, {"arange", "nan"});
  expect_rejected([] { (void)nd::arange(0, 1, nan); }, {"arange", "nan"});
  expect_rejected([] { (void)nd::arange(0, inf); }, {"arange", "inf"});
  expect_rejected([] { (void)nd::arange(0, 1, inf); }, {"arange", "inf"});
  expect_rejected([] { (void)nd::arange(0, 1, 0); }, {"arange", "step"});
}

INSTANTIATE_TEST_SUITE_P(Engines, ShapeLimits, ::testing::Values("naive", "threaded"));

}  // namespace
}  // namespace depengine
