// CPU GEMM: OpenBLAS sgemm, pinned to one thread, on fixed kGemmTile×kGemmTile tiles of C
// run as oneTBB tasks in the caller's arena (see docs/threading.md for the measurements
// behind this choice).
#include "depengine/ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "depengine/error.h"
#include "parallel.h"

namespace depengine::ops {

void check_gemm(const char* op, std::size_t m, std::size_t n, std::size_t k, std::size_t lda,
                std::size_t ldb, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  const std::pair<const char*, std::size_t> dims[] = {{"m", m},     {"n", n},     {"k", k},
                                                      {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}};
  for (const auto& [what, v] : dims) {
    if (v > kGemmMaxDim) {
      throw Error(std::string(op) + ": " + what + " = " + std::to_string(v) + " exceeds " +
                  std::to_string(kGemmMaxDim) +
                  ", the largest size cblas_sgemm and cublasSgemm take (int)");
    }
  }
}

namespace cpu {
namespace {

// Below this many multiply-adds one sgemm call beats splitting into tasks.
constexpr std::size_t kSerialFlops = std::size_t{64} * 64 * 64;

static_assert(static_cast<std::size_t>(std::numeric_limits<blasint>::max()) >= kGemmMaxDim,
              "cblas_sgemm must take every size check_gemm lets through");

void sgemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
           float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// BLAS's rule for row-major operands: a row stride at least as long as a stored row (A is
// m×k, or k×m transposed; B k×n, or n×k; C m×n). OpenBLAS otherwise prints "parameter
// number 9 had an illegal value" to stderr and returns without computing, leaving C as it
// was. With k = 0, A and B are not read.
void check_strides(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k,
                   std::size_t lda, std::size_t ldb, std::size_t ldc) {
  const struct {
    const char* what;
    std::size_t ld, row;
  } strides[] = {{"lda", lda, k == 0 ? 0 : ta ? m : k},
                 {"ldb", ldb, k == 0 ? 0 : tb ? k : n},
                 {"ldc", ldc, n}};
  for (const auto& s : strides) {
    if (s.ld < s.row) {
      throw Error(std::string("gemm: ") + s.what + " = " + std::to_string(s.ld) +
                  " is shorter than a stored row of " + std::to_string(s.row) +
                  " elements (m = " + std::to_string(m) + ", n = " + std::to_string(n) +
                  ", k = " + std::to_string(k) + (ta ? ", A transposed" : "") +
                  (tb ? ", B transposed" : "") + ")");
    }
  }
}

}  // namespace

void pin_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void gemm(const RunContext&, bool trans_a, bool trans_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  check_gemm("gemm", m, n, k, lda, ldb, ldc);
  check_strides(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  pin_blas_threads();
  if (k == 0) {
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      }
    }
    return;
  }
  // m, n, k <= kGemmMaxDim (2^31 - 1): m · n fits, m · n · k may not, hence the division.
  auto tiles_of = [&](std::size_t t) { return detail::ceil_div(m, t) * detail::ceil_div(n, t); };
  std::size_t tile = kGemmTile;
  while (tile > kGemmMinTile && tiles_of(tile) < kGemmMinTiles) tile /= 2;
  const std::size_t tiles_m = detail::ceil_div(m, tile);
  const std::size_t tiles_n = detail::ceil_div(n, tile);
  if (tiles_m * tiles_n == 1 || m * n <= kSerialFlops / k) {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  detail::parallel_chunks(tiles_m * tiles_n, 1, [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t i0 = (t / tiles_n) * tile, j0 = (t % tiles_n) * tile;
      const std::size_t mi = std::min(tile, m - i0), nj = std::min(tile, n - j0);
      // Row i0 of op(A) and column j0 of op(B), as stored.
      const float* at = trans_a ? a + i0 : a + i0 * lda;
      const float* bt = trans_b ? b + j0 * ldb : b + j0;
      sgemm(trans_a, trans_b, mi, nj, k, alpha, at, lda, bt, ldb, beta, c + i0 * ldc + j0, ldc);
    }
  });
}

}  // namespace cpu
}  // namespace depengine::ops
