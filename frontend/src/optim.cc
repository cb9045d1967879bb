// The fused optimizer updates of depengine/optim.h: check the arrays and hyperparameters, then
// push one op that reads the gradient and writes the weight and its states.
#include "depengine/optim.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "depengine/config.h"
#include "depengine/ops/optimizer.h"
#if DEPENGINE_HAS_CUDA
#include "depengine/ops/cuda.h"
#endif
#include "autograd_internal.h"
#include "internal.h"

namespace depengine::nd {
namespace {

using detail::Chunk;
using detail::Ptr;

ops::SgdParams params(const SgdOptions& o) {
  return {o.lr, o.momentum, o.wd, o.rescale_grad, o.clip_gradient};
}
ops::AdamParams params(const AdamOptions& o) {
  return {o.lr, o.beta1, o.beta2, o.epsilon, o.wd, o.rescale_grad, o.clip_gradient};
}
ops::AdaDeltaParams params(const AdaDeltaOptions& o) {
  return {o.rho, o.epsilon, o.wd, o.rescale_grad, o.clip_gradient};
}
ops::RmsPropParams params(const RmsPropOptions& o) {
  return {o.lr, o.gamma1, o.gamma2, o.epsilon, o.wd, o.rescale_grad, o.clip_gradient,
          o.clip_weights, o.centered};
}

// The weight, the gradient and the states of one update, checked: defined, on one engine and
// device, of one shape, and no two of the written arrays (nor the gradient) on one storage.
struct Operands {
  Chunk& weight;
  Chunk& grad;
  std::vector<Chunk*> states;
  std::vector<const NDArray*> written;  // the weight and the states, for bump_version
};

Operands operands(const char* op, const NDArray& weight, const NDArray& grad,
                  std::initializer_list<std::pair<const char*, const NDArray*>> states) {
  Chunk& w = detail::require(weight, op);
  Chunk& g = detail::require(grad, op);
  auto check = [&](const char* what, const NDArray& a, const Chunk& c) {
    if (c.engine != w.engine) {
      throw Error(std::string(op) + ": the " + what + " lives on another engine than the weight");
    }
    if (c.device != w.device) {
      throw Error(std::string(op) + ": the " + what + " is on " + c.device.str() +
                  ", the weight on " + w.device.str());
    }
    if (a.shape() != weight.shape()) {
      throw Error(std::string(op) + ": the " + what + "'s shape " + shape_str(a.shape()) +
                  " differs from the weight's " + shape_str(weight.shape()));
    }
  };
  check("gradient", grad, g);
  Operands r{w, g, {}, {&weight}};
  std::vector<std::pair<const char*, const Chunk*>> written{{"weight", &w}};
  for (const auto& [what, a] : states) {
    Chunk& c = detail::require(*a, op);
    check(what, *a, c);
    for (const auto& [other, oc] : written) {
      if (oc == &c) {
        throw Error(std::string(op) + ": the " + what + " shares its storage with the " +
                    other + " (each state needs an array of its own)");
      }
    }
    written.emplace_back(what, &c);
    r.states.push_back(&c);
    r.written.push_back(a);
  }
  for (const auto& [what, c] : written) {
    if (c == &g) {
      throw Error(std::string(op) + ": the gradient shares its storage with the " + what);
    }
  }
  return r;
}

void require_finite(const char* op, const char* name, float v) {
  if (!std::isfinite(v)) {
    throw Error(std::string(op) + ": " + name + " must be finite, got " + std::to_string(v));
  }
}

void require_at_least_0(const char* op, const char* name, float v) {
  require_finite(op, name, v);
  if (v < 0.0f) {
    throw Error(std::string(op) + ": " + name + " must be >= 0, got " + std::to_string(v));
  }
}

void require_rate(const char* op, const char* name, float v) {
  require_finite(op, name, v);
  if (v < 0.0f || v > 1.0f) {
    throw Error(std::string(op) + ": " + name + " must be in [0, 1], got " + std::to_string(v));
  }
}

// The options every update has: a rescale factor and a clip bound (any value; < 0 is off).
void require_common(const char* op, float wd, float rescale_grad, float clip_gradient) {
  require_finite(op, "wd", wd);
  require_finite(op, "rescale_grad", rescale_grad);
  if (std::isnan(clip_gradient)) throw Error(std::string(op) + ": clip_gradient is NaN");
}

#if !DEPENGINE_HAS_CUDA
[[noreturn]] void no_cuda(Device d) { throw Error(d.str() + ": this build has no CUDA kernels"); }
#endif

// Pushes the update: `cpu(ptrs...)` on the CPU or a simulated GPU (in its stream's order),
// `gpu(ctx, ptrs...)` on a CUDA device. Pointers are resolved when the op runs (a CUDA
// array's storage is known only once its allocation op has run).
template <class Cpu, class Gpu>
void push_update(const char* op, const Operands& o, Cpu cpu, [[maybe_unused]] Gpu gpu) {
  std::vector<Var> writes{o.weight.var};
  std::vector<Ptr> states;
  for (const Chunk* c : o.states) {
    writes.push_back(c->var);
    states.push_back(detail::ptr(*c));
  }
  states.resize(3);  // absent states resolve to nullptr
  // In-place writes: an array saved by the tape before this update is now stale.
  for (const NDArray* a : o.written) autograd::detail::bump_version(*a);
  const Ptr w = detail::ptr(o.weight), g = detail::ptr(o.grad);
  const std::size_t n = o.weight.size;
  auto run = [=](const RunContext& ctx, auto kernel) {
    kernel(ctx, w.get(), g.get(), states[0].get(), states[1].get(), states[2].get(), n);
  };
  Engine& e = *o.weight.engine;
  if (o.weight.device.is_cpu()) {
    e.push([=](const RunContext& ctx) { run(ctx, cpu); }, {o.grad.var}, writes,
           PushOptions{.name = op});
    return;
  }
  const bool simulated = o.weight.simulated;
  e.push(
      [=](const RunContext& ctx) {
        if (simulated) {
          ctx.stream->enqueue_host([=] { run(ctx, cpu); });
          return;
        }
#if DEPENGINE_HAS_CUDA
        run(ctx, gpu);
#else
        no_cuda(ctx.device);
#endif
      },
      {o.grad.var}, writes,
      PushOptions{.device = o.weight.device, .lane = Lane::compute, .name = op});
}

}  // namespace

void sgd_update(NDArray& weight, const NDArray& grad, const SgdOptions& options) {
  const char* op = "sgd_update";
  const Operands o = operands(op, weight, grad, {});
  const auto p = params(options);
  require_at_least_0(op, "lr", p.lr);
  require_common(op, p.wd, p.rescale_grad, p.clip_gradient);
  if (p.momentum != 0.0f) {
    throw Error("sgd_update: momentum is " + std::to_string(p.momentum) +
                "; an update with momentum needs its state (sgd_mom_update)");
  }
  auto kernel = [p](auto update) {
    return [p, update](const RunContext& ctx, float* w, const float* g, float*, float*, float*,
                       std::size_t n) { update(ctx, w, g, nullptr, n, p); };
  };
#if DEPENGINE_HAS_CUDA
  push_update(op, o, kernel(ops::cpu::update_sgd), kernel(ops::cuda::update_sgd));
#else
  push_update(op, o, kernel(ops::cpu::update_sgd), 0);
#endif
}

void sgd_mom_update(NDArray& weight, const NDArray& grad, NDArray& mom,
                    const SgdOptions& options) {
  const char* op = "sgd_mom_update";
  const Operands o = operands(op, weight, grad, {{"momentum state", &mom}});
  const auto p = params(options);
  require_at_least_0(op, "lr", p.lr);
  require_rate(op, "momentum", p.momentum);
  require_common(op, p.wd, p.rescale_grad, p.clip_gradient);
  auto kernel = [p](auto update) {
    return [p, update](const RunContext& ctx, float* w, const float* g, float* m, float*,
                       float*, std::size_t n) { update(ctx, w, g, m, n, p); };
  };
#if DEPENGINE_HAS_CUDA
  push_update(op, o, kernel(ops::cpu::update_sgd), kernel(ops::cuda::update_sgd));
#else
  push_update(op, o, kernel(ops::cpu::update_sgd), 0);
#endif
}

void adam_update(NDArray& weight, const NDArray& grad, NDArray& mean, NDArray& var,
                 const AdamOptions& options) {
  const char* op = "adam_update";
  const Operands o = operands(op, weight, grad, {{"mean", &mean}, {"var", &var}});
  const auto p = params(options);
  require_at_least_0(op, "lr", p.lr);
  require_rate(op, "beta1", p.beta1);
  require_rate(op, "beta2", p.beta2);
  require_at_least_0(op, "epsilon", p.epsilon);
  require_common(op, p.wd, p.rescale_grad, p.clip_gradient);
  auto kernel = [p](auto update) {
    return [p, update](const RunContext& ctx, float* w, const float* g, float* m, float* v,
                       float*, std::size_t n) { update(ctx, w, g, m, v, n, p); };
  };
#if DEPENGINE_HAS_CUDA
  push_update(op, o, kernel(ops::cpu::update_adam), kernel(ops::cuda::update_adam));
#else
  push_update(op, o, kernel(ops::cpu::update_adam), 0);
#endif
}

void adadelta_update(NDArray& weight, const NDArray& grad, NDArray& acc_g, NDArray& acc_delta,
                     const AdaDeltaOptions& options) {
  const char* op = "adadelta_update";
  const Operands o =
      operands(op, weight, grad, {{"acc_g state", &acc_g}, {"acc_delta state", &acc_delta}});
  const auto p = params(options);
  require_rate(op, "rho", p.rho);
  require_at_least_0(op, "epsilon", p.epsilon);
  require_common(op, p.wd, p.rescale_grad, p.clip_gradient);
  auto kernel = [p](auto update) {
    return [p, update](const RunContext& ctx, float* w, const float* g, float* a, float* d,
                       float*, std::size_t n) { update(ctx, w, g, a, d, n, p); };
  };
#if DEPENGINE_HAS_CUDA
  push_update(op, o, kernel(ops::cpu::update_adadelta), kernel(ops::cuda::update_adadelta));
#else
  push_update(op, o, kernel(ops::cpu::update_adadelta), 0);
#endif
}

namespace {

void rmsprop_checks(const char* op, const ops::RmsPropParams& p) {
  require_at_least_0(op, "lr", p.lr);
  require_rate(op, "gamma1", p.gamma1);
  require_rate(op, "gamma2", p.gamma2);
  require_at_least_0(op, "epsilon", p.epsilon);
  require_common(op, p.wd, p.rescale_grad, p.clip_gradient);
  if (std::isnan(p.clip_weights)) throw Error(std::string(op) + ": clip_weights is NaN");
}

}  // namespace

void rmsprop_update(NDArray& weight, const NDArray& grad, NDArray& n, const RmsPropOptions& options) {
  const char* op = "rmsprop_update";
  const Operands o = operands(op, weight, grad, {{"n state", &n}});
  const auto p = params(options);
  rmsprop_checks(op, p);
  if (p.centered) throw Error("rmsprop_update: centered RMSProp is rmspropalex_update");
  auto kernel = [p](auto update) {
    return [p, update](const RunContext& ctx, float* w, const float* g, float* s, float*,
                       float*, std::size_t count) { update(ctx, w, g, s, nullptr, nullptr, count, p); };
  };
#if DEPENGINE_HAS_CUDA
  push_update(op, o, kernel(ops::cpu::update_rmsprop), kernel(ops::cuda::update_rmsprop));
#else
  push_update(op, o, kernel(ops::cpu::update_rmsprop), 0);
#endif
}

void rmspropalex_update(NDArray& weight, const NDArray& grad, NDArray& n, NDArray& g,
                        NDArray& delta, const RmsPropOptions& options) {
  const char* op = "rmspropalex_update";
  const Operands o =
      operands(op, weight, grad, {{"n state", &n}, {"g state", &g}, {"delta state", &delta}});
  const auto p = params(options);
  rmsprop_checks(op, p);
  if (!p.centered) throw Error("rmspropalex_update: non-centered RMSProp is rmsprop_update");
  auto kernel = [p](auto update) {
    return [p, update](const RunContext& ctx, float* w, const float* gr, float* s, float* m,
                       float* d, std::size_t count) { update(ctx, w, gr, s, m, d, count, p); };
  };
#if DEPENGINE_HAS_CUDA
  push_update(op, o, kernel(ops::cpu::update_rmsprop), kernel(ops::cuda::update_rmsprop));
#else
  push_update(op, o, kernel(ops::cpu::update_rmsprop), 0);
#endif
}

void reset_arrays(const std::vector<NDArray>& arrays) {
  const char* op = "reset_arrays";
  std::vector<std::pair<Device, std::vector<Chunk*>>> groups;
  for (const NDArray& a : arrays) {
    Chunk& c = detail::require(a, op);
    if (c.engine != detail::require(arrays.front(), op).engine) {
      throw Error("reset_arrays: the arrays live on more than one engine");
    }
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == c.device; });
    if (it == groups.end()) it = groups.insert(groups.end(), {c.device, {}});
    it->second.push_back(&c);
  }
  for (const NDArray& a : arrays) autograd::detail::bump_version(a);
  for (const auto& [device, chunks] : groups) {
    std::vector<Var> writes;
    std::vector<std::pair<Ptr, std::size_t>> targets;
    for (const Chunk* c : chunks) {
      writes.push_back(c->var);
      targets.emplace_back(detail::ptr(*c), c->size);
    }
    auto fill_host = [targets] {
      for (const auto& [p, n] : targets) std::fill_n(p.get(), n, 0.0f);
    };
    Engine& e = *chunks.front()->engine;
    if (device.is_cpu()) {
      e.push([fill_host](const RunContext&) { fill_host(); }, {}, writes, PushOptions{.name = op});
      continue;
    }
    const bool simulated = chunks.front()->simulated;
    e.push(
        [=](const RunContext& ctx) {
          if (simulated) {
            ctx.stream->enqueue_host(fill_host);
            return;
          }
#if DEPENGINE_HAS_CUDA
          for (const auto& [p, n] : targets) ops::cuda::fill(ctx, p.get(), n, 0.0f);
#else
          no_cuda(ctx.device);
#endif
        },
        {}, writes, PushOptions{.device = device, .lane = Lane::compute, .name = op});
  }
}

}  // namespace depengine::nd
