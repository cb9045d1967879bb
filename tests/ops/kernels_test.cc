// The CPU kernels of depengine::ops against plain reference loops: exact equality on
// integer-valued inputs (where float arithmetic is exact), a tolerance otherwise. Sizes
// are odd and straddle the kernels' chunk and tile sizes, so every edge path runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "depengine/ops/elementwise.h"
#include "depengine/ops/fill.h"
#include "depengine/ops/gemm.h"
#include "depengine/ops/nn.h"
#include "depengine/ops/random.h"
#include "depengine/ops/reduce.h"
#include "depengine/ops/transpose.h"
#include "support/test_support.h"

namespace depengine::ops {
namespace {

using depengine::test::ints;

const RunContext kCtx{};

std::vector<float> reals(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Sizes around the chunk boundaries (32 Ki elements per elementwise task).
const std::size_t kSizes[] = {0, 1, 7, 1000, 32 * 1024 - 1, 32 * 1024 + 1, 100003};

TEST(OpsElementwise, UnaryMatchesReferenceLoop) {
  const Unary all[] = {Unary::neg,  Unary::exp,  Unary::log, Unary::relu, Unary::sigmoid,
                       Unary::tanh, Unary::sqrt, Unary::abs, Unary::square};
  for (std::size_t n : kSizes) {
    const std::vector<float> a = reals(n, 0.01f, 4.0f, 1);
    const std::vector<float> neg = reals(n, -4.0f, 4.0f, 2);
    for (Unary op : all) {
      const std::vector<float>& in = op == Unary::log || op == Unary::sqrt ? a : neg;
      std::vector<float> out(n);
      cpu::unary(kCtx, op, in.data(), out.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], apply(op, in[i])) << name(op) << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(OpsElementwise, ScalarReferenceIsTheMathDefinition) {
  EXPECT_EQ(apply(Unary::relu, -2.0f), 0.0f);
  EXPECT_EQ(apply(Unary::relu, 3.0f), 3.0f);
  EXPECT_FLOAT_EQ(apply(Unary::sigmoid, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(apply(Unary::tanh, 0.5f), std::tanh(0.5f));
  EXPECT_EQ(apply(Binary::pow, 2.0f, 10.0f), 1024.0f);
  EXPECT_EQ(apply(Binary::maximum, 2.0f, 3.0f), 3.0f);
  EXPECT_TRUE(std::isnan(apply(Binary::maximum, NAN, 3.0f)));
  EXPECT_EQ(apply(Binary::minimum, 2.0f, 3.0f), 2.0f);
  // numpy: the remainder has the divisor's sign; x == floor_div(x, y) · y + mod(x, y).
  EXPECT_EQ(apply(Binary::mod, -7.0f, 3.0f), 2.0f);
  EXPECT_EQ(apply(Binary::mod, 7.0f, -3.0f), -2.0f);
  EXPECT_EQ(apply(Binary::floor_div, -7.0f, 3.0f), -3.0f);
  EXPECT_EQ(apply(Binary::floor_div, 7.5f, 2.0f), 3.0f);
  EXPECT_TRUE(std::signbit(apply(Binary::mod, 0.0f, -2.0f)));
  EXPECT_EQ(apply(Binary::floor_div, 1.0f, 0.0f), INFINITY);
  EXPECT_TRUE(std::isnan(apply(Binary::mod, 1.0f, 0.0f)));
  EXPECT_EQ(apply(Binary::less, 1.0f, 2.0f), 1.0f);
  EXPECT_EQ(apply(Binary::greater_equal, 1.0f, 2.0f), 0.0f);
  EXPECT_EQ(apply(Binary::not_equal, NAN, NAN), 1.0f);
}

TEST(OpsElementwise, BinaryIsExactOnIntegers) {
  const Binary all[] = {Binary::add,       Binary::sub,        Binary::mul,
                        Binary::div,       Binary::pow,        Binary::maximum,
                        Binary::minimum,   Binary::mod,        Binary::floor_div,
                        Binary::equal,     Binary::not_equal,  Binary::less,
                        Binary::less_equal, Binary::greater,   Binary::greater_equal};
  for (std::size_t n : kSizes) {
    const std::vector<float> a = ints(n, -50, 50, 3);
    const std::vector<float> b = ints(n, 1, 4, 4);
    for (Binary op : all) {
      std::vector<float> out(n), s1(n), s2(n);
      cpu::binary(kCtx, op, a.data(), b.data(), out.data(), n);
      cpu::binary_scalar(kCtx, op, a.data(), 3.0f, false, s1.data(), n);
      cpu::binary_scalar(kCtx, op, b.data(), 3.0f, true, s2.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], apply(op, a[i], b[i])) << name(op) << " i=" << i;
        ASSERT_EQ(s1[i], apply(op, a[i], 3.0f)) << name(op) << " i=" << i;
        ASSERT_EQ(s2[i], apply(op, 3.0f, b[i])) << name(op) << " i=" << i;
      }
    }
  }
}

TEST(OpsElementwise, InPlaceOutputMayAliasAnInput) {
  std::vector<float> a = ints(100003, -9, 9, 5);
  const std::vector<float> b = ints(100003, -9, 9, 6);
  const std::vector<float> expect = [&] {
    std::vector<float> e(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) e[i] = a[i] * b[i];
    return e;
  }();
  cpu::binary(kCtx, Binary::mul, a.data(), b.data(), a.data(), a.size());
  EXPECT_EQ(a, expect);
}

// rows x cols matrix `a` with a row vector (b_rows = 1) or column vector (b_cols = 1).
void check_broadcast(std::size_t rows, std::size_t cols, bool row_vector) {
  const std::vector<float> a = ints(rows * cols, -20, 20, 7);
  const std::vector<float> b = ints(row_vector ? cols : rows, -20, 20, 8);
  Broadcast bc;
  bc.ndim = 2;
  bc.shape[0] = rows;
  bc.shape[1] = cols;
  bc.a_stride[0] = cols;
  bc.a_stride[1] = 1;
  bc.b_stride[0] = row_vector ? 0 : 1;
  bc.b_stride[1] = row_vector ? 1 : 0;
  std::vector<float> out(rows * cols), swapped(rows * cols);
  cpu::binary_broadcast(kCtx, Binary::sub, a.data(), b.data(), out.data(), bc);
  Broadcast sw = bc;
  std::swap(sw.a_stride, sw.b_stride);
  cpu::binary_broadcast(kCtx, Binary::sub, b.data(), a.data(), swapped.data(), sw);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      const float bv = row_vector ? b[c] : b[r];
      ASSERT_EQ(out[r * cols + c], a[r * cols + c] - bv) << rows << "x" << cols;
      ASSERT_EQ(swapped[r * cols + c], bv - a[r * cols + c]) << rows << "x" << cols;
    }
  }
}

TEST(OpsBroadcast, RowAndColumnVectorsOverOddMatrices) {
  for (auto [r, c] : {std::pair<std::size_t, std::size_t>{1, 1}, {1, 17}, {17, 1}, {3, 5},
                      {333, 7}, {7, 40000}, {1025, 97}}) {
    check_broadcast(r, c, true);
    check_broadcast(r, c, false);
  }
}

TEST(OpsBroadcast, ThreeDimensionsWithTheMiddleBroadcast) {
  // a: (4, 5, 6); b: (4, 1, 6)
  const std::vector<float> a = ints(4 * 5 * 6, -9, 9, 9), b = ints(4 * 6, -9, 9, 10);
  Broadcast bc;
  bc.ndim = 3;
  const std::size_t shape[] = {4, 5, 6}, sa[] = {30, 6, 1}, sb[] = {6, 0, 1};
  for (int d = 0; d < 3; ++d) {
    bc.shape[d] = shape[d];
    bc.a_stride[d] = sa[d];
    bc.b_stride[d] = sb[d];
  }
  std::vector<float> out(a.size());
  cpu::binary_broadcast(kCtx, Binary::mul, a.data(), b.data(), out.data(), bc);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 5; ++j)
      for (std::size_t k = 0; k < 6; ++k)
        ASSERT_EQ(out[i * 30 + j * 6 + k], a[i * 30 + j * 6 + k] * b[i * 6 + k]);
}

TEST(OpsReduce, WholeArraySumMeanMaxArgmax) {
  for (std::size_t n : kSizes) {
    const std::vector<float> a = ints(n, -100, 100, 11);
    double sum = 0;
    for (float x : a) sum += x;
    float out = -1.0f;
    cpu::reduce_all(kCtx, Reduce::sum, a.data(), n, &out);
    EXPECT_EQ(out, static_cast<float>(sum)) << n;
    if (n == 0) continue;
    cpu::reduce_all(kCtx, Reduce::mean, a.data(), n, &out);
    EXPECT_FLOAT_EQ(out, static_cast<float>(sum / static_cast<double>(n))) << n;
    std::size_t at = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (a[i] > a[at]) at = i;
    cpu::reduce_all(kCtx, Reduce::max, a.data(), n, &out);
    EXPECT_EQ(out, a[at]) << n;
    cpu::reduce_all(kCtx, Reduce::argmax, a.data(), n, &out);
    EXPECT_EQ(out, static_cast<float>(at)) << n << " (first occurrence)";
  }
}

TEST(OpsReduce, FloatSumWithinTolerance) {
  const std::vector<float> a = reals(1000003, -1.0f, 1.0f, 12);
  double ref = 0;
  for (float x : a) ref += x;
  float out = 0;
  cpu::reduce_all(kCtx, Reduce::sum, a.data(), a.size(), &out);
  EXPECT_NEAR(out, ref, 1e-3);
}

TEST(OpsReduce, MaxAndArgmaxPropagateNaN) {
  std::vector<float> a = {1.0f, 5.0f, NAN, 7.0f};
  float out = 0;
  cpu::reduce_all(kCtx, Reduce::max, a.data(), a.size(), &out);
  EXPECT_TRUE(std::isnan(out));
  cpu::reduce_all(kCtx, Reduce::argmax, a.data(), a.size(), &out);
  EXPECT_EQ(out, 2.0f);
}

TEST(OpsReduce, AlongEachAxisOfOddShapes) {
  for (auto [outer, len, inner] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1},
                                   {3, 5, 7}, {1, 40001, 1}, {40001, 1, 1}, {7, 3, 2049},
                                   {2, 9999, 3}, {5, 0, 3}}) {
    const std::vector<float> a = ints(outer * len * inner, -30, 30, 13);
    const Reduce all[] = {Reduce::sum, Reduce::mean, Reduce::max, Reduce::argmax};
    for (Reduce op : all) {
      if (len == 0 && (op == Reduce::max || op == Reduce::argmax)) continue;
      std::vector<float> out(outer * inner);
      cpu::reduce_axis(kCtx, op, a.data(), outer, len, inner, out.data());
      for (std::size_t o = 0; o < outer; ++o) {
        for (std::size_t i = 0; i < inner; ++i) {
          double s = 0;
          std::size_t at = 0;
          for (std::size_t k = 0; k < len; ++k) {
            const float x = a[(o * len + k) * inner + i];
            s += x;
            if (x > a[(o * len + at) * inner + i]) at = k;
          }
          const float got = out[o * inner + i];
          switch (op) {
            case Reduce::sum:
              ASSERT_EQ(got, static_cast<float>(s));
              break;
            case Reduce::mean:
              if (len == 0) {
                ASSERT_TRUE(std::isnan(got));
              } else {
                ASSERT_FLOAT_EQ(got, static_cast<float>(s / static_cast<double>(len)));
              }
              break;
            case Reduce::max:
              ASSERT_EQ(got, a[(o * len + at) * inner + i]);
              break;
            case Reduce::argmax:
              ASSERT_EQ(got, static_cast<float>(at));
              break;
          }
        }
      }
    }
  }
}

// A label that is not a class index names its value as given: std::to_string printed 1e-7
// as "0.000000", a valid index, and 0.5 as "0.500000".
TEST(OpsNn, SoftmaxXentNamesABadLabelAsGiven) {
  const std::vector<float> logits(2 * 3, 0.0f);
  std::vector<float> grad(2 * 3);
  float loss = 0.0f;
  auto expect_label = [&](float bad, const char* text) {
    const std::vector<float> labels = {1.0f, bad};
    depengine::test::expect_error(
        [&] { cpu::softmax_xent(kCtx, logits.data(), labels.data(), 2, 3, &loss, grad.data()); },
        {text, "of row 1 is not a class index in [0, 3)"});
  };
  expect_label(1e-7f, "label 1e-07 ");
  expect_label(0.5f, "label 0.5 ");
  expect_label(3.0f, "label 3 ");
  expect_label(-1.0f, "label -1 ");
  expect_label(std::nanf(""), "label nan ");
}

TEST(OpsFill, FillArangeCopy) {
  for (std::size_t n : kSizes) {
    std::vector<float> out(n, -1.0f);
    cpu::fill(kCtx, out.data(), n, 2.5f);
    for (float x : out) ASSERT_EQ(x, 2.5f);
    cpu::arange(kCtx, out.data(), n, -3.0, 0.5);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(-3.0 + 0.5 * i));
    const std::vector<float> src = ints(n, -5, 5, 14);
    cpu::copy(kCtx, src.data(), out.data(), n);
    ASSERT_EQ(out, src);
  }
}

TEST(OpsTranspose, OddShapes) {
  for (auto [r, c] : {std::pair<std::size_t, std::size_t>{1, 1}, {1, 9}, {9, 1}, {31, 33},
                      {1000, 3}, {257, 129}}) {
    const std::vector<float> a = ints(r * c, -9, 9, 15);
    std::vector<float> out(r * c);
    cpu::transpose(kCtx, a.data(), r, c, out.data());
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = 0; j < c; ++j) ASSERT_EQ(out[j * r + i], a[i * c + j]);
  }
}

void reference_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k,
                    const std::vector<float>& a, const std::vector<float>& b,
                    std::vector<float>& c, float alpha, float beta) {
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const float av = ta ? a[p * m + i] : a[i * k + p];
        const float bv = tb ? b[j * k + p] : b[p * n + j];
        s += static_cast<double>(av) * bv;
      }
      c[i * n + j] = static_cast<float>(alpha * s + beta * c[i * n + j]);
    }
  }
}

// A row stride shorter than a row (lda < k for A as stored, and so on) is an Error naming it,
// with C untouched: OpenBLAS printed "parameter number 9 had an illegal value" to stderr
// and returned without computing, leaving C as it was, a silent wrong answer.
TEST(OpsGemm, LeadingDimensionsShorterThanARowAreRejected) {
  const std::vector<float> a(6, 1.0f), b(6, 1.0f);
  std::vector<float> c(4, -7.0f);
  auto gemm = [&](bool ta, bool tb, std::size_t lda, std::size_t ldb, std::size_t ldc) {
    cpu::gemm(kCtx, ta, tb, 2, 2, 3, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), ldc);
  };
  depengine::test::expect_error([&] { gemm(false, false, 1, 2, 2); }, {"gemm", "lda = 1", "3"});
  depengine::test::expect_error([&] { gemm(true, false, 1, 2, 2); }, {"gemm", "lda = 1", "2"});
  depengine::test::expect_error([&] { gemm(false, false, 3, 1, 2); }, {"gemm", "ldb = 1", "2"});
  depengine::test::expect_error([&] { gemm(false, true, 3, 2, 2); }, {"gemm", "ldb = 2", "3"});
  depengine::test::expect_error([&] { gemm(false, false, 3, 2, 1); }, {"gemm", "ldc = 1", "2"});
  EXPECT_EQ(c, std::vector<float>(4, -7.0f));
  gemm(false, false, 3, 2, 2);  // (2,3)·(3,2) of ones
  EXPECT_EQ(c, std::vector<float>(4, 3.0f));
}

TEST(OpsGemm, MatchesReferenceExactlyOnSmallIntegers) {
  // Shapes below, at and across the 256-wide tiles, with and without transposes.
  for (auto [m, n, k] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1},
                         {3, 5, 7}, {64, 64, 64}, {257, 300, 33}, {513, 255, 70}, {5, 0, 3},
                         {4, 6, 0}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::vector<float> a = ints(m * k, -4, 4, 16), b = ints(k * n, -4, 4, 17);
      std::vector<float> c = ints(m * n, -4, 4, 18), ref = c;
      cpu::gemm(kCtx, ta, tb, m, n, k, 2.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.0f,
                c.data(), n);
      reference_gemm(ta, tb, m, n, k, a, b, ref, 2.0f, 1.0f);
      ASSERT_EQ(c, ref) << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb;
    }
  }
}

TEST(OpsGemm, FloatInputsWithinTolerance) {
  const std::size_t m = 300, n = 270, k = 520;
  const std::vector<float> a = reals(m * k, -1, 1, 19), b = reals(k * n, -1, 1, 20);
  std::vector<float> c(m * n), ref(m * n);
  cpu::gemm(kCtx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  reference_gemm(false, false, m, n, k, a, b, ref, 1.0f, 0.0f);
  for (std::size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-3) << i;
}

TEST(OpsRandom, PhiloxMatchesRandom123KnownAnswers) {
  // From Random123's kat_vectors (philox4x32, 10 rounds).
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(OpsRandom, UniformIsACounterFunction) {
  const std::size_t n = 100003;
  std::vector<float> whole(n), tail(n - 8);
  cpu::random_uniform(kCtx, 42, 1000, -2.0f, 3.0f, whole.data(), n);
  // Starting two blocks later gives the same numbers from element 8 on.
  cpu::random_uniform(kCtx, 42, 1002, -2.0f, 3.0f, tail.data(), n - 8);
  for (std::size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], whole[i + 8]);
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto w = philox4x32(42, 1000 + i / 4);
    ASSERT_EQ(whole[i], -2.0f + 5.0f * philox_unit(w[i % 4]));
    ASSERT_GE(whole[i], -2.0f);
    ASSERT_LT(whole[i], 3.0f);
    mean += whole[i];
  }
  EXPECT_NEAR(mean / n, 0.5, 0.02);
}

TEST(OpsRandom, NormalMomentsAndKeySensitivity) {
  const std::size_t n = 200000;
  std::vector<float> z(n), other(n);
  cpu::random_normal(kCtx, 7, 0, 1.0f, 2.0f, z.data(), n);
  cpu::random_normal(kCtx, 8, 0, 1.0f, 2.0f, other.data(), n);
  double m = 0, v = 0;
  for (float x : z) {
    ASSERT_TRUE(std::isfinite(x));
    m += x;
  }
  m /= n;
  for (float x : z) v += (x - m) * (x - m);
  v /= n;
  EXPECT_NEAR(m, 1.0, 0.02);
  EXPECT_NEAR(v, 4.0, 0.05);
  EXPECT_NE(z, other);
}

}  // namespace
}  // namespace depengine::ops
