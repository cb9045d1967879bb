// depengine/ops/gemm.h — general matrix multiply, row-major.
//
//   depengine::ops::cpu::gemm(ctx, false, false, m, n, k, 1.f, a, k, b, n, 0.f, c, n);
//
// The CPU kernel calls OpenBLAS's cblas_sgemm, single-threaded, on fixed tiles of C that it
// runs in parallel with oneTBB inside the caller's task arena: an engine worker's arena,
// so a GEMM never starts more threads than the engine has workers (docs/threading.md).
// The tiling does not depend on the thread count, so results are bitwise reproducible.
// Thread-safe.
#pragma once

#include <climits>
#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops {

// The largest m, n, k and leading dimension a GEMM takes: cblas_sgemm and cublasSgemm take
// int, and a size beyond it is rejected rather than truncated.
inline constexpr std::size_t kGemmMaxDim = INT_MAX;

// Throws depengine::Error "<op>: k = 4294967297 exceeds 2147483647, ..." unless every one of
// m, n, k, lda, ldb, ldc is at most kGemmMaxDim, or m or n is 0 (nothing is computed). The
// GEMM kernels (CPU and CUDA) call it first; the frontend calls it when an op is pushed, so
// that the error comes at the call.
void check_gemm(const char* op, std::size_t m, std::size_t n, std::size_t k, std::size_t lda,
                std::size_t ldb, std::size_t ldc);

namespace cpu {

// C = alpha · op(A) · op(B) + beta · C with op(X) = X or Xᵀ; C is m×n, op(A) m×k, op(B) k×n.
// lda, ldb, ldc are the row strides in elements of A, B and C as stored, each at least a
// stored row (lda >= k, or m for Aᵀ; ldb >= n, or k for Bᵀ; ldc >= n). Sizes beyond
// kGemmMaxDim (check_gemm) and shorter strides are rejected with an Error before anything
// is read or written.
void gemm(const RunContext& ctx, bool trans_a, bool trans_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc);

// Edge length of the square tiles of C that run as separate tasks: kGemmTile, halved (down
// to kGemmMinTile) while that gives fewer than kGemmMinTiles tiles, so that mid-sized
// products still spread evenly over the workers (a 784×256 C made 3 full tiles and a
// sliver, and one worker did two thirds of it). The choice depends on the shape only,
// never on the thread count.
inline constexpr std::size_t kGemmTile = 256;
inline constexpr std::size_t kGemmMinTile = 128;
inline constexpr std::size_t kGemmMinTiles = 8;

// Pins OpenBLAS to one thread (done on the first gemm call; idempotent). Exposed so that a
// program that also calls cblas directly knows what depengine did to the process.
void pin_blas_threads();

}  // namespace cpu
}  // namespace depengine::ops
