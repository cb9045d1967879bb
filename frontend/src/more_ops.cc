// Batched matmul, reductions over several axes, dropout, linspace and empty
// (depengine/ndarray_ops.h), with their gradients.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

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
using detail::require;

Chunk& chunk(const NDArray& a) noexcept { return *ArrayInternals::chunk(a); }
Ptr ptr(const NDArray& a) noexcept { return detail::ptr(chunk(a)); }
bool has_history(const NDArray& a) noexcept { return ArrayInternals::node(a) != nullptr; }

// op(a) · op(b) for every matrix of a and b (at least 2-d), their leading dimensions
// broadcast as numpy's: one op that runs one GEMM per matrix of the result.
NDArray batched_gemm(const NDArray& a, const NDArray& b, bool ta, bool tb, const char* op) {
  Chunk& ca = require(a, op);
  Chunk& cb = require(b, op);
  const Shape &sa = a.shape(), &sb = b.shape();
  const std::size_t ra = sa[sa.size() - 2], ca_ = sa.back(), rb = sb[sb.size() - 2], cb_ = sb.back();
  const std::size_t m = ta ? ca_ : ra, k = ta ? ra : ca_;
  const std::size_t kb = tb ? cb_ : rb, n = tb ? rb : cb_;
  if (k != kb) {
    throw Error(std::string(op) + ": shapes " + shape_str(sa) + " and " + shape_str(sb) +
                " not aligned: " + std::to_string(k) + " != " + std::to_string(kb));
  }
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const std::optional<Shape> batch = detail::broadcast_shape(ba, bb);
  if (!batch) {
    throw Error(std::string(op) + ": the batch dimensions of shapes " + shape_str(sa) + " and " +
                shape_str(sb) + " cannot be broadcast together");
  }
  detail::check_gemm(op, sa, sb, m, n, k, ca_, cb_, n);
  Shape out_shape = *batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  NDArray out = ArrayInternals::make(*ca.engine, out_shape, ca.device, op);
  // The offset of each matrix of a and b, per matrix of the result.
  const std::vector<std::size_t> sta = detail::broadcast_strides(*batch, ba),
                                 stb = detail::broadcast_strides(*batch, bb);
  const std::size_t count = detail::shape_size(*batch);
  std::vector<std::size_t> oa(count), ob(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t rest = i;
    for (std::size_t d = batch->size(); d-- > 0;) {
      const std::size_t idx = rest % (*batch)[d];
      rest /= (*batch)[d];
      oa[i] += idx * sta[d];
      ob[i] += idx * stb[d];
    }
    oa[i] *= ra * ca_;
    ob[i] *= rb * cb_;
  }
  const Ptr pa = ptr(a), pb = ptr(b), po = ptr(out);
  launch(chunk(out), {ca.var, cb.var}, {chunk(out).var}, op, [=](const RunContext& ctx, auto kk) {
    for (std::size_t i = 0; i < oa.size(); ++i) {
      kk.gemm(ctx, ta, tb, m, n, k, 1.0f, pa.get() + oa[i], ca_, pb.get() + ob[i], cb_, 0.0f,
              po.get() + i * m * n, n);
    }
  });
  return out;
}

std::vector<std::size_t> reduced_axes(const Shape& s, const std::vector<int>& axes, const char* op) {
  const long nd = static_cast<long>(s.size());
  std::vector<bool> seen(s.size(), false);
  std::vector<std::size_t> r;
  for (int x : axes) {
    const long ax = x < 0 ? x + nd : x;
    if (ax < 0 || ax >= nd) {
      throw Error(std::string(op) + ": axis " + std::to_string(x) +
                  " is out of bounds for an array of dimension " + std::to_string(nd));
    }
    if (seen[static_cast<std::size_t>(ax)]) {
      throw Error(std::string(op) + ": duplicate value " + std::to_string(x) + " in axis");
    }
    seen[static_cast<std::size_t>(ax)] = true;
    r.push_back(static_cast<std::size_t>(ax));
  }
  std::sort(r.begin(), r.end());
  return r;
}

NDArray reduce_axes(ops::Reduce op, const NDArray& a, const std::vector<int>& axes) {
  const char* name = ops::name(op);
  Chunk& ca = require(a, name);
  const Shape& s = a.shape();
  const std::vector<std::size_t> red = reduced_axes(s, axes, name);
  if (red.size() == 1) {  // the one-axis kernel, and its gradient
    const int ax = static_cast<int>(red[0]);
    return op == ops::Reduce::sum ? nd::sum(a, ax) : op == ops::Reduce::mean ? nd::mean(a, ax)
                                                                           : nd::max(a, ax);
  }
  ops::ReduceAxes r;
  Shape out_shape, kept = s;
  std::size_t stride = 1, count = 1;
  std::vector<std::size_t> in_stride(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    in_stride[d] = stride;
    stride *= s[d];
  }
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (std::find(red.begin(), red.end(), d) != red.end()) {
      r.red_shape[r.red_ndim] = s[d];
      r.red_stride[r.red_ndim++] = in_stride[d];
      count *= s[d];
      kept[d] = 1;
    } else {
      r.out_shape[r.out_ndim] = s[d];
      r.out_stride[r.out_ndim++] = in_stride[d];
      out_shape.push_back(s[d]);
    }
  }
  if (op == ops::Reduce::max && count == 0) {
    throw Error("max: the reduced axes of shape " + shape_str(s) + " are empty and have no maximum");
  }
  NDArray y = ArrayInternals::make(*ca.engine, out_shape, ca.device, name);
  const Ptr pa = ptr(a), po = ptr(y);
  launch(chunk(y), {ca.var}, {chunk(y).var}, name,
         [=](const RunContext& ctx, auto k) { k.reduce_axes(ctx, op, pa.get(), r, po.get()); });
  if (ag::should_record({&a})) {
    using S = const ag::Saved&;
    using D = const std::vector<NDArray>&;
    using V = std::vector<NDArray>;
    const Shape sa = s;
    if (op == ops::Reduce::sum) {
      ag::record_op(name, {a}, {&y}, {}, [sa, kept](S, D g) {
        return V{nd::broadcast_to(g[0].reshape(kept), sa)};
      });
    } else if (op == ops::Reduce::mean) {
      const float len = static_cast<float>(count);
      ag::record_op(name, {a}, {&y}, {}, [sa, kept, len](S, D g) {
        return V{nd::broadcast_to(g[0].reshape(kept) / len, sa)};
      });
    } else {  // every element equal to its maximum gets the gradient, as MXNet's
      ag::record_op(name, {a}, {&y}, {a, y}, [kept](S sv, D g) {
        return V{nd::compare(sv[0], sv[1].reshape(kept), nd::Compare::equal) * g[0].reshape(kept)};
      });
    }
  }
  return y;
}

}  // namespace

namespace nd {

NDArray matmul(const NDArray& a, const NDArray& b) {
  require(a, "matmul");
  require(b, "matmul");
  if (a.ndim() == 0 || b.ndim() == 0) {
    throw Error("matmul: an operand is 0-d (shapes " + shape_str(a.shape()) + " and " +
                shape_str(b.shape()) + "); use multiply for scalars");
  }
  if (a.ndim() <= 2 && b.ndim() <= 2) return nd::dot(a, b);
  // A 1-d operand is a row of a (prepended 1) or a column of b (appended 1), removed after.
  Shape sa = a.shape(), sb = b.shape();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const NDArray a2 = a.detach().reshape(sa), b2 = b.detach().reshape(sb);
  NDArray y2 = batched_gemm(a2, b2, false, false, "matmul");
  Shape out_shape = y2.shape();
  if (b.ndim() == 1) out_shape.pop_back();
  if (a.ndim() == 1) out_shape.erase(out_shape.end() - (b.ndim() == 1 ? 1 : 2));
  NDArray y = y2.reshape(out_shape);
  if (ag::should_record({&a, &b})) {
    const Shape oa = a.shape(), ob = b.shape(), y2s = y2.shape();
    const bool na = has_history(a), nb = has_history(b);
    ag::record_op("matmul", {a, b}, {&y}, {a2, b2},
                  [oa, ob, sa, sb, y2s, na, nb](const ag::Saved& s, const std::vector<NDArray>& g) {
                    const NDArray g2 = g[0].reshape(y2s);
                    return std::vector<NDArray>{
                        na ? ag::sum_to(batched_gemm(g2, s[1], false, true, "matmul_backward"), sa)
                                 .reshape(oa)
                           : NDArray(),
                        nb ? ag::sum_to(batched_gemm(s[0], g2, true, false, "matmul_backward"), sb)
                                 .reshape(ob)
                           : NDArray()};
                  });
  }
  return y;
}

NDArray sum(const NDArray& a, const std::vector<int>& axes) {
  return reduce_axes(ops::Reduce::sum, a, axes);
}
NDArray mean(const NDArray& a, const std::vector<int>& axes) {
  return reduce_axes(ops::Reduce::mean, a, axes);
}
NDArray max(const NDArray& a, const std::vector<int>& axes) {
  return reduce_axes(ops::Reduce::max, a, axes);
}

NDArray dropout(const NDArray& a, float p) {
  Chunk& ca = require(a, "dropout");
  if (!(p >= 0.0f && p < 1.0f)) {
    throw Error("dropout: the probability p must be in [0, 1), got " + std::to_string(p));
  }
  if (!autograd::is_training() || p == 0.0f) return a;
  if (&current_engine() != ca.engine) {
    throw Error("dropout: the array lives on another engine than the current one, whose "
                "generator draws the mask (use an EngineScope of the array's engine)");
  }
  // Kept where u >= p (probability 1 - p), scaled so that the expectation is unchanged.
  const NDArray u = nd::random_uniform(a.shape(), 0.0f, 1.0f, ca.device);
  const NDArray mask = nd::compare(u, p, Compare::greater_equal) * (1.0f / (1.0f - p));
  NDArray y = a.detach() * mask;
  if (ag::should_record({&a})) {
    ag::record_op("dropout", {a}, {&y}, {mask},
                  [](const ag::Saved& s, const std::vector<NDArray>& g) {
                    return std::vector<NDArray>{g[0] * s[0]};
                  });
  }
  return y;
}

NDArray linspace(double start, double stop, std::size_t num, bool endpoint, Device device) {
  if (!std::isfinite(start) || !std::isfinite(stop)) {
    throw Error("linspace: start and stop must be finite (got " + std::to_string(start) + ", " +
                std::to_string(stop) + ")");
  }
  detail::checked_size({num}, "linspace");
  const std::size_t div = endpoint ? (num > 1 ? num - 1 : 1) : (num ? num : 1);
  const double step = (stop - start) / static_cast<double>(div);
  std::vector<float> v(num);
  for (std::size_t i = 0; i < num; ++i) v[i] = static_cast<float>(start + static_cast<double>(i) * step);
  // As numpy: the last value is stop itself, not start + (num - 1) · step rounded.
  if (endpoint && num > 1) v.back() = static_cast<float>(stop);
  return nd::array(v, {num}, device);
}

NDArray empty(const Shape& shape, Device device) { return nd::zeros(shape, device); }

}  // namespace nd
}  // namespace depengine
