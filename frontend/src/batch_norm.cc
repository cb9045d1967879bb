// nd::batch_norm (depengine/nn.h): the training forward and the running-statistics update as
// one op, the inference forward, and their gradients.
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

bool has_history(const NDArray& a) noexcept { return ArrayInternals::node(a) != nullptr; }

// The gradients batch norm hands back: one per input with a history (x, gamma, beta).
std::vector<NDArray> pick(const BatchNormGrads& g, bool hx, bool hg, bool hb) {
  return {hx ? g.dx : NDArray(), hg ? g.dgamma : NDArray(), hb ? g.dbeta : NDArray()};
}

// x (N, C, ...) viewed as (outer, channels, inner); every parameter must be (C,).
ops::BatchNorm geometry(const char* op, const NDArray& x,
                        std::initializer_list<std::pair<const char*, const NDArray*>> params) {
  if (x.ndim() < 2) {
    throw Error(std::string(op) + ": the input must have a channel axis 1 (N, C, ...), not shape " +
                shape_str(x.shape()));
  }
  const Shape& s = x.shape();
  std::size_t inner = 1;
  for (std::size_t d = 2; d < s.size(); ++d) inner *= s[d];
  for (const auto& [what, p] : params) {
    if (p->shape() != Shape{s[1]}) {
      throw Error(std::string(op) + ": " + what + " of shape " + shape_str(p->shape()) +
                  " does not match the " + std::to_string(s[1]) + " channels of input " +
                  shape_str(s) + " (expected (" + std::to_string(s[1]) + ",))");
    }
  }
  return {s[0], s[1], inner};
}

NDArray like(const NDArray& a, Shape shape, const char* op) {
  Chunk& c = chunk(a);
  return ArrayInternals::make(*c.engine, std::move(shape), c.device, op);
}

}  // namespace

BatchNormTrain batch_norm_train(const NDArray& x, const NDArray& gamma, const NDArray& beta,
                                NDArray& running_mean, NDArray& running_var, float eps,
                                float momentum, bool fix_gamma) {
  const char* op = "batch_norm";
  same_place(op, {&x, &gamma, &beta, &running_mean, &running_var});
  const ops::BatchNorm g = geometry(op, x, {{"gamma", &gamma}, {"beta", &beta},
                                            {"running_mean", &running_mean},
                                            {"running_var", &running_var}});
  BatchNormTrain r{like(x, x.shape(), op), like(x, {g.channels}, op), like(x, {g.channels}, op)};
  NDArray var = like(x, {g.channels}, op);
  const Ptr px = ptr_of(x), pg = fix_gamma ? Ptr{} : ptr_of(gamma), pb = ptr_of(beta),
            prm = ptr_of(running_mean), prv = ptr_of(running_var), py = ptr_of(r.y),
            pm = ptr_of(r.mean), pv = ptr_of(var), pi = ptr_of(r.inv_std);
  launch(chunk(r.y), {chunk(x).var, chunk(gamma).var, chunk(beta).var},
         {chunk(r.y).var, chunk(r.mean).var, chunk(r.inv_std).var, chunk(var).var,
          chunk(running_mean).var, chunk(running_var).var},
         op, [=](const RunContext& ctx, auto k) {
           k.batch_norm_train(ctx, g, px.get(), pg.get(), pb.get(), eps, py.get(), pm.get(),
                              pv.get(), pi.get());
           k.batch_norm_update_running(ctx, g, momentum, pm.get(), pv.get(), prm.get(), prv.get());
         });
  // The running statistics are overwritten in place (auxiliary states: no gradient).
  ag::bump_version(running_mean);
  ag::bump_version(running_var);
  if (ag::should_record({&x, &gamma, &beta})) {
    const bool hx = has_history(x), hg = has_history(gamma) && !fix_gamma, hb = has_history(beta);
    ag::record_op(op, {x, gamma, beta}, {&r.y}, {x, gamma, r.mean, r.inv_std},
                  [=](const ag::Saved& s, const std::vector<NDArray>& dy) {
                    return pick(batch_norm_backward(s[0], dy[0], s[1], s[2], s[3], fix_gamma), hx,
                                hg, hb);
                  });
  }
  return r;
}

NDArray batch_norm(const NDArray& x, const NDArray& gamma, const NDArray& beta,
                   NDArray& running_mean, NDArray& running_var, float eps, float momentum,
                   bool training, bool fix_gamma) {
  if (training) {
    return batch_norm_train(x, gamma, beta, running_mean, running_var, eps, momentum, fix_gamma).y;
  }
  const char* op = "batch_norm";
  same_place(op, {&x, &gamma, &beta, &running_mean, &running_var});
  const ops::BatchNorm g = geometry(op, x, {{"gamma", &gamma}, {"beta", &beta},
                                            {"running_mean", &running_mean},
                                            {"running_var", &running_var}});
  NDArray y = like(x, x.shape(), op);
  const Ptr px = ptr_of(x), pg = fix_gamma ? Ptr{} : ptr_of(gamma), pb = ptr_of(beta),
            prm = ptr_of(running_mean), prv = ptr_of(running_var), py = ptr_of(y);
  launch(chunk(y),
         {chunk(x).var, chunk(gamma).var, chunk(beta).var, chunk(running_mean).var,
          chunk(running_var).var},
         {chunk(y).var}, op, [=](const RunContext& ctx, auto k) {
           k.batch_norm_infer(ctx, g, px.get(), pg.get(), pb.get(), prm.get(), prv.get(), eps,
                              py.get());
         });
  if (ag::should_record({&x, &gamma, &beta})) {
    const bool hx = has_history(x), hg = has_history(gamma) && !fix_gamma, hb = has_history(beta);
    ag::record_op(op, {x, gamma, beta}, {&y}, {x, gamma, running_mean, running_var},
                  [=](const ag::Saved& s, const std::vector<NDArray>& dy) {
                    return pick(batch_norm_infer_backward(s[0], dy[0], s[1], s[2], s[3], eps,
                                                          fix_gamma),
                                hx, hg, hb);
                  });
  }
  return y;
}

BatchNormGrads batch_norm_backward(const NDArray& x, const NDArray& dy, const NDArray& gamma,
                                   const NDArray& mean, const NDArray& inv_std, bool fix_gamma) {
  const char* op = "batch_norm_backward";
  same_place(op, {&x, &dy, &gamma, &mean, &inv_std});
  if (dy.shape() != x.shape()) {
    throw Error(std::string(op) + ": dy of shape " + shape_str(dy.shape()) +
                " differs from the input's " + shape_str(x.shape()));
  }
  const ops::BatchNorm g =
      geometry(op, x, {{"gamma", &gamma}, {"mean", &mean}, {"inv_std", &inv_std}});
  BatchNormGrads r{like(x, x.shape(), op), like(x, {g.channels}, op), like(x, {g.channels}, op)};
  const Ptr px = ptr_of(x), pd = ptr_of(dy), pg = fix_gamma ? Ptr{} : ptr_of(gamma),
            pm = ptr_of(mean), pi = ptr_of(inv_std), pdx = ptr_of(r.dx), pdg = ptr_of(r.dgamma),
            pdb = ptr_of(r.dbeta);
  launch(chunk(r.dx),
         {chunk(x).var, chunk(dy).var, chunk(gamma).var, chunk(mean).var, chunk(inv_std).var},
         {chunk(r.dx).var, chunk(r.dgamma).var, chunk(r.dbeta).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.batch_norm_backward(ctx, g, px.get(), pd.get(), pg.get(), pm.get(), pi.get(),
                                 pdx.get(), fix_gamma ? nullptr : pdg.get(), pdb.get());
         });
  if (fix_gamma) r.dgamma = ag::zeros(*chunk(x).engine, {g.channels}, x.device());
  return r;
}

BatchNormGrads batch_norm_infer_backward(const NDArray& x, const NDArray& dy,
                                         const NDArray& gamma, const NDArray& running_mean,
                                         const NDArray& running_var, float eps, bool fix_gamma) {
  const char* op = "batch_norm_backward";
  same_place(op, {&x, &dy, &gamma, &running_mean, &running_var});
  if (dy.shape() != x.shape()) {
    throw Error(std::string(op) + ": dy of shape " + shape_str(dy.shape()) +
                " differs from the input's " + shape_str(x.shape()));
  }
  const ops::BatchNorm g = geometry(op, x, {{"gamma", &gamma}, {"running_mean", &running_mean},
                                            {"running_var", &running_var}});
  BatchNormGrads r{like(x, x.shape(), op), like(x, {g.channels}, op), like(x, {g.channels}, op)};
  const Ptr px = ptr_of(x), pd = ptr_of(dy), pg = fix_gamma ? Ptr{} : ptr_of(gamma),
            prm = ptr_of(running_mean), prv = ptr_of(running_var), pdx = ptr_of(r.dx),
            pdg = ptr_of(r.dgamma), pdb = ptr_of(r.dbeta);
  launch(chunk(r.dx),
         {chunk(x).var, chunk(dy).var, chunk(gamma).var, chunk(running_mean).var,
          chunk(running_var).var},
         {chunk(r.dx).var, chunk(r.dgamma).var, chunk(r.dbeta).var}, op,
         [=](const RunContext& ctx, auto k) {
           k.batch_norm_infer_backward(ctx, g, px.get(), pd.get(), pg.get(), prm.get(),
                                       prv.get(), eps, pdx.get(),
                                       fix_gamma ? nullptr : pdg.get(), pdb.get());
         });
  if (fix_gamma) r.dgamma = ag::zeros(*chunk(x).engine, {g.channels}, x.device());
  return r;
}

}  // namespace depengine::nd
