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

#include <cstddef>

#include "depengine/stream.h"

namespace depengine::ops::cpu {

// C = alpha · op(A) · op(B) + beta · C with op(X) = X or Xᵀ; C is m×n, op(A) m×k, op(B) k×n.
// lda, ldb, ldc are the row strides in elements of A, B and C as stored.
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

}  // namespace depengine::ops::cpu
