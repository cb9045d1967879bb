// The training ops of depengine/nn.h: check shapes, make the outputs, push one op each.
#include "depengine/nn.h"

#include <string>

#include "depengine/ops/gemm.h"
#include "depengine/ops/nn.h"
#include "autograd_internal.h"
#include "internal.h"

namespace depengine::nd {
namespace {

using detail::ArrayInternals;
using detail::Chunk;

// The chunk of `a`, which must be a CPU array: these ops have CPU kernels only.
Chunk& require(const NDArray& a, const char* op) {
  Chunk& c = detail::require(a, op);
  if (!c.device.is_cpu()) {
    throw Error(std::string(op) + ": the array is on " + c.device.str() +
                "; this op has a CPU kernel only (copy_to(Device::cpu()) first)");
  }
  return c;
}

Engine& same_engine(const Chunk& a, const Chunk& b, const char* op) {
  if (a.engine != b.engine) throw Error(std::string(op) + ": the arrays live on different engines");
  return *a.engine;
}

void require_2d(const NDArray& a, const char* op, const char* what) {
  if (a.ndim() != 2) {
    throw Error(std::string(op) + ": " + what + " must be 2-d, not of shape " +
                shape_str(a.shape()));
  }
}

// The checked operands of a loss-like op: logits (m, n) and labels (m,) on one engine.
struct LogitsLabels {
  Chunk& z;
  Chunk& y;
  Engine& engine;
  std::size_t m, n;
};

LogitsLabels logits_labels(const NDArray& logits, const NDArray& labels, const char* op) {
  Chunk& cz = require(logits, op);
  Chunk& cy = require(labels, op);
  Engine& e = same_engine(cz, cy, op);
  require_2d(logits, op, "logits");
  if (labels.ndim() != 1 || labels.shape()[0] != logits.shape()[0]) {
    throw Error(std::string(op) + ": labels of shape " + shape_str(labels.shape()) +
                " do not match logits of shape " + shape_str(logits.shape()) + " (expected (" +
                std::to_string(logits.shape()[0]) + ",))");
  }
  return {cz, cy, e, logits.shape()[0], logits.shape()[1]};
}

}  // namespace

NDArray gemm(const NDArray& a, const NDArray& b, bool transpose_a, bool transpose_b) {
  Chunk& ca = require(a, "gemm");
  Chunk& cb = require(b, "gemm");
  Engine& e = same_engine(ca, cb, "gemm");
  require_2d(a, "gemm", "a");
  require_2d(b, "gemm", "b");
  const Shape &sa = a.shape(), &sb = b.shape();
  const std::size_t m = transpose_a ? sa[1] : sa[0], k = transpose_a ? sa[0] : sa[1];
  const std::size_t kb = transpose_b ? sb[1] : sb[0], n = transpose_b ? sb[0] : sb[1];
  if (k != kb) {
    throw Error("gemm: shapes " + shape_str(sa) + (transpose_a ? ".T" : "") + " and " +
                shape_str(sb) + (transpose_b ? ".T" : "") + " not aligned: " + std::to_string(k) +
                " != " + std::to_string(kb));
  }
  const std::size_t lda = sa[1], ldb = sb[1];
  detail::check_gemm("gemm", sa, sb, m, n, k, lda, ldb, n);
  NDArray out = ArrayInternals::make(e, {m, n}, "gemm");
  const float* pa = ca.data;
  const float* pb = cb.data;
  float* po = ArrayInternals::chunk(out)->data;
  e.push(
      [=](const RunContext& ctx) {
        ops::cpu::gemm(ctx, transpose_a, transpose_b, m, n, k, 1.0f, pa, lda, pb, ldb, 0.0f, po, n);
      },
      {ca.var, cb.var}, {out.var()}, {.name = "gemm"});
  if (autograd::detail::should_record({&a, &b})) {
    const bool na = ArrayInternals::node(a) != nullptr, nb = ArrayInternals::node(b) != nullptr;
    autograd::detail::record_op(
        "gemm", {a, b}, {&out}, {a, b},
        [transpose_a, transpose_b, na, nb](const autograd::detail::Saved& s,
                                           const std::vector<NDArray>& g) {
          const NDArray &x = s[0], &y = s[1], &dz = g[0];
          // z = op(x) · op(y): each case's gradients, as products with transposes.
          NDArray dx, dy;
          if (!transpose_a && !transpose_b) {
            if (na) dx = gemm(dz, y, false, true);
            if (nb) dy = gemm(x, dz, true, false);
          } else if (!transpose_a) {
            if (na) dx = gemm(dz, y, false, false);
            if (nb) dy = gemm(dz, x, true, false);
          } else if (!transpose_b) {
            if (na) dx = gemm(y, dz, false, true);
            if (nb) dy = gemm(x, dz, false, false);
          } else {
            if (na) dx = gemm(y, dz, true, true);
            if (nb) dy = gemm(dz, x, true, true);
          }
          return std::vector<NDArray>{dx, dy};
        });
  }
  return out;
}

NDArray linear(const NDArray& x, const NDArray& w, const NDArray& b, bool relu) {
  Chunk& cx = require(x, "linear");
  Chunk& cw = require(w, "linear");
  Chunk& cb = require(b, "linear");
  Engine& e = same_engine(cx, cw, "linear");
  same_engine(cx, cb, "linear");
  require_2d(x, "linear", "x");
  require_2d(w, "linear", "w");
  const std::size_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[1];
  if (w.shape()[0] != k || b.shape() != Shape{n}) {
    throw Error("linear: x " + shape_str(x.shape()) + ", w " + shape_str(w.shape()) + " and b " +
                shape_str(b.shape()) + " do not fit (expected w (" + std::to_string(k) +
                ", n) and b (n,))");
  }
  detail::check_gemm("linear", x.shape(), w.shape(), m, n, k, k, n, n);
  NDArray out = ArrayInternals::make(e, {m, n}, "linear");
  const float* px = cx.data;
  const float* pw = cw.data;
  const float* pb = cb.data;
  float* po = out.data();
  e.push(
      [=](const RunContext& ctx) {
        ops::cpu::gemm(ctx, false, false, m, n, k, 1.0f, px, k, pw, n, 0.0f, po, n);
        ops::cpu::bias_activation(ctx, po, pb, m, n, relu);
      },
      {cx.var, cw.var, cb.var}, {out.var()}, {.name = relu ? "linear_relu" : "linear"});
  if (autograd::detail::should_record({&x, &w, &b})) {
    const bool nx = ArrayInternals::node(x) != nullptr, nw = ArrayInternals::node(w) != nullptr,
               nb = ArrayInternals::node(b) != nullptr;
    autograd::detail::record_op(
        relu ? "linear_relu" : "linear", {x, w, b}, {&out}, {x, w, out},
        [relu, nx, nw, nb](const autograd::detail::Saved& s, const std::vector<NDArray>& g) {
          const NDArray dz = relu ? relu_backward(s[2], g[0]) : g[0];
          return std::vector<NDArray>{nx ? gemm(dz, s[1], false, true) : NDArray(),
                                      nw ? gemm(s[0], dz, true, false) : NDArray(),
                                      nb ? nd::sum(dz, 0) : NDArray()};
        });
  }
  return out;
}

SoftmaxCrossEntropy softmax_cross_entropy(const NDArray& logits, const NDArray& labels) {
  const char* op = "softmax_cross_entropy";
  const auto [cz, cy, e, m, n] = logits_labels(logits, labels, op);
  SoftmaxCrossEntropy r{ArrayInternals::make(e, {}, op),
                         ArrayInternals::make(e, logits.shape(), op)};
  const float* pz = cz.data;
  const float* py = cy.data;
  float* pl = r.loss.data();
  float* pg = r.grad.data();
  e.push([=](const RunContext& ctx) { ops::cpu::softmax_xent(ctx, pz, py, m, n, pl, pg); },
         {cz.var, cy.var}, {r.loss.var(), r.grad.var()}, {.name = op});
  // The loss is recorded; its gradient is the op's own `grad` times the head gradient (the
  // labels get none, and `grad` is a result, not differentiable).
  if (autograd::detail::should_record({&logits})) {
    autograd::detail::record_op(op, {logits, labels}, {&r.loss}, {r.grad},
                                [](const autograd::detail::Saved& s, const std::vector<NDArray>& g) {
                                  return std::vector<NDArray>{s[0] * g[0], NDArray()};
                                });
  }
  return r;
}

NDArray relu_backward(const NDArray& y, const NDArray& dy) {
  Chunk& cy = require(y, "relu_backward");
  Chunk& cd = require(dy, "relu_backward");
  Engine& e = same_engine(cy, cd, "relu_backward");
  if (y.shape() != dy.shape()) {
    throw Error("relu_backward: shapes " + shape_str(y.shape()) + " and " +
                shape_str(dy.shape()) + " differ");
  }
  NDArray out = ArrayInternals::make(e, y.shape(), "relu_backward");
  const float* py = cy.data;
  const float* pd = cd.data;
  float* po = out.data();
  const std::size_t n = y.size();
  e.push([=](const RunContext& ctx) { ops::cpu::relu_backward(ctx, py, pd, po, n); },
         {cy.var, cd.var}, {out.var()}, {.name = "relu_backward"});
  return out;
}

void sgd_update(NDArray& w, const NDArray& grad, float lr, float weight_decay) {
  Chunk& cw = require(w, "sgd_update");
  Chunk& cg = require(grad, "sgd_update");
  Engine& e = same_engine(cw, cg, "sgd_update");
  if (w.shape() != grad.shape()) {
    throw Error("sgd_update: the weight's shape " + shape_str(w.shape()) +
                " differs from the gradient's " + shape_str(grad.shape()));
  }
  autograd::detail::in_place(w, {&grad}, "sgd_update");
  float* pw = cw.data;
  const float* pg = cg.data;
  const std::size_t n = w.size();
  e.push([=](const RunContext& ctx) { ops::cpu::sgd_update(ctx, pw, pg, n, lr, weight_decay); },
         {cg.var}, {cw.var}, {.name = "sgd_update"});
}

NDArray count_correct(const NDArray& logits, const NDArray& labels) {
  const char* op = "count_correct";
  const auto [cz, cy, e, m, n] = logits_labels(logits, labels, op);
  NDArray out = ArrayInternals::make(e, {}, op);
  const float* pz = cz.data;
  const float* py = cy.data;
  float* po = out.data();
  e.push([=](const RunContext& ctx) { ops::cpu::count_correct(ctx, pz, py, m, n, po); },
         {cz.var, cy.var}, {out.var()}, {.name = op});
  return out;
}

namespace {

Chunk& require_total(NDArray& total, const char* op) {
  Chunk& c = require(total, op);
  if (total.size() != 1) {
    throw Error(std::string(op) + ": the total must hold one element, not be of shape " +
                shape_str(total.shape()));
  }
  return c;
}

}  // namespace

void add_count_correct(NDArray& total, const NDArray& logits, const NDArray& labels) {
  const char* op = "add_count_correct";
  Chunk& ct = require_total(total, op);
  const auto [cz, cy, e, m, n] = logits_labels(logits, labels, op);
  same_engine(ct, cz, op);
  autograd::detail::in_place(total, {&logits, &labels}, op);
  const float* pz = cz.data;
  const float* py = cy.data;
  float* pt = ct.data;
  e.push([=](const RunContext& ctx) { ops::cpu::add_count_correct(ctx, pz, py, m, n, pt); },
         {cz.var, cy.var}, {ct.var}, {.name = op});
}

void add_sum(NDArray& total, const NDArray& x) {
  const char* op = "add_sum";
  Chunk& ct = require_total(total, op);
  Chunk& cx = require(x, op);
  Engine& e = same_engine(ct, cx, op);
  autograd::detail::in_place(total, {&x}, op);
  const float* px = cx.data;
  float* pt = ct.data;
  const std::size_t n = x.size();
  e.push([=](const RunContext& ctx) { ops::cpu::add_sum(ctx, px, n, pt); }, {cx.var}, {ct.var},
         {.name = op});
}

}  // namespace depengine::nd
