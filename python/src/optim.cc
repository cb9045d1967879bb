// depengine._depengine._optim: the fused optimizer updates of depengine/optim.h, with the
// keyword names of MXNet's sgd_update, sgd_mom_update, adam_update, rmsprop_update and
// rmspropalex_update (plus adadelta_update). Each call pushes one op that writes the weight
// and its states in place and returns None at once; gluon.Trainer calls them.
#include <nanobind/stl/vector.h>

#include <vector>

#include "binding.h"
#include "depengine/optim.h"

namespace depengine::python {
namespace {

// Runs one update: a bad shape or hyperparameter is a ValueError, as for every frontend call.
template <class F>
void update(NDArray& weight, F&& f) {
  frontend_call(weight.engine(), [&] {
    f();
    return 0;
  });
}

}  // namespace

void bind_optim(nb::module_& m) {
  using namespace nb::literals;
  nb::module_ o = m.def_submodule("_optim", "Fused optimizer updates (depengine/optim.h)");
  o.def("sgd_update",
        [](NDArray& weight, const NDArray& grad, float lr, float wd, float rescale_grad,
           float clip_gradient) {
          update(weight, [&] {
            nd::sgd_update(weight, grad,
                           {.lr = lr, .wd = wd, .rescale_grad = rescale_grad,
                            .clip_gradient = clip_gradient});
          });
        },
        "weight"_a, "grad"_a, nb::kw_only(), "lr"_a, "wd"_a = 0.0f, "rescale_grad"_a = 1.0f,
        "clip_gradient"_a = -1.0f,
        "weight = (1 - lr*wd)*weight - lr*clip(rescale_grad*grad), in place (one op).");
  // Trainer.step's plain SGD: the updates of every parameter in one call, each the op that
  // sgd_update pushes, in list order (a Python call per parameter cost the Python thread a
  // few µs each, taken from the engine's workers on a busy machine).
  o.def("sgd_update_many",
        [](std::vector<NDArray> weights, const std::vector<NDArray>& grads,
           const std::vector<float>& lrs, const std::vector<float>& wds, float rescale_grad,
           float clip_gradient) {
          const std::size_t n = weights.size();
          if (grads.size() != n || lrs.size() != n || wds.size() != n) {
            throw nb::value_error(("sgd_update_many: " + std::to_string(n) + " weights, " +
                                   std::to_string(grads.size()) + " gradients, " +
                                   std::to_string(lrs.size()) + " learning rates and " +
                                   std::to_string(wds.size()) +
                                   " weight decays: one of each per weight")
                                      .c_str());
          }
          for (std::size_t i = 0; i < n; ++i) {
            update(weights[i], [&] {
              nd::sgd_update(weights[i], grads[i],
                             {.lr = lrs[i], .wd = wds[i], .rescale_grad = rescale_grad,
                              .clip_gradient = clip_gradient});
            });
          }
        },
        "weights"_a, "grads"_a, nb::kw_only(), "lrs"_a, "wds"_a, "rescale_grad"_a = 1.0f,
        "clip_gradient"_a = -1.0f,
        "sgd_update of each weight with its gradient, lr and wd: one op per weight, in order.");
  o.def("sgd_mom_update",
        [](NDArray& weight, const NDArray& grad, NDArray& mom, float lr, float momentum, float wd,
           float rescale_grad, float clip_gradient) {
          update(weight, [&] {
            nd::sgd_mom_update(weight, grad, mom,
                               {.lr = lr, .momentum = momentum, .wd = wd,
                                .rescale_grad = rescale_grad, .clip_gradient = clip_gradient});
          });
        },
        "weight"_a, "grad"_a, "mom"_a, nb::kw_only(), "lr"_a, "momentum"_a = 0.0f, "wd"_a = 0.0f,
        "rescale_grad"_a = 1.0f, "clip_gradient"_a = -1.0f,
        "mom = momentum*mom - lr*wd*weight - lr*clip(rescale_grad*grad); weight += mom.");
  o.def("adam_update",
        [](NDArray& weight, const NDArray& grad, NDArray& mean, NDArray& var, float lr,
           float beta1, float beta2, float epsilon, float wd, float rescale_grad,
           float clip_gradient) {
          update(weight, [&] {
            nd::adam_update(weight, grad, mean, var,
                            {.lr = lr, .beta1 = beta1, .beta2 = beta2, .epsilon = epsilon,
                             .wd = wd, .rescale_grad = rescale_grad,
                             .clip_gradient = clip_gradient});
          });
        },
        "weight"_a, "grad"_a, "mean"_a, "var"_a, nb::kw_only(), "lr"_a, "beta1"_a = 0.9f,
        "beta2"_a = 0.999f, "epsilon"_a = 1e-8f, "wd"_a = 0.0f, "rescale_grad"_a = 1.0f,
        "clip_gradient"_a = -1.0f, "MXNet's adam_update (bias correction folded into lr).");
  o.def("adadelta_update",
        [](NDArray& weight, const NDArray& grad, NDArray& acc_g, NDArray& acc_delta, float rho,
           float epsilon, float wd, float rescale_grad, float clip_gradient) {
          update(weight, [&] {
            nd::adadelta_update(weight, grad, acc_g, acc_delta,
                                {.rho = rho, .epsilon = epsilon, .wd = wd,
                                 .rescale_grad = rescale_grad, .clip_gradient = clip_gradient});
          });
        },
        "weight"_a, "grad"_a, "acc_g"_a, "acc_delta"_a, nb::kw_only(), "rho"_a = 0.9f,
        "epsilon"_a = 1e-5f, "wd"_a = 0.0f, "rescale_grad"_a = 1.0f, "clip_gradient"_a = -1.0f,
        "MXNet 1.9's AdaDelta step (no learning rate).");
  o.def("rmsprop_update",
        [](NDArray& weight, const NDArray& grad, NDArray& n, float lr, float gamma1,
           float epsilon, float wd, float rescale_grad, float clip_gradient, float clip_weights) {
          update(weight, [&] {
            nd::rmsprop_update(weight, grad, n,
                               {.lr = lr, .gamma1 = gamma1, .epsilon = epsilon, .wd = wd,
                                .rescale_grad = rescale_grad, .clip_gradient = clip_gradient,
                                .clip_weights = clip_weights});
          });
        },
        "weight"_a, "grad"_a, "n"_a, nb::kw_only(), "lr"_a, "gamma1"_a = 0.95f,
        "epsilon"_a = 1e-8f, "wd"_a = 0.0f, "rescale_grad"_a = 1.0f, "clip_gradient"_a = -1.0f,
        "clip_weights"_a = -1.0f, "MXNet's rmsprop_update (Tieleman & Hinton).");
  o.def("rmspropalex_update",
        [](NDArray& weight, const NDArray& grad, NDArray& n, NDArray& g, NDArray& delta,
           float lr, float gamma1, float gamma2, float epsilon, float wd, float rescale_grad,
           float clip_gradient, float clip_weights) {
          update(weight, [&] {
            nd::rmspropalex_update(weight, grad, n, g, delta,
                                   {.lr = lr, .gamma1 = gamma1, .gamma2 = gamma2,
                                    .epsilon = epsilon, .wd = wd, .rescale_grad = rescale_grad,
                                    .clip_gradient = clip_gradient,
                                    .clip_weights = clip_weights, .centered = true});
          });
        },
        "weight"_a, "grad"_a, "n"_a, "g"_a, "delta"_a, nb::kw_only(), "lr"_a,
        "gamma1"_a = 0.95f, "gamma2"_a = 0.9f, "epsilon"_a = 1e-8f, "wd"_a = 0.0f,
        "rescale_grad"_a = 1.0f, "clip_gradient"_a = -1.0f, "clip_weights"_a = -1.0f,
        "MXNet's rmspropalex_update (centered RMSProp, Graves).");
  o.def("reset_arrays",
        [](const std::vector<NDArray>& arrays) {
          if (arrays.empty()) return;
          frontend_call(arrays.front().engine(), [&] {
            nd::reset_arrays(arrays);
            return 0;
          });
        },
        "arrays"_a, "Sets every array to zeros: one op per device (MXNet's reset_arrays).");
}

}  // namespace depengine::python
