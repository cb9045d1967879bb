// depengine/ndarray_ops.h — more NDArray ops, as numpy's and mxnet.npx's: writes through
// slices, indexing by integer arrays, concatenate / stack, N-d transposes, batched matmul,
// reductions over several axes, mod and floor division, dropout, linspace and empty. Each
// is pushed like every NDArray op (depengine/ndarray.h: shapes checked at the call, errors
// as Error naming the op) and records its gradient under autograd::RecordScope.
//
//   NDArray x = nd::arange(0, 12).reshape({3, 4});
//   nd::slice_assign(x, {{0, 1, 2, true}, {0, 1, 4, true}}, 12.0f);   // x[0:2, :] = 12
//   NDArray rows = nd::take(x, nd::array({2.0f, 0.0f}, {2}), 0);      // x[[2, 0]]
//   NDArray s = nd::sum(x, std::vector<int>{0, 1});                     // one op
//   NDArray c = nd::concatenate({x, x}, 1);                             // (3, 8)
//
// Thread safety as for NDArray.
#pragma once

#include <cstddef>
#include <vector>

#include "depengine/ndarray.h"

namespace depengine::nd {

// a[dims] = value in place (dims as for nd::slice; value broadcasts to the selection's
// shape): a's var is written. Refused while recording when a or value has autograd history
// (autograd::detail::in_place, "setitem").
void slice_assign(NDArray& a, const std::vector<SliceDim>& dims, const NDArray& value);
void slice_assign(NDArray& a, const std::vector<SliceDim>& dims, float value);

// numpy's a[i_0, ..., i_{k-1}] for integer index arrays on the k consecutive axes from
// `axis`: the index arrays (floats holding integers; negative counts from the end) broadcast
// to one shape B, and the result is a.shape[:axis] + B + a.shape[axis + k:]. An index out of
// range fails the op (the Error reaches the next blocker). Its gradient adds into the
// selected positions, in index order (deterministic). CPU and simulated GPUs.
NDArray take(const NDArray& a, const std::vector<NDArray>& indices, int axis = 0);
NDArray take(const NDArray& a, const NDArray& indices, int axis = 0);

// numpy.concatenate / numpy.stack along `axis` (negative counts from the end).
NDArray concatenate(const std::vector<NDArray>& arrays, int axis = 0);
NDArray stack(const std::vector<NDArray>& arrays, int axis = 0);

// numpy.transpose(a, axes): any permutation of a's axes (negative allowed).
NDArray transpose(const NDArray& a, const std::vector<int>& axes);

// numpy.matmul: dot for 1-d and 2-d operands; beyond, a stack of matrix products over the
// leading (batch) dimensions, broadcast as numpy's (a 1-d operand is a row / column).
NDArray matmul(const NDArray& a, const NDArray& b);

// Reductions over several axes at once (one op; an empty list reduces nothing, a copy).
NDArray sum(const NDArray& a, const std::vector<int>& axes);
NDArray mean(const NDArray& a, const std::vector<int>& axes);
NDArray max(const NDArray& a, const std::vector<int>& axes);

// numpy.maximum / minimum with a scalar.
NDArray maximum(const NDArray& a, float s);
NDArray minimum(const NDArray& a, float s);

// numpy.mod (the remainder has the divisor's sign) and numpy.floor_divide, with
// broadcasting. floor_divide is not recorded (its gradient is zero).
NDArray mod(const NDArray& a, const NDArray& b);
NDArray mod(const NDArray& a, float s);
NDArray mod(float s, const NDArray& a);
NDArray floor_divide(const NDArray& a, const NDArray& b);
NDArray floor_divide(const NDArray& a, float s);
NDArray floor_divide(float s, const NDArray& a);

// mxnet.npx.dropout: while autograd::is_training(), each element is kept with probability
// 1 - p and scaled by 1 / (1 - p), else zeroed; otherwise `a` itself. The mask comes from
// the current engine's generator (the same bits on any engine and worker count for one
// seed). 0 <= p < 1, else Error.
NDArray dropout(const NDArray& a, float p);

// numpy.linspace: `num` values from start to stop (included when `endpoint`).
NDArray linspace(double start, double stop, std::size_t num, bool endpoint = true,
                 Device device = Device::cpu());

// numpy.empty: an array whose elements are unspecified (here: zeros, so that reading one
// never reads freed memory).
NDArray empty(const Shape& shape, Device device = Device::cpu());

}  // namespace depengine::nd
