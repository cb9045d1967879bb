// nd::convolution and nd::pooling (depengine/nn.h): shapes checked at the call, one op
// pushed per call (cnn_launch.h places it), gradients recorded while autograd records.
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

bool has_history(const NDArray& a) noexcept {
  return a.defined() && ArrayInternals::node(a) != nullptr;
}

std::string pair_str(Size2 p) {
  std::string s(1, '(');  // appended piece by piece: g++ 12 -O3 warns on "(" + std::string
  s += std::to_string(p[0]);
  s += ", ";
  s += std::to_string(p[1]);
  s += ')';
  return s;
}

void require_4d(const char* op, const char* what, const Shape& s) {
  if (s.size() != 4) {
    throw Error(std::string(op) + ": " + what + " must be 4-d (" +
                (std::string(what) == "weight" ? "out_channels, in_channels, kh, kw" : "N, C, H, W") +
                "), not of shape " + shape_str(s));
  }
}

// The geometry of x (N, C, H, W) convolved with w (K, C, kh, kw), checked: Errors name the
// op and both shapes.
ops::Conv2d conv_geometry(const char* op, const Shape& x, const Shape& w, Size2 stride,
                          Size2 pad) {
  require_4d(op, "input", x);
  require_4d(op, "weight", w);
  if (x[1] != w[1]) {
    throw Error(std::string(op) + ": input of shape " + shape_str(x) + " has " +
                std::to_string(x[1]) + " channels, weight " + shape_str(w) + " expects " +
                std::to_string(w[1]));
  }
  const ops::Conv2d g{.batch = x[0], .in_channels = x[1], .height = x[2], .width = x[3],
                      .out_channels = w[0], .kernel_h = w[2], .kernel_w = w[3],
                      .stride_h = stride[0], .stride_w = stride[1], .pad_h = pad[0],
                      .pad_w = pad[1]};
  try {
    ops::check_conv2d(op, g);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " [input " + shape_str(x) + ", weight " + shape_str(w) +
                ", stride " + pair_str(stride) + ", pad " + pair_str(pad) + "]");
  }
  return g;
}

Shape conv_out_shape(const ops::Conv2d& g) { return {g.batch, g.out_channels, g.out_h(), g.out_w()}; }

void require_shape(const char* op, const char* what, const Shape& got, const Shape& want) {
  if (got != want) {
    throw Error(std::string(op) + ": " + what + " of shape " + shape_str(got) +
                " does not match the expected " + shape_str(want));
  }
}

ops::Pool2d pool_geometry(const char* op, const Shape& x, Size2 kernel, Size2 stride, Size2 pad,
                          bool global, bool count_include_pad) {
  require_4d(op, "input", x);
  if (global) {
    kernel = {x[2], x[3]};
    stride = {1, 1};
    pad = {0, 0};
  }
  const ops::Pool2d g{.batch = x[0], .channels = x[1], .height = x[2], .width = x[3],
                      .kernel_h = kernel[0], .kernel_w = kernel[1], .stride_h = stride[0],
                      .stride_w = stride[1], .pad_h = pad[0], .pad_w = pad[1],
                      .count_include_pad = count_include_pad};
  try {
    ops::check_pool2d(op, g);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " [input " + shape_str(x) + ", kernel " +
                pair_str(kernel) + ", stride " + pair_str(stride) + ", pad " + pair_str(pad) +
                "]");
  }
  return g;
}

ops::Pool to_ops(PoolType t) { return t == PoolType::max ? ops::Pool::max : ops::Pool::avg; }

}  // namespace

NDArray convolution(const NDArray& x, const NDArray& w, const NDArray& b, Size2 stride,
                    Size2 pad) {
  const char* op = "convolution";
  Chunk& cx = b.defined() ? same_place(op, {&x, &w, &b}) : same_place(op, {&x, &w});
  const ops::Conv2d g = conv_geometry(op, x.shape(), w.shape(), stride, pad);
  if (b.defined() && b.shape() != Shape{g.out_channels}) {
    throw Error("convolution: bias of shape " + shape_str(b.shape()) + " does not match weight " +
                shape_str(w.shape()) + " (expected (" + std::to_string(g.out_channels) + ",))");
  }
  NDArray y = ArrayInternals::make(*cx.engine, conv_out_shape(g), cx.device, op);
  const Ptr px = ptr_of(x), pw = ptr_of(w), pb = ptr_of(b), py = ptr_of(y);
  std::vector<Var> reads{cx.var, chunk(w).var};
  if (b.defined()) reads.push_back(chunk(b).var);
  launch(chunk(y), reads, {chunk(y).var}, op, [=](const RunContext& ctx, auto k) {
    k.conv2d_forward(ctx, g, px.get(), pw.get(), pb.get(), py.get());
  });
  if (ag::should_record({&x, &w, &b})) {
    const bool hx = has_history(x), hw = has_history(w), hb = has_history(b);
    std::vector<NDArray> inputs{x, w};
    if (b.defined()) inputs.push_back(b);
    ag::record_op(op, inputs, {&y}, {x, w},
                  [=, xs = x.shape(), ws = w.shape(), with_bias = b.defined()](
                      const ag::Saved& s, const std::vector<NDArray>& dy) {
                    std::vector<NDArray> grads{
                        hx ? convolution_backward_data(dy[0], s[1], xs, stride, pad) : NDArray(),
                        hw ? convolution_backward_weight(s[0], dy[0], ws, stride, pad) : NDArray()};
                    if (with_bias) grads.push_back(hb ? convolution_backward_bias(dy[0]) : NDArray());
                    return grads;
                  });
  }
  return y;
}

NDArray convolution_relu(const NDArray& x, const NDArray& w, const NDArray& b, Size2 stride,
                         Size2 pad) {
  const char* op = "convolution_relu";
  Chunk& cx = b.defined() ? same_place(op, {&x, &w, &b}) : same_place(op, {&x, &w});
  if (!cx.device.is_cpu()) return nd::relu(convolution(x, w, b, stride, pad));
  const ops::Conv2d g = conv_geometry(op, x.shape(), w.shape(), stride, pad);
  if (b.defined() && b.shape() != Shape{g.out_channels}) {
    throw Error("convolution_relu: bias of shape " + shape_str(b.shape()) +
                " does not match weight " + shape_str(w.shape()) + " (expected (" +
                std::to_string(g.out_channels) + ",))");
  }
  NDArray y = ArrayInternals::make(*cx.engine, conv_out_shape(g), cx.device, op);
  const float* px = cx.data;
  const float* pw = chunk(w).data;
  const float* pb = b.defined() ? chunk(b).data : nullptr;
  float* py = chunk(y).data;
  std::vector<Var> reads{cx.var, chunk(w).var};
  if (b.defined()) reads.push_back(chunk(b).var);
  cx.engine->push(
      [=](const RunContext& ctx) { ops::cpu::conv2d_forward(ctx, g, px, pw, pb, py, true); },
      reads, {chunk(y).var}, {.name = op});
  if (ag::should_record({&x, &w, &b})) {
    const bool hx = has_history(x), hw = has_history(w), hb = has_history(b);
    std::vector<NDArray> inputs{x, w};
    if (b.defined()) inputs.push_back(b);
    ag::record_op(op, inputs, {&y}, {x, w, y},
                  [=, xs = x.shape(), ws = w.shape(), with_bias = b.defined()](
                      const ag::Saved& s, const std::vector<NDArray>& dy) {
                    const NDArray dz = relu_backward(s[2], dy[0]);
                    std::vector<NDArray> grads{
                        hx ? convolution_backward_data(dz, s[1], xs, stride, pad) : NDArray(),
                        hw ? convolution_backward_weight(s[0], dz, ws, stride, pad) : NDArray()};
                    if (with_bias) grads.push_back(hb ? convolution_backward_bias(dz) : NDArray());
                    return grads;
                  });
  }
  return y;
}

NDArray convolution_backward_data(const NDArray& dy, const NDArray& w, const Shape& x_shape,
                                  Size2 stride, Size2 pad) {
  const char* op = "convolution_backward_data";
  Chunk& cd = same_place(op, {&dy, &w});
  const ops::Conv2d g = conv_geometry(op, x_shape, w.shape(), stride, pad);
  require_shape(op, "dy", dy.shape(), conv_out_shape(g));
  NDArray dx = ArrayInternals::make(*cd.engine, x_shape, cd.device, op);
  const Ptr pd = ptr_of(dy), pw = ptr_of(w), px = ptr_of(dx);
  launch(chunk(dx), {cd.var, chunk(w).var}, {chunk(dx).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.conv2d_backward_data(ctx, g, pd.get(), pw.get(), px.get());
         });
  return dx;
}

NDArray convolution_backward_weight(const NDArray& x, const NDArray& dy, const Shape& w_shape,
                                    Size2 stride, Size2 pad) {
  const char* op = "convolution_backward_weight";
  Chunk& cx = same_place(op, {&x, &dy});
  const ops::Conv2d g = conv_geometry(op, x.shape(), w_shape, stride, pad);
  require_shape(op, "dy", dy.shape(), conv_out_shape(g));
  NDArray dw = ArrayInternals::make(*cx.engine, w_shape, cx.device, op);
  const Ptr px = ptr_of(x), pd = ptr_of(dy), pw = ptr_of(dw);
  launch(chunk(dw), {cx.var, chunk(dy).var}, {chunk(dw).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.conv2d_backward_weight(ctx, g, px.get(), pd.get(), pw.get());
         });
  return dw;
}

NDArray convolution_backward_bias(const NDArray& dy) {
  const char* op = "convolution_backward_bias";
  Chunk& cd = same_place(op, {&dy});
  require_4d(op, "dy", dy.shape());
  const Shape& s = dy.shape();
  // dy's planes seen as the output of a 1×1 convolution, the geometry the kernel sums over.
  const ops::Conv2d g{.batch = s[0], .in_channels = 1, .height = s[2], .width = s[3],
                      .out_channels = s[1], .kernel_h = 1, .kernel_w = 1};
  if (s[1] == 0 || s[2] == 0 || s[3] == 0) {
    throw Error(std::string(op) + ": dy of shape " + shape_str(s) + " has an empty dimension");
  }
  NDArray db = ArrayInternals::make(*cd.engine, {s[1]}, cd.device, op);
  const Ptr pd = ptr_of(dy), pb = ptr_of(db);
  launch(chunk(db), {cd.var}, {chunk(db).var}, op, [=](const RunContext& ctx, auto k) {
    k.conv2d_backward_bias(ctx, g, pd.get(), pb.get());
  });
  return db;
}

NDArray pooling(const NDArray& x, Size2 kernel, Size2 stride, Size2 pad, PoolType type,
                bool global, bool count_include_pad) {
  const char* op = "pooling";
  Chunk& cx = same_place(op, {&x});
  const ops::Pool2d g = pool_geometry(op, x.shape(), kernel, stride, pad, global, count_include_pad);
  NDArray y = ArrayInternals::make(*cx.engine, {g.batch, g.channels, g.out_h(), g.out_w()},
                                   cx.device, op);
  const Ptr px = ptr_of(x), py = ptr_of(y);
  const ops::Pool pt = to_ops(type);
  launch(chunk(y), {cx.var}, {chunk(y).var}, type == PoolType::max ? "max_pooling" : "avg_pooling",
         [=](const RunContext& ctx, auto k) { k.pool2d_forward(ctx, pt, g, px.get(), py.get()); });
  if (ag::should_record({&x})) {
    ag::record_op(type == PoolType::max ? "max_pooling" : "avg_pooling", {x}, {&y}, {x},
                  [=](const ag::Saved& s, const std::vector<NDArray>& dy) {
                    return std::vector<NDArray>{pooling_backward(s[0], dy[0], kernel, stride, pad,
                                                                 type, global, count_include_pad)};
                  });
  }
  return y;
}

NDArray pooling_backward(const NDArray& x, const NDArray& dy, Size2 kernel, Size2 stride,
                         Size2 pad, PoolType type, bool global, bool count_include_pad) {
  const char* op = "pooling_backward";
  Chunk& cx = same_place(op, {&x, &dy});
  const ops::Pool2d g = pool_geometry(op, x.shape(), kernel, stride, pad, global, count_include_pad);
  require_shape(op, "dy", dy.shape(), {g.batch, g.channels, g.out_h(), g.out_w()});
  NDArray dx = ArrayInternals::make(*cx.engine, x.shape(), cx.device, op);
  const Ptr px = ptr_of(x), pd = ptr_of(dy), pdx = ptr_of(dx);
  const ops::Pool pt = to_ops(type);
  launch(chunk(dx), {cx.var, chunk(dy).var}, {chunk(dx).var},
         type == PoolType::max ? "max_pooling_backward" : "avg_pooling_backward",
         [=](const RunContext& ctx, auto k) {
           k.pool2d_backward(ctx, pt, g, px.get(), pd.get(), pdx.get());
         });
  return dx;
}

}  // namespace depengine::nd
