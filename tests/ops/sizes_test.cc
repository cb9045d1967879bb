// Size arithmetic at the kernels' public entry points (issue 11, item 8): sizes that cblas
// cannot take are rejected instead of truncated to int, and loop bounds computed from
// valid sizes do not wrap. The pointers passed are tiny: a kernel that checks its sizes
// first throws before it touches them.
#include <gtest/gtest.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "depengine/ops/gemm.h"
#include "depengine/ops/random.h"
#include "depengine/ops/size.h"
#include "depengine/ops/transpose.h"
#include "support/test_support.h"

namespace depengine::ops {
namespace {

using depengine::test::expect_error;

const RunContext kCtx{};
constexpr std::size_t kIntMax = INT_MAX;

TEST(OpsSizes, GemmRejectsDimensionsBeyondCblasInt) {
  std::vector<float> a(4, 1.0f), b(4, 2.0f), c(4, 0.0f);
  // k = 2^32 + 1 was truncated to 1: c = a[0] · b[0], silently.
  const std::size_t k = (std::size_t{1} << 32) + 1;
  expect_error(
      [&] {
        cpu::gemm(kCtx, false, false, 1, 1, k, 1.0f, a.data(), k, b.data(), 1, 0.0f, c.data(), 1);
      },
      {"gemm", "k = 4294967297", "2147483647"});
  expect_error(
      [&] {
        cpu::gemm(kCtx, false, false, 1, 1, kIntMax + 1, 1.0f, a.data(), kIntMax + 1, b.data(), 1,
                  0.0f, c.data(), 1);
      },
      {"gemm", "k = 2147483648"});
  // A leading dimension alone (a strided view of a wider matrix) is checked too.
  expect_error(
      [&] {
        cpu::gemm(kCtx, false, false, 1, 1, 1, 1.0f, a.data(), k, b.data(), 1, 0.0f, c.data(), 1);
      },
      {"gemm", "lda = 4294967297"});
  expect_error([&] { check_gemm("dot", kIntMax + 1, 1, 1, 1, 1, 1); }, {"dot", "m = 2147483648"});
  expect_error([&] { check_gemm("dot", 1, 1, 1, 1, 1, kIntMax + 1); }, {"dot", "ldc = 2147483648"});
  EXPECT_EQ(c, std::vector<float>(4, 0.0f)) << "a rejected gemm wrote C";
  // At the limit, and nothing to compute (m or n = 0) whatever the others are.
  EXPECT_NO_THROW(check_gemm("gemm", kIntMax, kIntMax, kIntMax, kIntMax, kIntMax, kIntMax));
  EXPECT_NO_THROW(check_gemm("gemm", 0, 1, k, k, k, k));
  cpu::gemm(kCtx, false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1);
  EXPECT_EQ(c[0], 4.0f);
}

TEST(OpsSizes, TransposeOfNoRowsOfHugeColumns) {
  // 32 · 2^59 wrapped to 0 in the task grain and divided by it (SIGFPE).
  cpu::transpose(kCtx, nullptr, 0, std::size_t{1} << 59, nullptr);
  cpu::transpose(kCtx, nullptr, 0, std::numeric_limits<std::size_t>::max(), nullptr);
}

TEST(OpsSizes, PhiloxBlocksDoNotWrap) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(philox_blocks(max), std::uint64_t{max / 4 + 1});
  EXPECT_EQ(philox_blocks(max - 3), std::uint64_t{max / 4});
  EXPECT_EQ(philox_blocks(0), 0u);
  EXPECT_EQ(philox_blocks(5), 2u);
}

TEST(OpsSizes, FloatBytesIsCheckedAgainstPtrdiffMax) {
  EXPECT_EQ(float_bytes(0, "x"), 0u);
  EXPECT_EQ(float_bytes(kMaxFloats, "x"), kMaxFloats * sizeof(float));
  EXPECT_LE(kMaxFloats * sizeof(float), static_cast<std::size_t>(PTRDIFF_MAX));
  expect_error([] { (void)float_bytes(kMaxFloats + 1, "allocate"); }, {"allocate", "bytes"});
  expect_error([] { (void)float_bytes(std::size_t{1} << 62, "allocate"); },
               {"allocate", "4611686018427387904"});
}

}  // namespace
}  // namespace depengine::ops
