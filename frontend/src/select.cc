// Comparisons and basic slicing: ops whose kernels are short strided loops, CPU only.
#include <optional>

#include "internal.h"

namespace depengine {
namespace {

using detail::ArrayInternals;
using detail::Chunk;
using detail::require;

const char* compare_name(nd::Compare op) noexcept {
  switch (op) {
    case nd::Compare::equal: return "equal";
    case nd::Compare::not_equal: return "not_equal";
    case nd::Compare::less: return "less";
    case nd::Compare::less_equal: return "less_equal";
    case nd::Compare::greater: return "greater";
    case nd::Compare::greater_equal: return "greater_equal";
  }
  return "compare";
}

float apply(nd::Compare op, float x, float y) noexcept {
  switch (op) {
    case nd::Compare::equal: return x == y;
    case nd::Compare::not_equal: return x != y;
    case nd::Compare::less: return x < y;
    case nd::Compare::less_equal: return x <= y;
    case nd::Compare::greater: return x > y;
    case nd::Compare::greater_equal: return x >= y;
  }
  return 0;
}

void require_cpu(const Chunk& c, const char* op) {
  if (!c.device.is_cpu()) {
    throw Error(std::string(op) + ": not available for arrays on " + c.device.str() +
                " (copy_to(Device::cpu()) first)");
  }
}

}  // namespace

namespace nd {

NDArray compare(const NDArray& a, const NDArray& b, Compare op) {
  const char* name = compare_name(op);
  Chunk& ca = require(a, name);
  Chunk& cb = require(b, name);
  require_cpu(ca, name);
  require_cpu(cb, name);
  if (ca.engine != cb.engine) throw Error(std::string(name) + ": the arrays live on different engines");
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const std::optional<Shape> broadcast = detail::broadcast_shape(sa, sb);
  if (!broadcast) {
    throw Error(std::string(name) + ": shapes " + shape_str(sa) + " and " + shape_str(sb) +
                " cannot be broadcast together");
  }
  const Shape out = *broadcast;
  NDArray r = ArrayInternals::make(*ca.engine, out, name);
  Chunk& co = *ArrayInternals::chunk(r);
  const float *pa = ca.data, *pb = cb.data;
  float* po = co.data;
  const std::vector<std::size_t> ra = detail::broadcast_strides(out, sa),
                                    rb = detail::broadcast_strides(out, sb);
  const std::size_t n = detail::shape_size(out);
  ca.engine->push(
      [=] {
        std::vector<std::size_t> idx(out.size(), 0);
        std::size_t ia = 0, ib = 0;
        for (std::size_t i = 0; i < n; ++i) {
          po[i] = apply(op, pa[ia], pb[ib]);
          for (std::size_t d = out.size(); d-- > 0;) {  // next index, odometer style
            ia += ra[d];
            ib += rb[d];
            if (++idx[d] < out[d]) break;
            ia -= ra[d] * out[d];
            ib -= rb[d] * out[d];
            idx[d] = 0;
          }
        }
      },
      {ca.var, cb.var}, {co.var}, {.name = name});
  return r;
}

NDArray compare(const NDArray& a, float s, Compare op) {
  const char* name = compare_name(op);
  Chunk& ca = require(a, name);
  require_cpu(ca, name);
  NDArray r = ArrayInternals::make(*ca.engine, a.shape(), name);
  Chunk& co = *ArrayInternals::chunk(r);
  const float* pa = ca.data;
  float* po = co.data;
  const std::size_t n = a.size();
  ca.engine->push([=] { for (std::size_t i = 0; i < n; ++i) po[i] = apply(op, pa[i], s); },
                  {ca.var}, {co.var}, {.name = name});
  return r;
}

NDArray slice(const NDArray& a, const std::vector<SliceDim>& dims) {
  Chunk& ca = require(a, "slice");
  require_cpu(ca, "slice");
  const Shape& in = a.shape();
  if (dims.size() != in.size()) {
    throw Error("slice: " + std::to_string(dims.size()) + " selections for an array of shape " +
                shape_str(in));
  }
  Shape out;
  std::vector<std::size_t> in_stride(in.size());
  std::size_t stride = 1;
  for (std::size_t d = in.size(); d-- > 0;) {
    in_stride[d] = stride;
    stride *= in[d];
  }
  std::vector<long> steps;
  std::vector<std::size_t> counts;
  std::size_t offset = 0;
  for (std::size_t d = 0; d < in.size(); ++d) {
    const SliceDim& s = dims[d];
    if (s.step == 0) throw Error("slice: step of dimension " + std::to_string(d) + " is 0");
    if (!s.keep && s.count != 1) {
      // An integer index: the loop below walks `count` elements of a dimension that the
      // output no longer has, so any other count would read the wrong ones.
      throw Error("slice: dimension " + std::to_string(d) +
                  " is dropped (keep == false, an integer index) and must select 1 element, "
                  "not count " + std::to_string(s.count));
    }
    if (s.count > 0) {
      // start and start + step · (count - 1) both in [0, in[d]), in unsigned arithmetic:
      // a span that wrapped around long passed as in range, and the kernel read past the
      // storage.
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
        throw Error("slice: selection out of bounds for dimension " + std::to_string(d) +
                    " of shape " + shape_str(in));
      }
      offset += static_cast<std::size_t>(s.start) * in_stride[d];
    }
    if (s.keep) out.push_back(s.count);
    // A step taken only within the selection, |step| · (count - 1) < in[d], so this product
    // fits; with one element the step is never taken and may be anything.
    steps.push_back(s.count > 1 ? s.step * static_cast<long>(in_stride[d]) : 0);
    counts.push_back(s.count);
  }
  NDArray r = ArrayInternals::make(*ca.engine, out, "slice");
  Chunk& co = *ArrayInternals::chunk(r);
  const float* pa = ca.data;
  float* po = co.data;
  const std::size_t n = detail::shape_size(out);
  ca.engine->push(
      [=] {
        if (n == 0) return;
        std::vector<std::size_t> idx(counts.size(), 0);
        long at = static_cast<long>(offset);
        for (std::size_t i = 0; i < n; ++i) {
          po[i] = pa[at];
          for (std::size_t d = counts.size(); d-- > 0;) {
            at += steps[d];
            if (++idx[d] < counts[d]) break;
            at -= steps[d] * static_cast<long>(counts[d]);
            idx[d] = 0;
          }
        }
      },
      {ca.var}, {co.var}, {.name = "slice"});
  return r;
}

}  // namespace nd
}  // namespace depengine
