// depengine/ops/cuda.h — GPU kernels: the operations of depengine::ops::cpu on device
// memory. Declared only in CUDA builds (DEPENGINE_HAS_CUDA, depengine/config.h); no CUDA
// types, so plain C++ includes it. The frontend's GPU arrays call them.
//
//   #if DEPENGINE_HAS_CUDA
//   engine.push([=](const RunContext& ctx) { ops::cuda::fill(ctx, out, n, 1.0f); }, {}, {v},
//               {.device = Device::gpu(0)});
//   #endif
//
// Each function enqueues its work on the CUDA stream of `ctx` (a GPU op's RunContext) and
// returns at once; pointers are device pointers of ctx.device unless named host. A launch
// that fails throws depengine::Error naming the device and the CUDA error. Results agree with
// the CPU kernels: exactly for integer-valued inputs (and for random numbers' uniform words),
// to float rounding otherwise. Thread-safe: calls share no state beyond per-stream handles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "depengine/config.h"
#include "depengine/ops/batch_norm.h"
#include "depengine/ops/conv.h"
#include "depengine/ops/elementwise.h"
#include "depengine/ops/pooling.h"
#include "depengine/ops/reduce.h"
#include "depengine/ops/strided.h"
#include "depengine/stream.h"

#if DEPENGINE_HAS_CUDA
namespace depengine::ops::cuda {

void unary(const RunContext& ctx, Unary op, const float* a, float* out, std::size_t n);
void binary(const RunContext& ctx, Binary op, const float* a, const float* b, float* out,
            std::size_t n);
void binary_scalar(const RunContext& ctx, Binary op, const float* a, float s, bool scalar_first,
                   float* out, std::size_t n);
void binary_broadcast(const RunContext& ctx, Binary op, const float* a, const float* b,
                      float* out, const Broadcast& shape);

void fill(const RunContext& ctx, float* out, std::size_t n, float value);
void arange(const RunContext& ctx, float* out, std::size_t n, double start, double step);
// Device to device on ctx.device (the ranges must not overlap).
void copy(const RunContext& ctx, const float* src, float* dst, std::size_t n);

// Row-major C = alpha · op(A) · op(B) + beta · C through cuBLAS (one handle per stream).
void gemm(const RunContext& ctx, bool trans_a, bool trans_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc);

// Philox4x32-10: the same numbers as ops::cpu::random_* for the same key and counter.
void random_uniform(const RunContext& ctx, std::uint64_t key, std::uint64_t counter, float low,
                    float high, float* out, std::size_t n);
void random_normal(const RunContext& ctx, std::uint64_t key, std::uint64_t counter, float mean,
                   float stddev, float* out, std::size_t n);

void reduce_all(const RunContext& ctx, Reduce op, const float* a, std::size_t n, float* out);
void reduce_axis(const RunContext& ctx, Reduce op, const float* a, std::size_t outer,
                 std::size_t len, std::size_t inner, float* out);

void transpose(const RunContext& ctx, const float* a, std::size_t rows, std::size_t cols,
               float* out);

// As ops::cpu's (depengine/ops/strided.h). Gathers and scatters have no GPU kernel yet.
void strided_copy(const RunContext& ctx, const float* src, std::ptrdiff_t src_offset, float* dst,
                  std::ptrdiff_t dst_offset, const Strided& s);
void reduce_axes(const RunContext& ctx, Reduce op, const float* a, const ReduceAxes& r,
                 float* out);

// Convolution, pooling, softmax and batch normalization (depengine/ops/conv.h, pooling.h,
// softmax.h, batch_norm.h): the same contracts as the CPU kernels. Convolution lowers a
// chunk of images to columns in stream-ordered scratch memory and multiplies with cuBLAS;
// every reduction runs in a fixed order, so results are reproducible run to run. A label
// outside [0, cols) cannot throw from the device: its row's loss and gradient are NaN.
void conv2d_forward(const RunContext& ctx, const Conv2d& g, const float* x, const float* w,
                    const float* b, float* y);
void conv2d_backward_data(const RunContext& ctx, const Conv2d& g, const float* dy,
                          const float* w, float* dx);
void conv2d_backward_weight(const RunContext& ctx, const Conv2d& g, const float* x,
                            const float* dy, float* dw);
void conv2d_backward_bias(const RunContext& ctx, const Conv2d& g, const float* dy, float* db);
void pool2d_forward(const RunContext& ctx, Pool op, const Pool2d& g, const float* x, float* y);
void pool2d_backward(const RunContext& ctx, Pool op, const Pool2d& g, const float* x,
                     const float* dy, float* dx);
void softmax_forward(const RunContext& ctx, bool log, const float* x, std::size_t outer,
                     std::size_t len, std::size_t inner, float* y);
void softmax_backward(const RunContext& ctx, bool log, const float* y, const float* dy,
                      std::size_t outer, std::size_t len, std::size_t inner, float* dx);
void nll_loss_forward(const RunContext& ctx, const float* logp, const float* labels,
                      std::size_t rows, std::size_t cols, float* loss);
void nll_loss_backward(const RunContext& ctx, const float* dloss, const float* labels,
                       std::size_t rows, std::size_t cols, float* dlogp);
void batch_norm_train(const RunContext& ctx, const BatchNorm& g, const float* x,
                      const float* gamma, const float* beta, float eps, float* y, float* mean,
                      float* var, float* inv_std);
void batch_norm_infer(const RunContext& ctx, const BatchNorm& g, const float* x,
                      const float* gamma, const float* beta, const float* running_mean,
                      const float* running_var, float eps, float* y);
void batch_norm_backward(const RunContext& ctx, const BatchNorm& g, const float* x,
                         const float* dy, const float* gamma, const float* mean,
                         const float* inv_std, float* dx, float* dgamma, float* dbeta);
void batch_norm_update_running(const RunContext& ctx, const BatchNorm& g, float momentum,
                               const float* mean, const float* var, float* running_mean,
                               float* running_var);
void batch_norm_infer_backward(const RunContext& ctx, const BatchNorm& g, const float* x,
                               const float* dy, const float* gamma,
                               const float* running_mean, const float* running_var, float eps,
                               float* dx, float* dgamma, float* dbeta);

// Memory. Device buffers come from the device's stream-ordered pool (cudaMallocAsync), so a
// buffer freed on a stream is reused by later work on that stream without a sync.
float* allocate(const RunContext& ctx, std::size_t n);
void deallocate(const RunContext& ctx, float* p);
// Pinned host memory for copies (cudaMallocHost / cudaFreeHost; blocking calls).
float* allocate_pinned(std::size_t n);
void free_pinned(float* p) noexcept;
// Copies on ctx's stream: host to device, device to host, and between two GPUs.
void copy_to_device(const RunContext& ctx, const float* host, float* device, std::size_t n);
void copy_to_host(const RunContext& ctx, const float* device, float* host, std::size_t n);
void copy_peer(const RunContext& ctx, const float* src, int src_device, float* dst,
               int dst_device, std::size_t n);

}  // namespace depengine::ops::cuda
#endif  // DEPENGINE_HAS_CUDA
