// A sum over the threads of a block in a fixed order (a shared-memory tree), so that a
// kernel's per-block totals are the same on every run.
#pragma once

#include <cuda_runtime.h>

namespace depengine::ops::cuda::detail {

constexpr unsigned kReduceThreads = 256;

// Every thread of a kReduceThreads block calls it with its value; all get the total.
__device__ inline double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = kReduceThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

}  // namespace depengine::ops::cuda::detail
