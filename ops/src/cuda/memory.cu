// Device memory from the stream-ordered pool of each device (cudaMallocAsync): freeing on a
// stream returns the block to the pool at that point of the stream, so later work on the
// same stream reuses it without a device sync. The pool keeps freed memory (release
// threshold raised) instead of handing it back to the driver at every sync.
#include <cstdint>
#include <mutex>

#include "common.cuh"
#include "depengine/ops/size.h"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

void keep_pool_memory(const RunContext& ctx) {
  static std::once_flag once[64];
  const int d = ctx.device.id;
  if (d < 0 || d >= 64) return;
  std::call_once(once[d], [&] {
    cudaMemPool_t pool = nullptr;
    detail::check(cudaDeviceGetDefaultMemPool(&pool, d), ctx, "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    detail::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), ctx,
                  "cudaMemPoolSetAttribute");
  });
}

}  // namespace

float* allocate(const RunContext& ctx, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "allocate");
  if (n == 0) return nullptr;
  keep_pool_memory(ctx);
  void* p = nullptr;
  detail::check(cudaMallocAsync(&p, float_bytes(n, "allocate"), s), ctx, "cudaMallocAsync");
  return static_cast<float*>(p);
}

void deallocate(const RunContext& ctx, float* p) {
  cudaStream_t s = detail::stream_of(ctx, "deallocate");
  if (p) detail::check(cudaFreeAsync(p, s), ctx, "cudaFreeAsync");
}

float* allocate_pinned(std::size_t n) {
  const std::size_t bytes = float_bytes(n, "allocate_pinned");
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("cudaMallocHost of ") + std::to_string(bytes) +
                " bytes: " + cudaGetErrorString(e));
  }
  return static_cast<float*>(p);
}

void free_pinned(float* p) noexcept {
  if (p) cudaFreeHost(p);
}

void copy_to_device(const RunContext& ctx, const float* host, float* device, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "copy_to_device");
  if (n == 0) return;
  detail::check(cudaMemcpyAsync(device, host, float_bytes(n, "copy_to_device"),
                                cudaMemcpyHostToDevice, s),
                ctx, "copy_to_device (cudaMemcpyAsync)");
}

void copy_to_host(const RunContext& ctx, const float* device, float* host, std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "copy_to_host");
  if (n == 0) return;
  detail::check(cudaMemcpyAsync(host, device, float_bytes(n, "copy_to_host"),
                                cudaMemcpyDeviceToHost, s),
                ctx, "copy_to_host (cudaMemcpyAsync)");
}

void copy_peer(const RunContext& ctx, const float* src, int src_device, float* dst, int dst_device,
               std::size_t n) {
  cudaStream_t s = detail::stream_of(ctx, "copy_peer");
  if (n == 0) return;
  detail::check(
      cudaMemcpyPeerAsync(dst, dst_device, src, src_device, float_bytes(n, "copy_peer"), s), ctx,
      "copy_peer (cudaMemcpyPeerAsync)");
}

}  // namespace depengine::ops::cuda
