// Indexing: slices (read and written), gathers by integer arrays, concatenation, stacking and
// N-d transposes — strided copies (ops::Strided) or gathers, with their gradients.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "autograd_internal.h"
#include "depengine/ndarray_ops.h"
#include "internal.h"
#include "launch.h"

namespace depengine {
namespace {

namespace ag = autograd::detail;
using detail::ArrayInternals;
using detail::Chunk;
using detail::Ptr;
using detail::launch;
using detail::launch_host;
using detail::require;

Chunk& chunk(const NDArray& a) noexcept { return *ArrayInternals::chunk(a); }
Ptr ptr(const NDArray& a) noexcept { return detail::ptr(chunk(a)); }
bool has_history(const NDArray& a) noexcept { return ArrayInternals::node(a) != nullptr; }

// Row-major strides of `s`, in elements.
std::vector<std::ptrdiff_t> strides_of(const std::vector<std::size_t>& s) {
  std::vector<std::ptrdiff_t> r(s.size());
  std::ptrdiff_t stride = 1;
  for (std::size_t d = s.size(); d-- > 0;) {
    r[d] = stride;
    stride *= static_cast<std::ptrdiff_t>(s[d]);
  }
  return r;
}

Engine& same_place(const Chunk& a, const Chunk& b, const char* op) {
  if (a.engine != b.engine) throw Error(std::string(op) + ": the arrays live on different engines");
  if (a.device != b.device) {
    throw Error(std::string(op) + ": the arrays are on different devices, " + a.device.str() +
                " and " + b.device.str() + " (copy_to moves an array)");
  }
  return *a.engine;
}

// A checked selection of an array: its element offset and, per dimension of the array, the
// count and the step in elements (0 when at most one element is taken); `shape` has the
// kept dimensions only.
struct Selection {
  std::ptrdiff_t offset = 0;
  std::vector<std::size_t> counts;
  std::vector<std::ptrdiff_t> steps;
  std::vector<bool> kept;
  Shape shape;
};

Selection select(const Shape& in, const std::vector<nd::SliceDim>& dims, const char* op) {
  if (dims.size() != in.size()) {
    throw Error(std::string(op) + ": " + std::to_string(dims.size()) +
                " selections for an array of shape " + shape_str(in));
  }
  const std::vector<std::ptrdiff_t> in_stride = strides_of(in);
  Selection sel;
  for (std::size_t d = 0; d < in.size(); ++d) {
    const nd::SliceDim& s = dims[d];
    if (s.step == 0) {
      throw Error(std::string(op) + ": step of dimension " + std::to_string(d) + " is 0");
    }
    if (!s.keep && s.count != 1) {
      // An integer index: the copy walks `count` elements of a dimension that the output no
      // longer has, so any other count would touch the wrong ones.
      throw Error(std::string(op) + ": dimension " + std::to_string(d) +
                  " is dropped (keep == false, an integer index) and must select 1 element, "
                  "not count " + std::to_string(s.count));
    }
    if (s.count > 0) {
      // start and start + step · (count - 1) both in [0, in[d]), in unsigned arithmetic: a
      // span that wrapped around long would pass as in range.
      bool in_range = s.start >= 0 && static_cast<std::size_t>(s.start) < in[d];
      if (in_range && s.count > 1) {
        const std::size_t start = static_cast<std::size_t>(s.start);
        const std::size_t step_abs = s.step < 0 ? std::size_t{0} - static_cast<std::size_t>(s.step)
                                                : static_cast<std::size_t>(s.step);
        std::size_t span = 0;
        in_range = !__builtin_mul_overflow(step_abs, s.count - 1, &span) &&
                   span <= (s.step > 0 ? in[d] - 1 - start : start);
      }
      if (!in_range) {
        throw Error(std::string(op) + ": selection out of bounds for dimension " +
                    std::to_string(d) + " of shape " + shape_str(in));
      }
      sel.offset += static_cast<std::ptrdiff_t>(s.start) * in_stride[d];
    }
    if (s.keep) sel.shape.push_back(s.count);
    sel.kept.push_back(s.keep);
    // |step| · (count - 1) < in[d] when more than one element is taken, so this fits.
    sel.steps.push_back(s.count > 1 ? s.step * in_stride[d] : 0);
    sel.counts.push_back(s.count);
  }
  return sel;
}

ops::Strided strided(const std::vector<std::size_t>& shape, const std::vector<std::ptrdiff_t>& src,
                     const std::vector<std::ptrdiff_t>& dst) {
  ops::Strided s;
  s.ndim = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    s.shape[d] = shape[d];
    s.src_stride[d] = src[d];
    s.dst_stride[d] = dst[d];
  }
  return s;
}

// Pushes dst[sel] = src (src broadcast to sel.shape): a write of dst.
void write_selection(const NDArray& dst, const Selection& sel, const NDArray& src, const char* op) {
  // src's strides over the selection's kept dimensions (0 where it is broadcast), 0 on the
  // dropped ones.
  const std::vector<std::size_t> b = detail::broadcast_strides(sel.shape, src.shape());
  std::vector<std::ptrdiff_t> src_stride;
  std::size_t k = 0;
  for (std::size_t d = 0; d < sel.counts.size(); ++d) {
    src_stride.push_back(sel.kept[d] ? static_cast<std::ptrdiff_t>(b[k++]) : 0);
  }
  const ops::Strided s = strided(sel.counts, src_stride, sel.steps);
  const Ptr ps = ptr(src), pd = ptr(dst);
  const std::ptrdiff_t offset = sel.offset;
  launch(chunk(dst), {chunk(src).var}, {chunk(dst).var}, op, [=](const RunContext& ctx, auto kk) {
    kk.strided_copy(ctx, ps.get(), 0, pd.get(), offset, s);
  });
}

NDArray read_selection(const NDArray& a, const Selection& sel, const char* op) {
  Chunk& ca = chunk(a);
  NDArray out = ArrayInternals::make(*ca.engine, sel.shape, ca.device, op);
  const ops::Strided s = strided(sel.counts, sel.steps, strides_of(sel.counts));
  const Ptr pa = ptr(a), po = ptr(out);
  const std::ptrdiff_t offset = sel.offset;
  launch(chunk(out), {ca.var}, {chunk(out).var}, op, [=](const RunContext& ctx, auto k) {
    k.strided_copy(ctx, pa.get(), offset, po.get(), 0, s);
  });
  return out;
}

// All of `shape` but `count` elements from `start` along `axis`.
std::vector<nd::SliceDim> along(const Shape& shape, std::size_t axis, std::size_t start,
                                std::size_t count) {
  std::vector<nd::SliceDim> dims;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    dims.push_back(d == axis ? nd::SliceDim{static_cast<long>(start), 1, count, true}
                             : nd::SliceDim{0, 1, shape[d], true});
  }
  return dims;
}

std::size_t norm_axis(int axis, std::size_t ndim, const char* op) {
  const long nd = static_cast<long>(ndim);
  const long ax = axis < 0 ? axis + nd : axis;
  if (ax < 0 || ax >= nd) {
    throw Error(std::string(op) + ": axis " + std::to_string(axis) +
                " is out of bounds for an array of dimension " + std::to_string(ndim));
  }
  return static_cast<std::size_t>(ax);
}

// Pushes a gather (forward) or a scatter-add (gradient) of `g` with the index arrays `idx`.
template <bool scatter>
void push_gather(const NDArray& src, const std::vector<NDArray>& idx, const ops::Gather& g,
                 const NDArray& dst, const char* op) {
  std::vector<Var> reads{chunk(src).var};
  std::vector<Ptr> pi;
  for (const NDArray& i : idx) {
    reads.push_back(chunk(i).var);
    pi.push_back(ptr(i));
  }
  const Ptr ps = ptr(src), pd = ptr(dst);
  launch_host(chunk(dst), reads, {chunk(dst).var}, op, [=](const RunContext& ctx, auto k) {
    ops::Gather gg = g;
    for (std::size_t j = 0; j < pi.size(); ++j) gg.index[j] = pi[j].get();
    if constexpr (scatter) {
      k.scatter_add(ctx, ps.get(), gg, pd.get());
    } else {
      k.gather(ctx, ps.get(), gg, pd.get());
    }
  });
}

}  // namespace

namespace nd {

NDArray slice(const NDArray& a, const std::vector<SliceDim>& dims) {
  require(a, "slice");
  const Selection sel = select(a.shape(), dims, "slice");
  NDArray out = read_selection(a, sel, "slice");
  if (ag::should_record({&a})) {
    const Shape sa = a.shape();
    ag::record_op("slice", {a}, {&out}, {},
                  [sa, sel](const ag::Saved&, const std::vector<NDArray>& g) {
                    NDArray dx = ag::zeros(g[0].engine(), sa, g[0].device());
                    write_selection(dx, sel, g[0], "slice_backward");
                    return std::vector<NDArray>{dx};
                  });
  }
  return out;
}

void slice_assign(NDArray& a, const std::vector<SliceDim>& dims, const NDArray& value) {
  Chunk& ca = require(a, "setitem");
  Chunk& cv = require(value, "setitem");
  same_place(ca, cv, "setitem");
  const Selection sel = select(a.shape(), dims, "setitem");
  const std::optional<Shape> b = detail::broadcast_shape(sel.shape, value.shape());
  if (!b || *b != sel.shape) {
    throw Error("setitem: a value of shape " + shape_str(value.shape()) +
                " does not broadcast to the selection's shape " + shape_str(sel.shape));
  }
  ag::in_place(a, {&value}, "setitem");
  // The copy reads the value while it writes a: a value sharing a's storage
  // (x[1:] = x[:-1]) is copied out first.
  const NDArray src = &cv == &ca ? value.detach().copy() : value;
  write_selection(a, sel, src, "setitem");
}

void slice_assign(NDArray& a, const std::vector<SliceDim>& dims, float value) {
  Chunk& ca = require(a, "setitem");
  slice_assign(a, dims, ag::zeros(*ca.engine, {}, ca.device) + value);
}

NDArray take(const NDArray& a, const std::vector<NDArray>& indices, int axis) {
  const char* op = "take";
  Chunk& ca = require(a, op);
  if (indices.empty()) throw Error("take: no index arrays given");
  if (indices.size() > static_cast<std::size_t>(ops::Gather::kMaxIndices)) {
    throw Error("take: at most 8 index arrays, got " + std::to_string(indices.size()));
  }
  const std::size_t ax = norm_axis(axis, a.ndim(), op);
  if (ax + indices.size() > a.ndim()) {
    throw Error("take: " + std::to_string(indices.size()) + " index arrays from axis " +
                std::to_string(axis) + " for an array of shape " + shape_str(a.shape()));
  }
  Shape b;
  for (const NDArray& i : indices) {
    same_place(ca, require(i, op), op);
    const std::optional<Shape> s = detail::broadcast_shape(b, i.shape());
    if (!s) {
      throw Error("take: index arrays of shapes " + shape_str(b) + " and " +
                  shape_str(i.shape()) + " do not broadcast together");
    }
    b = *s;
  }
  std::vector<NDArray> idx;
  for (const NDArray& i : indices) {
    idx.push_back(i.shape() == b ? i.detach() : nd::broadcast_to(i.detach(), b));
  }
  const Shape& s = a.shape();
  const std::size_t after = ax + idx.size();
  ops::Gather g;
  g.k = static_cast<int>(idx.size());
  for (std::size_t d = 0; d < ax; ++d) g.outer *= s[d];
  for (std::size_t j = 0; j < idx.size(); ++j) g.dim[j] = s[ax + j];
  for (std::size_t d = after; d < s.size(); ++d) g.inner *= s[d];
  g.n = detail::shape_size(b);
  Shape out_shape(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(ax));
  out_shape.insert(out_shape.end(), b.begin(), b.end());
  out_shape.insert(out_shape.end(), s.begin() + static_cast<std::ptrdiff_t>(after), s.end());
  NDArray out = ArrayInternals::make(*ca.engine, out_shape, ca.device, op);
  push_gather<false>(a, idx, g, out, op);
  if (ag::should_record({&a})) {
    const Shape sa = a.shape();
    ag::record_op(op, {a}, {&out}, idx,
                  [sa, g](const ag::Saved& sv, const std::vector<NDArray>& dy) {
                    NDArray dx = ag::zeros(dy[0].engine(), sa, dy[0].device());
                    push_gather<true>(dy[0], sv, g, dx, "take_backward");
                    return std::vector<NDArray>{dx};
                  });
  }
  return out;
}

NDArray take(const NDArray& a, const NDArray& indices, int axis) {
  return take(a, std::vector<NDArray>{indices}, axis);
}

NDArray concatenate(const std::vector<NDArray>& arrays, int axis) {
  const char* op = "concatenate";
  if (arrays.empty()) throw Error("concatenate: need at least one array to concatenate");
  Chunk& c0 = require(arrays[0], op);
  const Shape& s0 = arrays[0].shape();
  if (s0.empty()) throw Error("concatenate: zero-dimensional arrays cannot be concatenated");
  const std::size_t ax = norm_axis(axis, s0.size(), op);
  Shape out_shape = s0;
  out_shape[ax] = 0;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    same_place(c0, require(arrays[i], op), op);
    const Shape& s = arrays[i].shape();
    bool fits = s.size() == s0.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d) fits = d == ax || s[d] == s0[d];
    if (!fits) {
      throw Error("concatenate: array " + std::to_string(i) + " of shape " + shape_str(s) +
                  " does not match array 0 of shape " + shape_str(s0) + " except along axis " +
                  std::to_string(axis));
    }
    out_shape[ax] += s[ax];
  }
  NDArray out = ArrayInternals::make(*c0.engine, out_shape, c0.device, op);
  const std::vector<std::ptrdiff_t> out_stride = strides_of(out_shape);
  std::vector<Var> reads;
  std::vector<std::pair<Ptr, ops::Strided>> parts;
  std::vector<std::ptrdiff_t> offsets;
  std::vector<std::size_t> starts, lens;
  std::vector<bool> wanted;
  std::size_t at = 0;
  for (const NDArray& a : arrays) {
    reads.push_back(chunk(a).var);
    parts.emplace_back(ptr(a), strided(a.shape(), strides_of(a.shape()), out_stride));
    offsets.push_back(static_cast<std::ptrdiff_t>(at) * out_stride[ax]);
    starts.push_back(at);
    lens.push_back(a.shape()[ax]);
    wanted.push_back(has_history(a));
    at += a.shape()[ax];
  }
  const Ptr po = ptr(out);
  launch(chunk(out), reads, {chunk(out).var}, op, [=](const RunContext& ctx, auto k) {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      k.strided_copy(ctx, parts[i].first.get(), 0, po.get(), offsets[i], parts[i].second);
    }
  });
  if (ag::should_record(arrays)) {
    ag::record_op(op, arrays, {&out}, {},
                  [starts, lens, wanted, ax](const ag::Saved&, const std::vector<NDArray>& g) {
                    std::vector<NDArray> dx;
                    for (std::size_t i = 0; i < starts.size(); ++i) {
                      dx.push_back(wanted[i]
                                       ? nd::slice(g[0], along(g[0].shape(), ax, starts[i], lens[i]))
                                       : NDArray());
                    }
                    return dx;
                  });
  }
  return out;
}

NDArray stack(const std::vector<NDArray>& arrays, int axis) {
  if (arrays.empty()) throw Error("stack: need at least one array to stack");
  require(arrays[0], "stack");
  const Shape shape0 = arrays[0].shape();
  const std::size_t ax = norm_axis(axis, shape0.size() + 1, "stack");
  std::vector<NDArray> expanded;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    require(arrays[i], "stack");
    if (arrays[i].shape() != shape0) {
      throw Error("stack: all input arrays must have the same shape (array " +
                  std::to_string(i) + " has shape " + shape_str(arrays[i].shape()) +
                  ", array 0 " + shape_str(shape0) + ")");
    }
    Shape s = shape0;
    s.insert(s.begin() + static_cast<std::ptrdiff_t>(ax), 1);
    expanded.push_back(arrays[i].reshape(s));
  }
  return concatenate(expanded, static_cast<int>(ax));
}

NDArray transpose(const NDArray& a, const std::vector<int>& axes) {
  Chunk& ca = require(a, "transpose");
  const Shape& s = a.shape();
  if (axes.size() != s.size()) {
    throw Error("transpose: axes don't match array: " + std::to_string(axes.size()) +
                " axes for an array of shape " + shape_str(s));
  }
  std::vector<std::size_t> perm;
  std::vector<bool> seen(s.size(), false);
  for (int x : axes) {
    const std::size_t d = norm_axis(x, s.size(), "transpose");
    if (seen[d]) {
      throw Error("transpose: repeated axis " + std::to_string(x) + " in axes for an array of shape " +
                  shape_str(s));
    }
    seen[d] = true;
    perm.push_back(d);
  }
  Shape out_shape;
  const std::vector<std::ptrdiff_t> in_stride = strides_of(s);
  std::vector<std::ptrdiff_t> src;
  for (std::size_t d : perm) {
    out_shape.push_back(s[d]);
    src.push_back(in_stride[d]);
  }
  NDArray out = ArrayInternals::make(*ca.engine, out_shape, ca.device, "transpose");
  const ops::Strided st = strided(out_shape, src, strides_of(out_shape));
  const Ptr pa = ptr(a), po = ptr(out);
  launch(chunk(out), {ca.var}, {chunk(out).var}, "transpose",
         [=](const RunContext& ctx, auto k) { k.strided_copy(ctx, pa.get(), 0, po.get(), 0, st); });
  if (ag::should_record({&a})) {
    std::vector<int> inverse(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
    ag::record_op("transpose", {a}, {&out}, {},
                  [inverse](const ag::Saved&, const std::vector<NDArray>& g) {
                    return std::vector<NDArray>{nd::transpose(g[0], inverse)};
                  });
  }
  return out;
}

}  // namespace nd
}  // namespace depengine
