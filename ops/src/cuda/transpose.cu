// GPU 2-D transpose through shared-memory tiles (coalesced reads and writes).
#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

constexpr unsigned kTile = 32, kRows = 8;

__global__ void transpose_kernel(const float* a, std::size_t rows, std::size_t cols, float* out) {
  __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const std::size_t x = blockIdx.x * std::size_t{kTile} + threadIdx.x;
  const std::size_t y0 = blockIdx.y * std::size_t{kTile};
  for (unsigned j = threadIdx.y; j < kTile; j += kRows) {
    if (x < cols && y0 + j < rows) tile[j][threadIdx.x] = a[(y0 + j) * cols + x];
  }
  __syncthreads();
  const std::size_t ox = blockIdx.y * std::size_t{kTile} + threadIdx.x;
  const std::size_t oy0 = blockIdx.x * std::size_t{kTile};
  for (unsigned j = threadIdx.y; j < kTile; j += kRows) {
    if (ox < rows && oy0 + j < cols) out[(oy0 + j) * rows + ox] = tile[threadIdx.x][j];
  }
}

}  // namespace

void transpose(const RunContext& ctx, const float* a, std::size_t rows, std::size_t cols,
               float* out) {
  cudaStream_t s = detail::stream_of(ctx, "transpose");
  if (rows == 0 || cols == 0) return;
  const std::size_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  if (gy > 65535) throw Error("transpose: " + std::to_string(rows) + " rows exceed the grid limit");
  transpose_kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(kTile, kRows),
                     0, s>>>(a, rows, cols, out);
  detail::check_launch(ctx, "transpose");
}

}  // namespace depengine::ops::cuda
