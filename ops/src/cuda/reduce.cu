// GPU reductions. Whole-array reductions go through CUB's DeviceReduce (sums accumulated in
// double, as on the CPU, so integer-valued inputs give the same bits); axis reductions use one
// thread per output. max/argmax treat NaN as the largest value and keep the first index.
#include <cub/device/device_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <limits>

#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

struct MaxAt {
  float value;
  unsigned long long index;
};

__host__ __device__ inline bool beats(float x, float best) {
  return x > best || (isnan(x) && !isnan(best));
}

// Associative and commutative: the larger value wins, the lower index among equals.
struct MaxAtOp {
  __host__ __device__ MaxAt operator()(const MaxAt& a, const MaxAt& b) const {
    if (beats(b.value, a.value)) return b;
    if (beats(a.value, b.value)) return a;
    return a.index <= b.index ? a : b;
  }
};

struct LoadAt {
  const float* a;
  __host__ __device__ MaxAt operator()(unsigned long long i) const { return MaxAt{a[i], i}; }
};

struct AsDouble {
  __host__ __device__ double operator()(float x) const { return static_cast<double>(x); }
};

__global__ void finish_sum(const double* sum, std::size_t n, bool mean, float* out) {
  if (mean) {
    *out = n == 0 ? __int_as_float(0x7fc00000) : static_cast<float>(*sum / static_cast<double>(n));
  } else {
    *out = static_cast<float>(*sum);
  }
}

__global__ void finish_max(const MaxAt* m, bool arg, float* out) {
  *out = arg ? static_cast<float>(m->index) : m->value;
}

__global__ void axis_kernel(Reduce op, const float* a, std::size_t outer, std::size_t len,
                            std::size_t inner, float* out) {
  const std::size_t outputs = outer * inner;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < outputs;
       j += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t o = j / inner, i = j % inner;
    const float* p = a + o * len * inner + i;
    if (op == Reduce::sum || op == Reduce::mean) {
      double s = 0.0;
      for (std::size_t k = 0; k < len; ++k) s += p[k * inner];
      if (op == Reduce::mean) {
        out[j] = len == 0 ? __int_as_float(0x7fc00000)
                          : static_cast<float>(s * (1.0 / static_cast<double>(len)));
      } else {
        out[j] = static_cast<float>(s);
      }
    } else {
      float best = p[0];
      std::size_t at = 0;
      for (std::size_t k = 1; k < len; ++k) {
        if (beats(p[k * inner], best)) {
          best = p[k * inner];
          at = k;
        }
      }
      out[j] = op == Reduce::max ? best : static_cast<float>(at);
    }
  }
}

// Runs a CUB reduction of `in` (n items) into a device T on the stream, then `finish`.
template <class T, class It, class Op, class Finish>
void cub_reduce(const RunContext& ctx, cudaStream_t s, It in, std::size_t n, Op op, T init,
                Finish finish, const char* what) {
  std::size_t temp_bytes = 0;
  detail::check(cub::DeviceReduce::Reduce(nullptr, temp_bytes, in, static_cast<T*>(nullptr),
                                          static_cast<long long>(n), op, init, s),
                ctx, what);
  void* scratch = nullptr;
  const std::size_t result_bytes = (sizeof(T) + 255) / 256 * 256;
  detail::check(cudaMallocAsync(&scratch, result_bytes + temp_bytes, s), ctx, what);
  T* result = static_cast<T*>(scratch);
  void* temp = static_cast<char*>(scratch) + result_bytes;
  detail::check(cub::DeviceReduce::Reduce(temp, temp_bytes, in, result,
                                          static_cast<long long>(n), op, init, s),
                ctx, what);
  finish(result);
  detail::check_launch(ctx, what);
  detail::check(cudaFreeAsync(scratch, s), ctx, what);
}

struct AddDouble {
  __host__ __device__ double operator()(double a, double b) const { return a + b; }
};

}  // namespace

void reduce_all(const RunContext& ctx, Reduce op, const float* a, std::size_t n, float* out) {
  const char* what = name(op);
  cudaStream_t s = detail::stream_of(ctx, what);
  if (op == Reduce::sum || op == Reduce::mean) {
    auto in = thrust::make_transform_iterator(a, AsDouble{});
    cub_reduce<double>(ctx, s, in, n, AddDouble{}, 0.0,
                       [&](const double* r) { finish_sum<<<1, 1, 0, s>>>(r, n, op == Reduce::mean, out); },
                       what);
    return;
  }
  if (n == 0) throw Error(std::string(what) + ": the array is empty and has no maximum");
  auto in = thrust::make_transform_iterator(thrust::counting_iterator<unsigned long long>(0),
                                            LoadAt{a});
  const MaxAt init{-std::numeric_limits<float>::infinity(), std::numeric_limits<unsigned long long>::max()};
  cub_reduce<MaxAt>(ctx, s, in, n, MaxAtOp{}, init,
                    [&](const MaxAt* r) { finish_max<<<1, 1, 0, s>>>(r, op == Reduce::argmax, out); },
                    what);
}

void reduce_axis(const RunContext& ctx, Reduce op, const float* a, std::size_t outer,
                 std::size_t len, std::size_t inner, float* out) {
  const char* what = name(op);
  cudaStream_t s = detail::stream_of(ctx, what);
  const std::size_t outputs = outer * inner;
  if (outputs == 0) return;
  if (len == 0 && (op == Reduce::max || op == Reduce::argmax)) {
    throw Error(std::string(what) + ": the reduced axis is empty and has no maximum");
  }
  axis_kernel<<<detail::blocks_for(outputs), detail::kThreads, 0, s>>>(op, a, outer, len, inner,
                                                                        out);
  detail::check_launch(ctx, what);
}

}  // namespace depengine::ops::cuda
