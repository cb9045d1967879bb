// CPU strided kernels: each output element is computed once, by a chunk of a fixed size, so
// results never depend on the thread count.
#include "depengine/ops/strided.h"

#include <cmath>
#include <limits>
#include <string>

#include "depengine/error.h"
#include "parallel.h"

namespace depengine::ops::cpu {
namespace {

using detail::kElementGrain;
using detail::parallel_chunks;

// Rows of gather/scatter work per chunk: an [outer, inner] pair each.
constexpr std::size_t kIndexGrain = 4096;

// The element offset (within the indexed axes) of position j, checked.
std::size_t gathered_offset(const Gather& g, std::size_t j, const char* op) {
  std::size_t off = 0;
  for (int a = 0; a < g.k; ++a) {
    const float v = g.index[a][j];
    const double dim = static_cast<double>(g.dim[a]);
    if (!(v == std::floor(v)) || !(v >= -dim) || !(v < dim)) {
      throw Error(std::string(op) + ": index " + std::to_string(v) + " is out of bounds for an "
                  "axis of size " + std::to_string(g.dim[a]) + " (or not an integer)");
    }
    const auto i = static_cast<std::size_t>(v < 0 ? v + dim : v);
    off = off * g.dim[a] + i;
  }
  return off;
}

std::size_t indexed_size(const Gather& g) {
  std::size_t s = 1;
  for (int a = 0; a < g.k; ++a) s *= g.dim[a];
  return s;
}

}  // namespace

void strided_copy(const RunContext&, const float* src, std::ptrdiff_t src_offset, float* dst,
                  std::ptrdiff_t dst_offset, const Strided& s) {
  std::size_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.shape[d];
  parallel_chunks(n, kElementGrain, [&](std::size_t lo, std::size_t hi) {
    std::size_t idx[Strided::kMaxDims];
    std::ptrdiff_t is = src_offset, id = dst_offset;
    std::size_t rest = lo;
    for (int d = s.ndim - 1; d >= 0; --d) {
      idx[d] = rest % s.shape[d];
      rest /= s.shape[d];
      is += static_cast<std::ptrdiff_t>(idx[d]) * s.src_stride[d];
      id += static_cast<std::ptrdiff_t>(idx[d]) * s.dst_stride[d];
    }
    for (std::size_t i = lo; i < hi; ++i) {
      dst[id] = src[is];
      for (int d = s.ndim - 1; d >= 0; --d) {  // next index, odometer style
        is += s.src_stride[d];
        id += s.dst_stride[d];
        if (++idx[d] < s.shape[d]) break;
        is -= s.src_stride[d] * static_cast<std::ptrdiff_t>(s.shape[d]);
        id -= s.dst_stride[d] * static_cast<std::ptrdiff_t>(s.shape[d]);
        idx[d] = 0;
      }
    }
  });
}

void gather(const RunContext&, const float* a, const Gather& g, float* out) {
  const std::size_t span = indexed_size(g);
  parallel_chunks(g.outer * g.n, kIndexGrain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t r = lo; r < hi; ++r) {
      const std::size_t o = r / g.n, j = r % g.n;
      const float* from = a + (o * span + gathered_offset(g, j, "gather")) * g.inner;
      float* to = out + r * g.inner;
      for (std::size_t i = 0; i < g.inner; ++i) to[i] = from[i];
    }
  });
}

void scatter_add(const RunContext&, const float* grad, const Gather& gi, float* out) {
  const std::size_t span = indexed_size(gi);
  // Each chunk owns some outer rows, so no two chunks add into one element; within a row
  // the positions are added in increasing j.
  parallel_chunks(gi.outer, 1, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t o = lo; o < hi; ++o) {
      for (std::size_t j = 0; j < gi.n; ++j) {
        float* to = out + (o * span + gathered_offset(gi, j, "scatter_add")) * gi.inner;
        const float* from = grad + (o * gi.n + j) * gi.inner;
        for (std::size_t i = 0; i < gi.inner; ++i) to[i] += from[i];
      }
    }
  });
}

void reduce_axes(const RunContext&, Reduce op, const float* a, const ReduceAxes& r, float* out) {
  std::size_t n = 1, count = 1;
  for (int d = 0; d < r.out_ndim; ++d) n *= r.out_shape[d];
  for (int d = 0; d < r.red_ndim; ++d) count *= r.red_shape[d];
  const std::size_t grain = std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(1, count));
  parallel_chunks(n, grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t j = lo; j < hi; ++j) {
      std::size_t base = 0, rest = j;
      for (int d = r.out_ndim - 1; d >= 0; --d) {
        base += (rest % r.out_shape[d]) * r.out_stride[d];
        rest /= r.out_shape[d];
      }
      double sum = 0.0;
      float best = -std::numeric_limits<float>::infinity();
      bool nan = false;
      for (std::size_t k = 0; k < count; ++k) {
        std::size_t off = base, kr = k;
        for (int d = r.red_ndim - 1; d >= 0; --d) {
          off += (kr % r.red_shape[d]) * r.red_stride[d];
          kr /= r.red_shape[d];
        }
        const float v = a[off];
        sum += v;
        if (std::isnan(v)) nan = true;
        if (v > best) best = v;
      }
      switch (op) {
        case Reduce::sum: out[j] = static_cast<float>(sum); break;
        case Reduce::mean: out[j] = static_cast<float>(sum / static_cast<double>(count)); break;
        default: out[j] = nan ? std::numeric_limits<float>::quiet_NaN() : best; break;
      }
    }
  });
}

}  // namespace depengine::ops::cpu
