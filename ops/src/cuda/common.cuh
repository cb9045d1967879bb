// Shared by the CUDA kernels: the stream of a RunContext, launch checks, grid sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "depengine/error.h"
#include "depengine/stream.h"

namespace depengine::ops::cuda::detail {

inline cudaStream_t stream_of(const RunContext& ctx, const char* op) {
  if (!ctx.device.is_gpu() || !ctx.stream || !ctx.stream->native_handle()) {
    throw Error(std::string(op) + ": needs a GPU op on a CUDA stream (got " + ctx.device.str() +
                ")");
  }
  return static_cast<cudaStream_t>(ctx.stream->native_handle());
}

inline void check(cudaError_t e, const RunContext& ctx, const char* op) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(ctx.device.str() + ": " + op + ": " + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + ")");
  }
}

// After a kernel launch: reports a bad configuration at once, naming the op.
inline void check_launch(const RunContext& ctx, const char* op) { check(cudaGetLastError(), ctx, op); }

constexpr unsigned kThreads = 256;

// Blocks for n elements in a grid-stride loop (capped; each thread loops over the rest).
inline unsigned blocks_for(std::size_t n) {
  const std::size_t b = n / kThreads + (n % kThreads != 0);  // ⌈n / kThreads⌉, no wrap
  return static_cast<unsigned>(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);
}

}  // namespace depengine::ops::cuda::detail
