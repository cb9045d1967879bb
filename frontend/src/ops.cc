// The nd:: functions and operators: check shapes and devices, make the output, push one op
// (placed on the array's device by launch(), launch.h). Storage pointers are resolved when
// the body runs (detail::Ptr).
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "autograd_internal.h"
#include "depengine/config.h"
#include "depengine/nn.h"
#include "internal.h"
#include "depengine/ndarray_ops.h"
#include "launch.h"

namespace depengine {
namespace {

using detail::ArrayInternals;
using detail::Chunk;
using detail::Ptr;
using detail::broadcast_shape;
using detail::broadcast_strides;
using detail::require;
using detail::CpuKernels;
using detail::launch;
using detail::on_stream;
#if !DEPENGINE_HAS_CUDA
using detail::no_cuda;
#endif

Chunk& chunk(const NDArray& a) noexcept { return *ArrayInternals::chunk(a); }
Ptr ptr(const NDArray& a) noexcept { return detail::ptr(chunk(a)); }

// The shortest text that reads back as `x` ("1e+30", "0.1", "nan"), for a double and for a
// float (std::to_string prints 1e-7 as "0.000000").
template <class T>
std::string str(T x) {
  static_assert(std::is_floating_point_v<T>);
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
}

Engine& same_engine(const Chunk& a, const Chunk& b, const char* op) {
  if (a.engine != b.engine) throw Error(std::string(op) + ": the arrays live on different engines");
  if (a.device != b.device) {
    throw Error(std::string(op) + ": the arrays are on different devices, " + a.device.str() +
                " and " + b.device.str() + " (copy_to moves an array)");
  }
  return *a.engine;
}

// The loop nest for a broadcast op: dimensions of 1 dropped, neighbours that are contiguous
// in both inputs merged (a row vector over a matrix stays 2-d; equal shapes become 1-d).
ops::Broadcast plan_broadcast(const Shape& out, const Shape& a, const Shape& b, const char* op) {
  const std::vector<std::size_t> sa = broadcast_strides(out, a), sb = broadcast_strides(out, b);
  std::vector<std::size_t> shape, ra, rb;  // innermost first
  for (std::size_t k = out.size(); k-- > 0;) {
    if (out[k] == 1) continue;
    if (!shape.empty() && sa[k] == ra.back() * shape.back() && sb[k] == rb.back() * shape.back()) {
      shape.back() *= out[k];
      continue;
    }
    shape.push_back(out[k]);
    ra.push_back(sa[k]);
    rb.push_back(sb[k]);
  }
  ops::Broadcast bc;
  if (shape.size() > static_cast<std::size_t>(ops::Broadcast::kMaxDims)) {
    throw Error(std::string(op) + ": broadcasting " + shape_str(a) + " with " + shape_str(b) +
                " needs more than 8 loop dimensions");
  }
  bc.ndim = static_cast<int>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::size_t d = shape.size() - 1 - i;
    bc.shape[d] = shape[i];
    bc.a_stride[d] = ra[i];
    bc.b_stride[d] = rb[i];
  }
  return bc;
}

// Pushes out = op(a, b) with broadcasting into `out` (which may be `a`, for in place).
void push_binary(ops::Binary op, const Chunk& ca, const Shape& a, const Chunk& cb, const Shape& b,
                 const Chunk& co, const Shape& out) {
  const Ptr pa = detail::ptr(ca), pb = detail::ptr(cb), po = detail::ptr(co);
  if (a == b) {
    const std::size_t n = detail::shape_size(out);
    launch(
        co, {ca.var, cb.var}, {co.var}, ops::name(op),
        [=](const RunContext& ctx, auto k) { k.binary(ctx, op, pa.get(), pb.get(), po.get(), n); },
        n);
    return;
  }
  const ops::Broadcast bc = plan_broadcast(out, a, b, ops::name(op));
  launch(
      co, {ca.var, cb.var}, {co.var}, ops::name(op),
      [=](const RunContext& ctx, auto k) {
        k.binary_broadcast(ctx, op, pa.get(), pb.get(), po.get(), bc);
      },
      detail::shape_size(out));
}

NDArray binary(ops::Binary op, const NDArray& a, const NDArray& b) {
  const char* name = ops::name(op);
  Chunk& ca = require(a, name);
  Chunk& cb = require(b, name);
  Engine& e = same_engine(ca, cb, name);
  const std::optional<Shape> out_shape = broadcast_shape(a.shape(), b.shape());
  if (!out_shape) {
    throw Error(std::string(name) + ": shapes " + shape_str(a.shape()) + " and " +
                shape_str(b.shape()) + " cannot be broadcast together");
  }
  NDArray out = ArrayInternals::make(e, *out_shape, ca.device, name);
  push_binary(op, ca, a.shape(), cb, b.shape(), chunk(out), out.shape());
  return out;
}

void binary_inplace(ops::Binary op, NDArray& a, const NDArray& b) {
  const char* name = ops::name(op);
  Chunk& ca = require(a, name);
  Chunk& cb = require(b, name);
  same_engine(ca, cb, name);
  const std::optional<Shape> out_shape = broadcast_shape(a.shape(), b.shape());
  if (!out_shape || *out_shape != a.shape()) {
    throw Error(std::string(name) + " (in place): shape " + shape_str(b.shape()) +
                " does not broadcast to the output's shape " + shape_str(a.shape()));
  }
  autograd::detail::in_place(a, {&b}, name);
  push_binary(op, ca, a.shape(), cb, b.shape(), ca, a.shape());
}

void push_scalar(ops::Binary op, const Chunk& ca, float s, bool scalar_first, const Chunk& co,
                 std::size_t n) {
  const Ptr pa = detail::ptr(ca), po = detail::ptr(co);
  launch(
      co, {ca.var}, {co.var}, ops::name(op),
      [=](const RunContext& ctx, auto k) {
        k.binary_scalar(ctx, op, pa.get(), s, scalar_first, po.get(), n);
      },
      n);
}

void scalar_inplace(ops::Binary op, NDArray& a, float s) {
  Chunk& ca = require(a, ops::name(op));
  autograd::detail::in_place(a, {}, ops::name(op));
  push_scalar(op, ca, s, false, ca, a.size());
}

NDArray scalar(ops::Binary op, const NDArray& a, float s, bool scalar_first) {
  Chunk& ca = require(a, ops::name(op));
  NDArray out = ArrayInternals::make(*ca.engine, a.shape(), ca.device, ops::name(op));
  push_scalar(op, ca, s, scalar_first, chunk(out), a.size());
  return out;
}

NDArray unary(ops::Unary op, const NDArray& a) {
  Chunk& ca = require(a, ops::name(op));
  NDArray out = ArrayInternals::make(*ca.engine, a.shape(), ca.device, ops::name(op));
  const Ptr pa = detail::ptr(ca), po = ptr(out);
  const std::size_t n = a.size();
  launch(
      chunk(out), {ca.var}, {chunk(out).var}, ops::name(op),
      [=](const RunContext& ctx, auto k) { k.unary(ctx, op, pa.get(), po.get(), n); }, n);
  return out;
}

NDArray reduce_all(ops::Reduce op, const NDArray& a) {
  const char* name = ops::name(op);
  Chunk& ca = require(a, name);
  if (a.size() == 0 && (op == ops::Reduce::max || op == ops::Reduce::argmax)) {
    throw Error(std::string(name) + ": the array of shape " + shape_str(a.shape()) +
                " is empty and has no maximum");
  }
  NDArray out = ArrayInternals::make(*ca.engine, {}, ca.device, name);
  const Ptr pa = detail::ptr(ca), po = ptr(out);
  const std::size_t n = a.size();
  launch(
      chunk(out), {ca.var}, {chunk(out).var}, name,
      [=](const RunContext& ctx, auto k) { k.reduce_all(ctx, op, pa.get(), n, po.get()); }, n);
  return out;
}

NDArray reduce_axis(ops::Reduce op, const NDArray& a, int axis) {
  const char* name = ops::name(op);
  Chunk& ca = require(a, name);
  const long nd = static_cast<long>(a.ndim());
  const long ax = axis < 0 ? axis + nd : axis;
  if (ax < 0 || ax >= nd) {
    throw Error(std::string(name) + ": axis " + std::to_string(axis) +
                " is out of range for shape " + shape_str(a.shape()));
  }
  const Shape& s = a.shape();
  const std::size_t len = s[static_cast<std::size_t>(ax)];
  if (len == 0 && (op == ops::Reduce::max || op == ops::Reduce::argmax)) {
    throw Error(std::string(name) + ": axis " + std::to_string(axis) + " of shape " +
                shape_str(s) + " is empty and has no maximum");
  }
  // Products of some of the dimensions of a's checked shape: they fit (checked_size).
  std::size_t outer = 1, inner = 1;
  Shape out_shape;
  for (long d = 0; d < nd; ++d) {
    const std::size_t dim = s[static_cast<std::size_t>(d)];
    if (d < ax) outer *= dim;
    if (d > ax) inner *= dim;
    if (d != ax) out_shape.push_back(dim);
  }
  NDArray out = ArrayInternals::make(*ca.engine, std::move(out_shape), ca.device, name);
  const Ptr pa = detail::ptr(ca), po = ptr(out);
  launch(chunk(out), {ca.var}, {chunk(out).var}, name, [=](const RunContext& ctx, auto k) {
    k.reduce_axis(ctx, op, pa.get(), outer, len, inner, po.get());
  });
  return out;
}

NDArray fill(Engine& e, const Shape& shape, float value, Device device, const char* name) {
  detail::check_device(e, device, name);
  NDArray out = ArrayInternals::make(e, shape, device, name);
  const Ptr po = ptr(out);
  const std::size_t n = out.size();
  launch(
      chunk(out), {}, {chunk(out).var}, name,
      [=](const RunContext& ctx, auto k) { k.fill(ctx, po.get(), n, value); }, n);
  return out;
}

// Pushes the generator's next `n` numbers into `out` on its device: the op reads and
// advances the generator state when it is launched, and its kernel uses the values read.
template <class Draw>
void push_random(const Chunk& out, std::size_t n, const char* name, Draw draw) {
  detail::Context& cx = detail::current_context();
  const detail::Generator& gen = detail::use_generator(cx);
  detail::Rng* rng = gen.rng;
  const Ptr po = detail::ptr(out);
  auto take = [rng, n] {
    const std::pair<std::uint64_t, std::uint64_t> kc{rng->key, rng->counter};
    rng->counter += ops::philox_blocks(n);
    return kc;
  };
  if (out.device.is_cpu()) {
    cx.engine->push(
        [=](const RunContext& ctx) {
          const auto kc = take();
          draw(ctx, CpuKernels{}, kc.first, kc.second, po.get());
        },
        {gen.var}, {gen.var, out.var}, PushOptions{.name = name});
    return;
  }
  const bool simulated = out.simulated;
  cx.engine->push(
      [=](const RunContext& ctx) {
        const auto kc = take();
        on_stream(ctx, simulated, [=](const RunContext& c, auto k) {
          draw(c, k, kc.first, kc.second, po.get());
        });
      },
      {gen.var}, {gen.var, out.var},
      PushOptions{.device = out.device, .lane = Lane::compute, .name = name});
}


// ---- Autograd: the public ops record their gradients (autograd_internal.h) ----

namespace ag = autograd::detail;

bool has_history(const NDArray& a) noexcept { return ArrayInternals::node(a) != nullptr; }

// op(a) · op(b) for 2-d arrays on any device: the products of dot's gradient.
NDArray gemm_any(const NDArray& a, const NDArray& b, bool ta, bool tb) {
  const Chunk& ca = chunk(a);
  const Shape &sa = a.shape(), &sb = b.shape();
  const std::size_t m = ta ? sa[1] : sa[0], k = ta ? sa[0] : sa[1], n = tb ? sb[0] : sb[1];
  const std::size_t lda = sa[1], ldb = sb[1];
  detail::check_gemm("dot (gradient)", sa, sb, m, n, k, lda, ldb, n);
  NDArray out = ArrayInternals::make(*ca.engine, {m, n}, ca.device, "dot");
  const Ptr pa = ptr(a), pb = ptr(b), po = ptr(out);
  launch(chunk(out), {ca.var, chunk(b).var}, {chunk(out).var}, "dot_backward",
         [=](const RunContext& ctx, auto kernels) {
           kernels.gemm(ctx, ta, tb, m, n, k, 1.0f, pa.get(), lda, pb.get(), ldb, 0.0f,
                        po.get(), n);
         });
  return out;
}

ops::Binary compare_op(nd::Compare c) noexcept {
  switch (c) {
    case nd::Compare::equal: return ops::Binary::equal;
    case nd::Compare::not_equal: return ops::Binary::not_equal;
    case nd::Compare::less: return ops::Binary::less;
    case nd::Compare::less_equal: return ops::Binary::less_equal;
    case nd::Compare::greater: return ops::Binary::greater;
    case nd::Compare::greater_equal: return ops::Binary::greater_equal;
  }
  return ops::Binary::equal;
}

// 1.0f where the comparison holds: the factor that routes a gradient.
NDArray mask(const NDArray& a, const NDArray& b, nd::Compare c) { return nd::compare(a, b, c); }

// Comparisons and floor division are not recorded: their gradient is zero everywhere it is
// defined, so their outputs carry no history (as constants in a recorded graph).
bool differentiable(ops::Binary op) noexcept {
  return op <= ops::Binary::mod;
}

NDArray binary_op(ops::Binary op, const NDArray& a, const NDArray& b) {
  NDArray y = binary(op, a, b);
  if (!differentiable(op) || !ag::should_record({&a, &b})) return y;
  const bool na = has_history(a), nb = has_history(b);
  // Each gradient is computed only for an input with a history, of the output's shape: the
  // walk sums it over the axes its input was broadcast along. (No shapes captured: recording
  // is on the push path, and a closure this small needs no allocation.)
  auto pick = [na, nb](NDArray ga, NDArray gb) {
    return std::vector<NDArray>{na ? std::move(ga) : NDArray(), nb ? std::move(gb) : NDArray()};
  };
  using S = const ag::Saved&;
  using D = const std::vector<NDArray>&;
  switch (op) {
    case ops::Binary::add:
      ag::record_op("add", {&a, &b}, {&y}, {}, [pick](S, D g) { return pick(g[0], g[0]); });
      break;
    case ops::Binary::sub:
      ag::record_op("sub", {&a, &b}, {&y}, {}, [pick, nb](S, D g) {
        return pick(g[0], nb ? -g[0] : NDArray());
      });
      break;
    case ops::Binary::mul:
      ag::record_op("mul", {&a, &b}, {&y}, {a, b}, [pick, na, nb](S s, D g) {
        return pick(na ? g[0] * s[1] : NDArray(), nb ? g[0] * s[0] : NDArray());
      });
      break;
    case ops::Binary::div:
      // d(a/b)/db = -a/b² = -y/b.
      ag::record_op("div", {&a, &b}, {&y}, {b, y}, [pick, na, nb](S s, D g) {
        return pick(na ? g[0] / s[0] : NDArray(), nb ? -(g[0] * s[1]) / s[0] : NDArray());
      });
      break;
    case ops::Binary::pow:
      ag::record_op("pow", {&a, &b}, {&y}, {a, b, y}, [pick, na, nb](S s, D g) {
        return pick(na ? g[0] * s[1] * nd::pow(s[0], s[1] - 1.0f) : NDArray(),
                    nb ? g[0] * s[2] * nd::log(s[0]) : NDArray());
      });
      break;
    case ops::Binary::maximum:
      // Ties go to a, as MXNet's maximum backward.
      ag::record_op("maximum", {&a, &b}, {&y}, {a, b}, [pick, na, nb](S s, D g) {
        return pick(na ? g[0] * mask(s[0], s[1], nd::Compare::greater_equal) : NDArray(),
                    nb ? g[0] * mask(s[0], s[1], nd::Compare::less) : NDArray());
      });
      break;
    case ops::Binary::minimum:
      ag::record_op("minimum", {&a, &b}, {&y}, {a, b}, [pick, na, nb](S s, D g) {
        return pick(na ? g[0] * mask(s[0], s[1], nd::Compare::less_equal) : NDArray(),
                    nb ? g[0] * mask(s[0], s[1], nd::Compare::greater) : NDArray());
      });
      break;
    case ops::Binary::mod:
      // a mod b = a - floor_div(a, b) · b, the quotient piecewise constant.
      ag::record_op("mod", {&a, &b}, {&y}, {a, b}, [pick, nb](S s, D g) {
        return pick(g[0], nb ? -(g[0] * binary(ops::Binary::floor_div, s[0], s[1])) : NDArray());
      });
      break;
    default:
      break;
  }
  return y;
}

NDArray scalar_op(ops::Binary op, const NDArray& a, float c, bool scalar_first) {
  NDArray y = scalar(op, a, c, scalar_first);
  if (!differentiable(op) || !ag::should_record({&a})) return y;
  using S = const ag::Saved&;
  using D = const std::vector<NDArray>&;
  using V = std::vector<NDArray>;
  const char* name = ops::name(op);
  switch (op) {
    case ops::Binary::add:
      ag::record_op(name, {&a}, {&y}, {}, [](S, D g) { return V{g[0]}; });
      break;
    case ops::Binary::sub:
      ag::record_op(name, {&a}, {&y}, {}, [scalar_first](S, D g) {
        return V{scalar_first ? -g[0] : g[0]};
      });
      break;
    case ops::Binary::mul:
      ag::record_op(name, {&a}, {&y}, {}, [c](S, D g) { return V{g[0] * c}; });
      break;
    case ops::Binary::div:
      if (scalar_first) {  // d(c/a)/da = -c/a² = -y/a
        ag::record_op(name, {&a}, {&y}, {a, y}, [](S s, D g) { return V{-(g[0] * s[1]) / s[0]}; });
      } else {
        ag::record_op(name, {&a}, {&y}, {}, [c](S, D g) { return V{g[0] / c}; });
      }
      break;
    case ops::Binary::pow:
      if (scalar_first) {  // d(c^a)/da = c^a · ln c
        ag::record_op(name, {&a}, {&y}, {y}, [c](S s, D g) {
          return V{g[0] * s[0] * std::log(c)};
        });
      } else {
        ag::record_op(name, {&a}, {&y}, {a}, [c](S s, D g) {
          return V{g[0] * (nd::pow(s[0], c - 1.0f) * c)};
        });
      }
      break;
    case ops::Binary::maximum:
      ag::record_op(name, {&a}, {&y}, {a}, [c](S s, D g) {
        return V{g[0] * nd::compare(s[0], c, nd::Compare::greater_equal)};
      });
      break;
    case ops::Binary::minimum:
      ag::record_op(name, {&a}, {&y}, {a}, [c](S s, D g) {
        return V{g[0] * nd::compare(s[0], c, nd::Compare::less_equal)};
      });
      break;
    case ops::Binary::mod:
      if (scalar_first) {  // c mod a = c - floor_div(c, a) · a
        ag::record_op(name, {&a}, {&y}, {a}, [c](S s, D g) {
          return V{-(g[0] * scalar(ops::Binary::floor_div, s[0], c, true))};
        });
      } else {
        ag::record_op(name, {&a}, {&y}, {}, [](S, D g) { return V{g[0]}; });
      }
      break;
    default:
      break;
  }
  return y;
}

NDArray unary_op(ops::Unary op, const NDArray& a) {
  NDArray y = unary(op, a);
  if (!ag::should_record({&a})) return y;
  using S = const ag::Saved&;
  using D = const std::vector<NDArray>&;
  using V = std::vector<NDArray>;
  const char* name = ops::name(op);
  switch (op) {
    case ops::Unary::neg:
      ag::record_op(name, {&a}, {&y}, {}, [](S, D g) { return V{-g[0]}; });
      break;
    case ops::Unary::exp:
      ag::record_op(name, {&a}, {&y}, {y}, [](S s, D g) { return V{g[0] * s[0]}; });
      break;
    case ops::Unary::log:
      ag::record_op(name, {&a}, {&y}, {a}, [](S s, D g) { return V{g[0] / s[0]}; });
      break;
    case ops::Unary::relu:
      // One fused op on the CPU (nd::relu_backward) instead of a comparison and a product.
      ag::record_op(name, {&a}, {&y}, {y}, [](S s, D g) {
        if (s[0].device().is_cpu()) return V{nd::relu_backward(s[0], g[0])};
        return V{g[0] * nd::compare(s[0], 0.0f, nd::Compare::greater)};
      });
      break;
    case ops::Unary::sigmoid:
      ag::record_op(name, {&a}, {&y}, {y}, [](S s, D g) {
        return V{g[0] * ((1.0f - s[0]) * s[0])};
      });
      break;
    case ops::Unary::tanh:
      ag::record_op(name, {&a}, {&y}, {y}, [](S s, D g) {
        return V{g[0] * (1.0f - nd::square(s[0]))};
      });
      break;
    case ops::Unary::sqrt:
      ag::record_op(name, {&a}, {&y}, {y}, [](S s, D g) { return V{g[0] / (s[0] * 2.0f)}; });
      break;
    case ops::Unary::abs:
      ag::record_op(name, {&a}, {&y}, {a}, [](S s, D g) {
        return V{g[0] * (nd::compare(s[0], 0.0f, nd::Compare::greater) -
                         nd::compare(s[0], 0.0f, nd::Compare::less))};
      });
      break;
    case ops::Unary::square:
      ag::record_op(name, {&a}, {&y}, {a}, [](S s, D g) { return V{g[0] * (s[0] * 2.0f)}; });
      break;
  }
  return y;
}

// The shape of `a` with axis `axis` (already checked by the forward) kept as 1.
Shape kept_shape(const Shape& a, int axis) {
  Shape k = a;
  k[static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(a.size()) : axis)] = 1;
  return k;
}

NDArray reduce_all_op(ops::Reduce op, const NDArray& a) {
  NDArray y = reduce_all(op, a);
  if (op == ops::Reduce::argmax || !ag::should_record({&a})) return y;
  using S = const ag::Saved&;
  using D = const std::vector<NDArray>&;
  using V = std::vector<NDArray>;
  const Shape sa = a.shape();
  const float n = static_cast<float>(a.size());
  if (op == ops::Reduce::sum) {
    ag::record_op("sum", {a}, {&y}, {}, [sa](S, D g) { return V{nd::broadcast_to(g[0], sa)}; });
  } else if (op == ops::Reduce::mean) {
    ag::record_op("mean", {a}, {&y}, {}, [sa, n](S, D g) {
      return V{nd::broadcast_to(g[0] / n, sa)};
    });
  } else {  // max: every element equal to the maximum gets the gradient, as MXNet's
    ag::record_op("max", {a}, {&y}, {a, y}, [](S s, D g) {
      return V{nd::compare(s[0], s[1], nd::Compare::equal) * g[0]};
    });
  }
  return y;
}

NDArray reduce_axis_op(ops::Reduce op, const NDArray& a, int axis) {
  NDArray y = reduce_axis(op, a, axis);
  if (op == ops::Reduce::argmax || !ag::should_record({&a})) return y;
  using S = const ag::Saved&;
  using D = const std::vector<NDArray>&;
  using V = std::vector<NDArray>;
  const Shape sa = a.shape(), kept = kept_shape(sa, axis);
  if (op == ops::Reduce::sum) {
    ag::record_op("sum", {a}, {&y}, {}, [sa, kept](S, D g) {
      return V{nd::broadcast_to(g[0].reshape(kept), sa)};
    });
  } else if (op == ops::Reduce::mean) {
    const float len = static_cast<float>(sa[static_cast<std::size_t>(
        axis < 0 ? axis + static_cast<int>(sa.size()) : axis)]);
    ag::record_op("mean", {a}, {&y}, {}, [sa, kept, len](S, D g) {
      return V{nd::broadcast_to(g[0].reshape(kept) / len, sa)};
    });
  } else {
    ag::record_op("max", {a}, {&y}, {a, y}, [kept](S s, D g) {
      return V{nd::compare(s[0], s[1].reshape(kept), nd::Compare::equal) * g[0].reshape(kept)};
    });
  }
  return y;
}

}  // namespace

namespace detail {

std::optional<Shape> broadcast_shape(const Shape& a, const Shape& b) {
  const std::size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    const std::size_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const std::size_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<std::size_t> broadcast_strides(const Shape& out, const Shape& in) {
  std::vector<std::size_t> s(out.size(), 0);
  std::size_t stride = 1;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t d = out.size() - 1 - k, dim = in[in.size() - 1 - k];
    s[d] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return s;
}

}  // namespace detail

NDArray autograd::detail::zeros(Engine& e, const Shape& shape, Device device) {
  return fill(e, shape, 0.0f, device, "zeros");
}

void autograd::detail::copy_into(const NDArray& dst, const NDArray& src) {
  Chunk& cd = require(dst, "copy_into");
  Chunk& cs = require(src, "copy_into");
  same_engine(cd, cs, "copy_into");
  if (dst.shape() != src.shape()) {
    throw Error("copy_into: shapes " + shape_str(dst.shape()) + " and " + shape_str(src.shape()) +
                " differ");
  }
  bump_version(dst);
  const Ptr ps = depengine::detail::ptr(cs), pd = depengine::detail::ptr(cd);
  const std::size_t n = dst.size();
  if (&cd == &cs) return;
  launch(cd, {cs.var}, {cd.var}, "copy_into",
         [=](const RunContext& ctx, auto k) { k.copy(ctx, ps.get(), pd.get(), n); });
}

void detail::check_gemm(const char* op, const Shape& a, const Shape& b, std::size_t m,
                        std::size_t n, std::size_t k, std::size_t lda, std::size_t ldb,
                        std::size_t ldc) {
  try {
    ops::check_gemm(op, m, n, k, lda, ldb, ldc);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (shapes " + shape_str(a) + " and " + shape_str(b) + ")");
  }
}

NDArray NDArray::copy() const { return nd::copy(*this); }

NDArray NDArray::copy_to(Device device) const {
  Chunk& ca = require(*this, "copy_to");
  detail::check_device(*ca.engine, device, "copy_to");
  if (device == ca.device) return nd::copy(*this);
  NDArray out = ArrayInternals::make(*ca.engine, shape(), device, "copy_to");
  const Chunk& co = chunk(out);
  const Device from = ca.device, to = device;
  // Host to GPU and GPU to GPU on the destination's copy-in lane; GPU to host on the
  // source's copy-out lane.
  const Device where = to.is_gpu() ? to : from;
  const Lane lane = to.is_gpu() ? Lane::copy_to_device : Lane::copy_from_device;
  const bool simulated = ca.simulated || co.simulated;
  const Ptr src = detail::ptr(ca), dst = detail::ptr(co);
  const std::size_t n = size();
  ca.engine->push(
      [=](const RunContext& ctx) {
        if (simulated) {
          ctx.stream->enqueue_host([=] {
            if (n) std::memcpy(dst.get(), src.get(), n * sizeof(float));
          });
          return;
        }
#if DEPENGINE_HAS_CUDA
        if (from.is_cpu()) {
          ops::cuda::copy_to_device(ctx, src.get(), dst.get(), n);
        } else if (to.is_cpu()) {
          ops::cuda::copy_to_host(ctx, src.get(), dst.get(), n);
        } else {
          ops::cuda::copy_peer(ctx, src.get(), from.id, dst.get(), to.id, n);
        }
#else
        no_cuda(ctx.device);
#endif
      },
      {ca.var}, {co.var}, PushOptions{.device = where, .lane = lane, .name = "copy_to"});
  if (ag::should_record({this})) {
    ag::record_op("copy_to", {*this}, {&out}, {},
                  [from](const ag::Saved&, const std::vector<NDArray>& g) {
                    return std::vector<NDArray>{g[0].copy_to(from)};
                  });
  }
  return out;
}
NDArray NDArray::T() const { return nd::transpose(*this); }
NDArray NDArray::operator-() const { return nd::negative(*this); }

NDArray& NDArray::operator+=(const NDArray& b) {
  binary_inplace(ops::Binary::add, *this, b);
  return *this;
}
NDArray& NDArray::operator-=(const NDArray& b) {
  binary_inplace(ops::Binary::sub, *this, b);
  return *this;
}
NDArray& NDArray::operator*=(const NDArray& b) {
  binary_inplace(ops::Binary::mul, *this, b);
  return *this;
}
NDArray& NDArray::operator/=(const NDArray& b) {
  binary_inplace(ops::Binary::div, *this, b);
  return *this;
}

NDArray& NDArray::operator+=(float s) {
  scalar_inplace(ops::Binary::add, *this, s);
  return *this;
}
NDArray& NDArray::operator-=(float s) {
  scalar_inplace(ops::Binary::sub, *this, s);
  return *this;
}
NDArray& NDArray::operator*=(float s) {
  scalar_inplace(ops::Binary::mul, *this, s);
  return *this;
}
NDArray& NDArray::operator/=(float s) {
  scalar_inplace(ops::Binary::div, *this, s);
  return *this;
}

NDArray operator+(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::add, a, b); }
NDArray operator-(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::sub, a, b); }
NDArray operator*(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::mul, a, b); }
NDArray operator/(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::div, a, b); }
NDArray operator+(const NDArray& a, float s) { return scalar_op(ops::Binary::add, a, s, false); }
NDArray operator-(const NDArray& a, float s) { return scalar_op(ops::Binary::sub, a, s, false); }
NDArray operator*(const NDArray& a, float s) { return scalar_op(ops::Binary::mul, a, s, false); }
NDArray operator/(const NDArray& a, float s) { return scalar_op(ops::Binary::div, a, s, false); }
NDArray operator+(float s, const NDArray& a) { return scalar_op(ops::Binary::add, a, s, true); }
NDArray operator-(float s, const NDArray& a) { return scalar_op(ops::Binary::sub, a, s, true); }
NDArray operator*(float s, const NDArray& a) { return scalar_op(ops::Binary::mul, a, s, true); }
NDArray operator/(float s, const NDArray& a) { return scalar_op(ops::Binary::div, a, s, true); }

namespace nd {

NDArray zeros(const Shape& shape, Device device) { return fill(current_engine(), shape, 0.0f, device, "zeros"); }
NDArray ones(const Shape& shape, Device device) { return fill(current_engine(), shape, 1.0f, device, "ones"); }
NDArray full(const Shape& shape, float value, Device device) {
  return fill(current_engine(), shape, value, device, "full");
}

NDArray arange(double start, double stop, double step, Device device) {
  detail::check_device(current_engine(), device, "arange");
  if (step == 0.0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop)) {
    throw Error("arange: start, stop and a non-zero step must be finite (got " + str(start) +
                ", " + str(stop) + ", " + str(step) + ")");
  }
  const double count = std::ceil((stop - start) / step);
  // 2^64: converting a double from there up to size_t is undefined. Smaller counts that an
  // array cannot hold are left to the shape check, like any shape.
  if (!(count < 0x1p64)) {
    throw Error("arange: start " + str(start) + ", stop " + str(stop) + " and step " +
                str(step) + " give " + str(count) + " elements, more than fit in size_t");
  }
  const std::size_t n = count > 0 ? static_cast<std::size_t>(count) : 0;
  NDArray out = ArrayInternals::make(current_engine(), {n}, device, "arange");
  const Ptr po = ptr(out);
  launch(chunk(out), {}, {chunk(out).var}, "arange",
         [=](const RunContext& ctx, auto k) { k.arange(ctx, po.get(), n, start, step); });
  return out;
}

NDArray array(std::span<const float> values, const Shape& shape, Device device) {
  detail::check_device(current_engine(), device, "array");
  if (values.size() != detail::checked_size(shape, "array")) {
    throw Error("array: " + std::to_string(values.size()) + " values do not fill shape " +
                shape_str(shape));
  }
  if (device.is_gpu()) return array(values, shape, Device::cpu()).copy_to(device);
  NDArray out = ArrayInternals::make(current_engine(), shape, "array");
  // The storage is new and its var has no pending access, so the caller may fill it here.
  if (!values.empty()) std::memcpy(chunk(out).data, values.data(), values.size_bytes());
  return out;
}

NDArray array(const std::vector<float>& values, const Shape& shape, Device device) {
  return array(std::span<const float>(values), shape, device);
}

NDArray random_uniform(const Shape& shape, float low, float high, Device device) {
  detail::check_device(current_engine(), device, "random_uniform");
  // As numpy: a bound that is not finite, or a range high - low that overflows float32,
  // would give inf and nan instead of numbers in [low, high).
  const std::string given = "low " + str(low) + ", high " + str(high);
  if (!std::isfinite(low) || !std::isfinite(high)) {
    throw Error("random_uniform: low and high must be finite (got " + given + ")");
  }
  if (!(low <= high)) throw Error("random_uniform: low is above high (got " + given + ")");
  if (!std::isfinite(high - low)) {
    throw Error("random_uniform: the range high - low overflows float32 (got " + given + ")");
  }
  NDArray out = ArrayInternals::make(current_engine(), shape, device, "random_uniform");
  const std::size_t n = out.size();
  push_random(chunk(out), n, "random_uniform",
              [=](const RunContext& ctx, auto k, std::uint64_t key, std::uint64_t counter,
                  float* po) { k.random_uniform(ctx, key, counter, low, high, po, n); });
  return out;
}

NDArray random_normal(const Shape& shape, float mean, float stddev, Device device) {
  detail::check_device(current_engine(), device, "random_normal");
  // An infinite mean or stddev gives inf and nan (inf · 0), not samples.
  if (!std::isfinite(mean) || !std::isfinite(stddev) || stddev < 0.0f) {
    throw Error("random_normal: mean must be finite and stddev finite and non-negative (got "
                "mean " + str(mean) + ", stddev " + str(stddev) + ")");
  }
  NDArray out = ArrayInternals::make(current_engine(), shape, device, "random_normal");
  const std::size_t n = out.size();
  push_random(chunk(out), n, "random_normal",
              [=](const RunContext& ctx, auto k, std::uint64_t key, std::uint64_t counter,
                  float* po) { k.random_normal(ctx, key, counter, mean, stddev, po, n); });
  return out;
}

void seed(std::uint64_t s) {
  detail::Context& cx = detail::current_context();
  const detail::Generator& gen = detail::use_generator(cx);
  detail::Rng* rng = gen.rng;
  cx.engine->push(
      [=] {
        rng->key = s;
        rng->counter = 0;
      },
      {}, {gen.var}, PushOptions{.name = "seed"});
}

NDArray dot(const NDArray& a, const NDArray& b) {
  Chunk& ca = require(a, "dot");
  Chunk& cb = require(b, "dot");
  Engine& e = same_engine(ca, cb, "dot");
  const Shape &sa = a.shape(), &sb = b.shape();
  if (sa.empty() || sb.empty() || sa.size() > 2 || sb.size() > 2) {
    throw Error("dot: shapes " + shape_str(sa) + " and " + shape_str(sb) +
                " are not 1-d or 2-d arrays");
  }
  const std::size_t m = sa.size() == 2 ? sa[0] : 1, k = sa.back();
  const std::size_t kb = sb[0], n = sb.size() == 2 ? sb[1] : 1;
  if (k != kb) {
    throw Error("dot: shapes " + shape_str(sa) + " and " + shape_str(sb) + " not aligned: " +
                std::to_string(k) + " (dim " + std::to_string(sa.size() - 1) + ") != " +
                std::to_string(kb) + " (dim 0)");
  }
  detail::check_gemm("dot", sa, sb, m, n, k, k, n, n);
  Shape out_shape;
  if (sa.size() == 2) out_shape.push_back(m);
  if (sb.size() == 2) out_shape.push_back(n);
  NDArray out = ArrayInternals::make(e, std::move(out_shape), ca.device, "dot");
  const Ptr pa = detail::ptr(ca), pb = detail::ptr(cb), po = ptr(out);
  launch(chunk(out), {ca.var, cb.var}, {chunk(out).var}, "dot",
         [=](const RunContext& ctx, auto kernels) {
           kernels.gemm(ctx, false, false, m, n, k, 1.0f, pa.get(), k, pb.get(), n, 0.0f,
                        po.get(), n);
         });
  if (ag::should_record({&a, &b})) {
    // As 2-d products: a (m, k), b (k, n), the gradient (m, n); 1-d operands are a row
    // (a) or a column (b).
    const bool na = has_history(a), nb = has_history(b);
    ag::record_op("dot", {&a, &b}, {&out}, {a, b},
                  [sa, sb, m, n, k, na, nb](const ag::Saved& s, const std::vector<NDArray>& g) {
                    const NDArray a2 = s[0].reshape({m, k}), b2 = s[1].reshape({k, n});
                    const NDArray g2 = g[0].reshape({m, n});
                    return std::vector<NDArray>{
                        na ? gemm_any(g2, b2, false, true).reshape(sa) : NDArray(),
                        nb ? gemm_any(a2, g2, true, false).reshape(sb) : NDArray()};
                  });
  }
  return out;
}

NDArray add(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::add, a, b); }
NDArray subtract(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::sub, a, b); }
NDArray multiply(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::mul, a, b); }
NDArray divide(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::div, a, b); }
NDArray pow(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::pow, a, b); }
NDArray pow(const NDArray& a, float exponent) {
  return scalar_op(ops::Binary::pow, a, exponent, false);
}
NDArray maximum(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::maximum, a, b); }
NDArray minimum(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::minimum, a, b); }
NDArray maximum(const NDArray& a, float s) { return scalar_op(ops::Binary::maximum, a, s, false); }
NDArray minimum(const NDArray& a, float s) { return scalar_op(ops::Binary::minimum, a, s, false); }
NDArray mod(const NDArray& a, const NDArray& b) { return binary_op(ops::Binary::mod, a, b); }
NDArray mod(const NDArray& a, float s) { return scalar_op(ops::Binary::mod, a, s, false); }
NDArray mod(float s, const NDArray& a) { return scalar_op(ops::Binary::mod, a, s, true); }
NDArray floor_divide(const NDArray& a, const NDArray& b) {
  return binary_op(ops::Binary::floor_div, a, b);
}
NDArray floor_divide(const NDArray& a, float s) {
  return scalar_op(ops::Binary::floor_div, a, s, false);
}
NDArray floor_divide(float s, const NDArray& a) {
  return scalar_op(ops::Binary::floor_div, a, s, true);
}

NDArray compare(const NDArray& a, const NDArray& b, Compare op) {
  NDArray out = binary(compare_op(op), a, b);
  chunk(out).is_mask.store(true, std::memory_order_relaxed);
  return out;
}
NDArray compare(const NDArray& a, float s, Compare op) {
  NDArray out = scalar(compare_op(op), a, s, false);
  chunk(out).is_mask.store(true, std::memory_order_relaxed);
  return out;
}

NDArray negative(const NDArray& a) { return unary_op(ops::Unary::neg, a); }
NDArray exp(const NDArray& a) { return unary_op(ops::Unary::exp, a); }
NDArray log(const NDArray& a) { return unary_op(ops::Unary::log, a); }
NDArray relu(const NDArray& a) { return unary_op(ops::Unary::relu, a); }
NDArray sigmoid(const NDArray& a) { return unary_op(ops::Unary::sigmoid, a); }
NDArray tanh(const NDArray& a) { return unary_op(ops::Unary::tanh, a); }
NDArray sqrt(const NDArray& a) { return unary_op(ops::Unary::sqrt, a); }
NDArray abs(const NDArray& a) { return unary_op(ops::Unary::abs, a); }
NDArray square(const NDArray& a) { return unary_op(ops::Unary::square, a); }

NDArray sum(const NDArray& a) { return reduce_all_op(ops::Reduce::sum, a); }
NDArray sum(const NDArray& a, int axis) { return reduce_axis_op(ops::Reduce::sum, a, axis); }
NDArray mean(const NDArray& a) { return reduce_all_op(ops::Reduce::mean, a); }
NDArray mean(const NDArray& a, int axis) { return reduce_axis_op(ops::Reduce::mean, a, axis); }
NDArray max(const NDArray& a) { return reduce_all_op(ops::Reduce::max, a); }
NDArray max(const NDArray& a, int axis) { return reduce_axis_op(ops::Reduce::max, a, axis); }
NDArray argmax(const NDArray& a) { return reduce_all_op(ops::Reduce::argmax, a); }
NDArray argmax(const NDArray& a, int axis) { return reduce_axis_op(ops::Reduce::argmax, a, axis); }

NDArray copy(const NDArray& a) {
  Chunk& ca = require(a, "copy");
  NDArray out = ArrayInternals::make(*ca.engine, a.shape(), ca.device, "copy");
  const Ptr pa = detail::ptr(ca), po = ptr(out);
  const std::size_t n = a.size();
  launch(chunk(out), {ca.var}, {chunk(out).var}, "copy",
         [=](const RunContext& ctx, auto k) { k.copy(ctx, pa.get(), po.get(), n); });
  if (ag::should_record({&a})) {
    ag::record_op("copy", {a}, {&out}, {}, [](const ag::Saved&, const std::vector<NDArray>& g) {
      return std::vector<NDArray>{g[0]};
    });
  }
  return out;
}

NDArray zeros_like(const NDArray& a) {
  Chunk& ca = require(a, "zeros_like");
  return fill(*ca.engine, a.shape(), 0.0f, ca.device, "zeros_like");
}

NDArray ones_like(const NDArray& a) {
  Chunk& ca = require(a, "ones_like");
  return fill(*ca.engine, a.shape(), 1.0f, ca.device, "ones_like");
}

NDArray broadcast_to(const NDArray& a, const Shape& shape) {
  Chunk& ca = require(a, "broadcast_to");
  const std::optional<Shape> b = broadcast_shape(a.shape(), shape);
  if (!b || *b != shape) {
    throw Error("broadcast_to: an array of shape " + shape_str(a.shape()) +
                " does not broadcast to " + shape_str(shape));
  }
  NDArray out = ArrayInternals::make(*ca.engine, shape, ca.device, "broadcast_to");
  if (a.shape() == shape) {
    const Ptr pa = detail::ptr(ca), po = ptr(out);
    const std::size_t n = out.size();
    launch(chunk(out), {ca.var}, {chunk(out).var}, "broadcast_to",
           [=](const RunContext& ctx, auto k) { k.copy(ctx, pa.get(), po.get(), n); });
  } else {
    // max(x, x) is x, bit for bit (NaN and -0 included): the broadcast kernel with both
    // operands a repeats a without a second input.
    const ops::Broadcast bc = plan_broadcast(shape, a.shape(), a.shape(), "broadcast_to");
    const Ptr pa = detail::ptr(ca), po = ptr(out);
    launch(chunk(out), {ca.var}, {chunk(out).var}, "broadcast_to",
           [=](const RunContext& ctx, auto k) {
             k.binary_broadcast(ctx, ops::Binary::maximum, pa.get(), pa.get(), po.get(), bc);
           });
  }
  if (ag::should_record({&a})) {
    const Shape sa = a.shape();
    ag::record_op("broadcast_to", {a}, {&out}, {},
                  [sa](const ag::Saved&, const std::vector<NDArray>& g) {
                    return std::vector<NDArray>{ag::sum_to(g[0], sa)};
                  });
  }
  return out;
}

NDArray transpose(const NDArray& a) {
  Chunk& ca = require(a, "transpose");
  if (a.ndim() < 2) return nd::copy(a);
  if (a.ndim() > 2) {  // numpy's: the axes reversed
    std::vector<int> axes(a.ndim());
    for (std::size_t d = 0; d < axes.size(); ++d) axes[d] = static_cast<int>(axes.size() - 1 - d);
    return nd::transpose(a, axes);
  }
  const std::size_t rows = a.shape()[0], cols = a.shape()[1];
  NDArray out = ArrayInternals::make(*ca.engine, {cols, rows}, ca.device, "transpose");
  const Ptr pa = detail::ptr(ca), po = ptr(out);
  launch(chunk(out), {ca.var}, {chunk(out).var}, "transpose",
         [=](const RunContext& ctx, auto k) { k.transpose(ctx, pa.get(), rows, cols, po.get()); });
  if (ag::should_record({&a})) {
    ag::record_op("transpose", {a}, {&out}, {},
                  [](const ag::Saved&, const std::vector<NDArray>& g) {
                    return std::vector<NDArray>{nd::transpose(g[0])};
                  });
  }
  return out;
}

}  // namespace nd
}  // namespace depengine
