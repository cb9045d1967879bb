// The fused layer ops of depengine/layer_ops.h and their tape entries.
#include "depengine/layer_ops.h"

#include <string>
#include <vector>

#include "autograd_internal.h"
#include "depengine/nn.h"
#include "depengine/ops/elementwise.h"
#include "depengine/ops/gemm.h"
#include "depengine/ops/loss.h"
#include "depengine/ops/nn.h"
#include "depengine/ops/reduce.h"
#include "internal.h"

namespace depengine::nd {
namespace {

using detail::ArrayInternals;
using detail::Chunk;

Chunk& cpu_chunk(const NDArray& a, const char* op, const char* what) {
  Chunk& c = detail::require(a, op);
  if (!c.device.is_cpu()) {
    throw Error(std::string(op) + ": the " + what + " is on " + c.device.str() +
                "; this op has a CPU kernel only");
  }
  return c;
}

void same_engine(const Chunk& a, const Chunk& b, const char* op) {
  if (a.engine != b.engine) throw Error(std::string(op) + ": the arrays live on different engines");
}

// a (m, k)ᵀ · b (m, n) into `into` when it is defined (a buffer of shape (k, n) on a's
// engine: a gradient buffer, autograd::detail::gradient_buffer), else into a new array; the
// kernel call of nd::gemm(a, b, true, false), so the bits are the same.
NDArray gemm_at_b(const NDArray& a, const NDArray& b, const NDArray& into) {
  if (!into.defined()) return gemm(a, b, true, false);
  const char* op = "gemm";
  Chunk& ca = cpu_chunk(a, op, "gradient");
  Chunk& cb = cpu_chunk(b, op, "input");
  Chunk& co = cpu_chunk(into, op, "gradient buffer");
  same_engine(ca, cb, op);
  same_engine(ca, co, op);
  const std::size_t m = a.shape()[1], k = a.shape()[0], n = b.shape()[1];
  if (b.shape()[0] != k || into.shape() != Shape{m, n}) {
    throw Error(std::string(op) + ": " + shape_str(a.shape()) + ".T and " + shape_str(b.shape()) +
                " do not fit a buffer of shape " + shape_str(into.shape()));
  }
  detail::check_gemm(op, a.shape(), b.shape(), m, n, k, a.shape()[1], n, n);
  autograd::detail::bump_version(into);
  const float* pa = ca.data;
  const float* pb = cb.data;
  float* po = co.data;
  ca.engine->push(
      [=](const RunContext& ctx) {
        ops::cpu::gemm(ctx, true, false, m, n, k, 1.0f, pa, m, pb, n, 0.0f, po, n);
      },
      {ca.var, cb.var}, {co.var}, {.name = op});
  return into;
}

// The column sums of a (m, n) into `into` (shape (n,)) when it is defined, else nd::sum(a, 0);
// the same kernel call either way.
NDArray column_sums(const NDArray& a, const NDArray& into) {
  if (!into.defined()) return sum(a, 0);
  const char* op = "sum";
  Chunk& ca = cpu_chunk(a, op, "gradient");
  Chunk& co = cpu_chunk(into, op, "gradient buffer");
  same_engine(ca, co, op);
  const std::size_t m = a.shape()[0], n = a.shape()[1];
  if (into.shape() != Shape{n}) {
    throw Error(std::string(op) + ": the column sums of " + shape_str(a.shape()) +
                " do not fit a buffer of shape " + shape_str(into.shape()));
  }
  autograd::detail::bump_version(into);
  const float* pa = ca.data;
  float* po = co.data;
  ca.engine->push(
      [=](const RunContext& ctx) {
        ops::cpu::reduce_axis(ctx, ops::Reduce::sum, pa, 1, m, n, po);
      },
      {ca.var}, {co.var}, {.name = op});
  return into;
}

// relu_backward(y, dy), computed into dy's own storage when this is the only handle to it
// (the walk hands a node the gradient of its output, and one that no other array, tape
// entry or Python object shares is dead after this node: MXNet's in-place ReLU backward);
// else into a new array. The kernel allows dx to alias dy, and the bits are the same.
NDArray relu_backward_reusing(const NDArray& y, const NDArray& dy) {
  if (ArrayInternals::shared_chunk(dy).use_count() != 1 || y.shape() != dy.shape() ||
      ArrayInternals::node(dy)) {
    return relu_backward(y, dy);
  }
  const char* op = "relu_backward";
  Chunk& cy = cpu_chunk(y, op, "output");
  Chunk& cd = cpu_chunk(dy, op, "gradient");
  same_engine(cy, cd, op);
  autograd::detail::bump_version(dy);
  const float* py = cy.data;
  float* pd = cd.data;
  const std::size_t n = y.size();
  cy.engine->push([=](const RunContext& ctx) { ops::cpu::relu_backward(ctx, py, pd, pd, n); },
                  {cy.var, cd.var}, {cd.var}, {.name = op});  // dy read and written
  return dy;
}

}  // namespace

NDArray fully_connected(const NDArray& x, const NDArray& weight, const NDArray& bias, bool relu) {
  const char* op = "fully_connected";
  Chunk& cx = cpu_chunk(x, op, "input");
  Chunk& cw = cpu_chunk(weight, op, "weight");
  same_engine(cx, cw, op);
  const bool has_bias = bias.defined();
  Chunk* cb = has_bias ? &cpu_chunk(bias, op, "bias") : nullptr;
  if (cb) same_engine(cx, *cb, op);
  if (x.ndim() != 2 || weight.ndim() != 2 || x.shape()[1] != weight.shape()[1] ||
      (has_bias && bias.shape() != Shape{weight.shape()[0]})) {
    throw Error(std::string(op) + ": input " + shape_str(x.shape()) + ", weight " +
                shape_str(weight.shape()) +
                (has_bias ? ", bias " + shape_str(bias.shape()) : std::string()) +
                " do not fit (expected input (m, k), weight (n, k), bias (n,))");
  }
  const std::size_t m = x.shape()[0], k = x.shape()[1], n = weight.shape()[0];
  detail::check_gemm(op, x.shape(), weight.shape(), m, n, k, k, k, n);
  NDArray out = ArrayInternals::make(*cx.engine, {m, n}, op);
  const float* px = cx.data;
  const float* pw = cw.data;
  const float* pb = cb ? cb->data : nullptr;
  float* po = out.data();
  std::vector<Var> reads{cx.var, cw.var};
  if (cb) reads.push_back(cb->var);
  cx.engine->push(
      [=](const RunContext& ctx) {
        ops::cpu::gemm(ctx, false, true, m, n, k, 1.0f, px, k, pw, k, 0.0f, po, n);
        if (pb) {
          ops::cpu::bias_activation(ctx, po, pb, m, n, relu);
        } else if (relu) {
          ops::cpu::unary(ctx, ops::Unary::relu, po, po, m * n);
        }
      },
      reads, {out.var()}, {.name = relu ? "fully_connected_relu" : op});
  std::vector<NDArray> inputs{x, weight};
  if (has_bias) inputs.push_back(bias);
  if (autograd::detail::should_record(inputs)) {
    autograd::detail::Saved saved{x, weight};
    if (relu) saved.push_back(out);
    // A network's input (data, no history) needs no gradient: dx is not computed for it.
    const bool need_dx = autograd::detail::should_record({&x});
    autograd::detail::record_op(
        op, inputs, {&out}, std::move(saved),
        [relu, has_bias, need_dx](const autograd::detail::Saved& s, const std::vector<NDArray>& dy) {
          const NDArray dz = relu ? relu_backward_reusing(s[2], dy[0]) : dy[0];
          // The weight's and bias's gradients go straight into their buffers where the walk
          // allows it (no copy_into per parameter and step).
          std::vector<NDArray> g{need_dx ? gemm(dz, s[1], false, false) : NDArray(),
                                 gemm_at_b(dz, s[0], autograd::detail::gradient_buffer(1))};
          if (has_bias) g.push_back(column_sums(dz, autograd::detail::gradient_buffer(2)));
          return g;
        });
  }
  return out;
}

NDArray softmax_cross_entropy_rows(const NDArray& logits, const NDArray& labels,
                                   bool from_logits) {
  const char* op = "softmax_cross_entropy";
  Chunk& cz = cpu_chunk(logits, op, "prediction");
  Chunk& cy = cpu_chunk(labels, op, "label");
  same_engine(cz, cy, op);
  if (logits.ndim() != 2 || labels.ndim() != 1 || labels.shape()[0] != logits.shape()[0]) {
    throw Error(std::string(op) + ": labels of shape " + shape_str(labels.shape()) +
                " do not fit a prediction of shape " + shape_str(logits.shape()) +
                " (expected a prediction (m, n) and labels (m,))");
  }
  const std::size_t m = logits.shape()[0], n = logits.shape()[1];
  NDArray loss = ArrayInternals::make(*cz.engine, {m}, op);
  const float* pz = cz.data;
  const float* py = cy.data;
  float* pl = loss.data();
  cz.engine->push(
      [=](const RunContext& ctx) { ops::cpu::softmax_xent_rows(ctx, pz, py, m, n, from_logits, pl); },
      {cz.var, cy.var}, {loss.var()}, {.name = op});
  if (autograd::detail::should_record({&logits, &labels})) {
    autograd::detail::record_op(
        op, {logits, labels}, {&loss}, {logits, labels},
        [m, n, from_logits](const autograd::detail::Saved& s, const std::vector<NDArray>& dy) {
          NDArray g = ArrayInternals::make(s[0].engine(), {m, n}, "softmax_cross_entropy_backward");
          const float* z = s[0].data();
          const float* y = s[1].data();
          const float* d = dy[0].data();
          float* pg = g.data();
          s[0].engine().push(
              [=](const RunContext& ctx) {
                ops::cpu::softmax_xent_rows_backward(ctx, z, y, d, m, n, from_logits, pg);
              },
              {s[0].var(), s[1].var(), dy[0].var()}, {g.var()},
              {.name = "softmax_cross_entropy_backward"});
          return std::vector<NDArray>{g, NDArray()};
        });
  }
  return loss;
}

}  // namespace depengine::nd
