// nd::softmax, nd::log_softmax and nd::nll_loss (depengine/nn.h), with their gradients.
#include <string>

#include "autograd_internal.h"
#include "cnn_launch.h"
#include "depengine/nn.h"

namespace depengine::nd {
namespace {

using detail::ArrayInternals;
using detail::Chunk;
using detail::Ptr;
using detail::cnn::chunk;
using detail::cnn::launch;
using detail::cnn::ptr_of;
using detail::cnn::same_place;
namespace ag = autograd::detail;

// x viewed as [outer, len, inner] around `axis` (negative counts from the end).
struct Lines {
  std::size_t outer = 1, len = 1, inner = 1;
  int axis = 0;  // normalized
};

Lines lines_of(const char* op, const Shape& shape, int axis) {
  const long nd = static_cast<long>(shape.size());
  if (nd == 0) throw Error(std::string(op) + ": the array is 0-d and has no axis");
  const long a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd) {
    throw Error(std::string(op) + ": axis " + std::to_string(axis) +
                " is out of range for an array of shape " + shape_str(shape));
  }
  Lines l;
  l.axis = static_cast<int>(a);
  for (long d = 0; d < nd; ++d) {
    const std::size_t n = shape[static_cast<std::size_t>(d)];
    if (d < a) l.outer *= n;
    if (d == a) l.len = n;
    if (d > a) l.inner *= n;
  }
  return l;
}

NDArray softmax_op(const char* op, bool log, const NDArray& x, int axis) {
  Chunk& cx = same_place(op, {&x});
  const Lines l = lines_of(op, x.shape(), axis);
  NDArray y = ArrayInternals::make(*cx.engine, x.shape(), cx.device, op);
  const Ptr px = ptr_of(x), py = ptr_of(y);
  launch(chunk(y), {cx.var}, {chunk(y).var}, op, [=](const RunContext& ctx, auto k) {
    k.softmax_forward(ctx, log, px.get(), l.outer, l.len, l.inner, py.get());
  });
  if (ag::should_record({&x})) {
    ag::record_op(op, {x}, {&y}, {y},
                  [log, a = l.axis](const ag::Saved& s, const std::vector<NDArray>& dy) {
                    return std::vector<NDArray>{softmax_backward(s[0], dy[0], log, a)};
                  });
  }
  return y;
}

void require_labels(const char* op, const NDArray& labels, std::size_t rows, const Shape& of,
                    const char* what) {
  if (labels.ndim() != 1 || labels.shape()[0] != rows) {
    throw Error(std::string(op) + ": labels of shape " + shape_str(labels.shape()) +
                " do not match " + what + " of shape " + shape_str(of) + " (expected (" +
                std::to_string(rows) + ",))");
  }
}

}  // namespace

NDArray softmax(const NDArray& x, int axis) { return softmax_op("softmax", false, x, axis); }

NDArray log_softmax(const NDArray& x, int axis) {
  return softmax_op("log_softmax", true, x, axis);
}

NDArray softmax_backward(const NDArray& y, const NDArray& dy, bool log, int axis) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  Chunk& cy = same_place(op, {&y, &dy});
  if (y.shape() != dy.shape()) {
    throw Error(std::string(op) + ": y of shape " + shape_str(y.shape()) + " and dy of shape " +
                shape_str(dy.shape()) + " differ");
  }
  const Lines l = lines_of(op, y.shape(), axis);
  NDArray dx = ArrayInternals::make(*cy.engine, y.shape(), cy.device, op);
  const Ptr py = ptr_of(y), pd = ptr_of(dy), px = ptr_of(dx);
  launch(chunk(dx), {cy.var, chunk(dy).var}, {chunk(dx).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.softmax_backward(ctx, log, py.get(), pd.get(), l.outer, l.len, l.inner, px.get());
         });
  return dx;
}

NDArray nll_loss(const NDArray& logp, const NDArray& labels) {
  const char* op = "nll_loss";
  Chunk& cp = same_place(op, {&logp, &labels});
  if (logp.ndim() != 2) {
    throw Error(std::string(op) + ": log-probabilities must be 2-d (rows, classes), not of shape " +
                shape_str(logp.shape()));
  }
  const std::size_t rows = logp.shape()[0], cols = logp.shape()[1];
  require_labels(op, labels, rows, logp.shape(), "log-probabilities");
  NDArray loss = ArrayInternals::make(*cp.engine, {rows}, cp.device, op);
  const Ptr pp = ptr_of(logp), pl = ptr_of(labels), po = ptr_of(loss);
  launch(chunk(loss), {cp.var, chunk(labels).var}, {chunk(loss).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.nll_loss_forward(ctx, pp.get(), pl.get(), rows, cols, po.get());
         });
  if (ag::should_record({&logp})) {
    ag::record_op(op, {logp, labels}, {&loss}, {labels},
                  [cols](const ag::Saved& s, const std::vector<NDArray>& dy) {
                    return std::vector<NDArray>{nll_loss_backward(dy[0], s[0], cols), NDArray()};
                  });
  }
  return loss;
}

NDArray nll_loss_backward(const NDArray& dloss, const NDArray& labels, std::size_t cols) {
  const char* op = "nll_loss_backward";
  Chunk& cd = same_place(op, {&dloss, &labels});
  if (dloss.ndim() != 1) {
    throw Error(std::string(op) + ": dloss must be 1-d, not of shape " + shape_str(dloss.shape()));
  }
  const std::size_t rows = dloss.shape()[0];
  require_labels(op, labels, rows, dloss.shape(), "dloss");
  NDArray grad = ArrayInternals::make(*cd.engine, {rows, cols}, cd.device, op);
  const Ptr pd = ptr_of(dloss), pl = ptr_of(labels), pg = ptr_of(grad);
  launch(chunk(grad), {cd.var, chunk(labels).var}, {chunk(grad).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.nll_loss_backward(ctx, pd.get(), pl.get(), rows, cols, pg.get());
         });
  return grad;
}

}  // namespace depengine::nd
