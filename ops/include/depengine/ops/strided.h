// depengine/ops/strided.h — kernels that walk arrays through strides: a strided copy (slices,
// writes through slices, N-d transposes, concatenation), a gather and its scatter-add
// (indexing by integer arrays and its gradient), and reductions over several axes at once.
//
//   ops::Strided s;                       // dst[i, j] = src[j, i] for a 2 x 3 src
//   s.ndim = 2;
//   s.shape[0] = 3; s.shape[1] = 2;
//   s.src_stride[0] = 1; s.src_stride[1] = 3;
//   s.dst_stride[0] = 2; s.dst_stride[1] = 1;
//   ops::cpu::strided_copy(ctx, src, 0, dst, 0, s);
//
// Strides are in elements and may be negative or 0 (0 repeats a source element: broadcasting).
// Results do not depend on the number of threads: every output element is computed by one
// thread in a fixed order. Thread-safe: calls share no state.
#pragma once

#include <cstddef>

#include "depengine/ops/reduce.h"
#include "depengine/stream.h"

namespace depengine::ops {

// An index space of `ndim` dimensions and, for each, the step it takes in a source and a
// destination. Destination positions must be distinct (no stride-0 destination dimension of
// more than one element), so the elements can be written in parallel.
struct Strided {
  static constexpr int kMaxDims = 32;
  int ndim = 0;
  std::size_t shape[kMaxDims] = {};
  std::ptrdiff_t src_stride[kMaxDims] = {};
  std::ptrdiff_t dst_stride[kMaxDims] = {};
};

// Integer-array indices into `k` consecutive axes of an array viewed as [outer, dim_0, ...,
// dim_{k-1}, inner]: `n` positions, index[a][j] the (float, integral) index into axis a of
// position j; negative indices count from the end, as numpy's.
struct Gather {
  static constexpr int kMaxIndices = 8;
  int k = 0;
  const float* index[kMaxIndices] = {};
  std::size_t dim[kMaxIndices] = {};
  std::size_t outer = 1, inner = 1, n = 0;
};

// Reduction of an array over some of its axes: the kept axes (out_shape, their strides in the
// input) index the output row-major; the reduced ones (red_shape, red_stride) are walked
// row-major for each output element.
struct ReduceAxes {
  static constexpr int kMaxDims = 32;
  int out_ndim = 0, red_ndim = 0;
  std::size_t out_shape[kMaxDims] = {}, out_stride[kMaxDims] = {};
  std::size_t red_shape[kMaxDims] = {}, red_stride[kMaxDims] = {};
};

namespace cpu {

// dst[dst_offset + idx · dst_stride] = src[src_offset + idx · src_stride] for every idx of
// s.shape. src and dst must not overlap.
void strided_copy(const RunContext& ctx, const float* src, std::ptrdiff_t src_offset, float* dst,
                  std::ptrdiff_t dst_offset, const Strided& s);

// out[o, j, i] = a[o, index_0[j], ..., index_{k-1}[j], i]. An index that is not an integer in
// [-dim, dim) throws Error naming it (the op fails; its output is not written completely).
void gather(const RunContext& ctx, const float* a, const Gather& g, float* out);

// The gradient of gather: out[o, index_0[j], ..., i] += g[o, j, i], for j in increasing order
// (the same bits on any number of threads). Index errors as for gather.
void scatter_add(const RunContext& ctx, const float* g, const Gather& gi, float* out);

// out = op over the reduced axes (sum, mean or max; sums in double, in row-major order of the
// reduced index; max treats NaN as the largest value). max needs a non-empty reduction.
void reduce_axes(const RunContext& ctx, Reduce op, const float* a, const ReduceAxes& r,
                 float* out);

}  // namespace cpu
}  // namespace depengine::ops
