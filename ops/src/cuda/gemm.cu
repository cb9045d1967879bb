// GPU GEMM through cuBLAS. A handle per (launching thread, stream): each engine lane thread
// owns one stream, so in practice one handle per compute stream, made on first use and
// destroyed when the thread ends.
#include <cublas_v2.h>

#include <string>
#include <unordered_map>

#include "common.cuh"
#include "depengine/ops/gemm.h"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

void check_blas(cublasStatus_t st, const RunContext& ctx, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw Error(ctx.device.str() + ": " + what + ": " + cublasGetStatusName(st) + " (" +
                cublasGetStatusString(st) + ")");
  }
}

class Handles {
 public:
  ~Handles() {
    for (auto& [stream, handle] : handles_) cublasDestroy(handle);
  }
  cublasHandle_t get(const RunContext& ctx, cudaStream_t stream) {
    auto it = handles_.find(stream);
    if (it != handles_.end()) return it->second;
    cublasHandle_t h = nullptr;
    check_blas(cublasCreate(&h), ctx, "cublasCreate");
    check_blas(cublasSetStream(h, stream), ctx, "cublasSetStream");
    handles_.emplace(stream, h);
    return h;
  }

 private:
  std::unordered_map<cudaStream_t, cublasHandle_t> handles_;
};

}  // namespace

void gemm(const RunContext& ctx, bool trans_a, bool trans_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cudaStream_t s = detail::stream_of(ctx, "gemm");
  if (m == 0 || n == 0) return;
  check_gemm("gemm", m, n, k, lda, ldb, ldc);
  auto as_int = [](std::size_t v) { return static_cast<int>(v); };  // checked just above
  thread_local Handles handles;
  cublasHandle_t h = handles.get(ctx, s);
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands.
  check_blas(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                         as_int(n), as_int(m), as_int(k), &alpha, b, as_int(ldb), a,
                         as_int(lda), &beta, c, as_int(ldc)),
             ctx, "cublasSgemm");
}

}  // namespace depengine::ops::cuda
