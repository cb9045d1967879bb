// CPU kernels of depengine/ops/optimizer.h: the shared per-element formulas over fixed chunks.
#include "depengine/ops/optimizer.h"

#include "../optimizer_formulas.h"
#include "parallel.h"

namespace depengine::ops::cpu {
namespace {

// Runs f(i) for every element, chunked as every elementwise kernel is.
template <class F>
void each(std::size_t n, const F& f) {
  detail::parallel_chunks(n, detail::kElementGrain, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) f(i);
  });
}

}  // namespace

void update_sgd(const RunContext&, float* w, const float* g, float* mom, std::size_t n,
                const SgdParams& p) {
  each(n, [=](std::size_t i) { ops::detail::sgd_element(w, g, mom, i, p); });
}

void update_adam(const RunContext&, float* w, const float* g, float* mean, float* var,
                 std::size_t n, const AdamParams& p) {
  each(n, [=](std::size_t i) { ops::detail::adam_element(w, g, mean, var, i, p); });
}

void update_adadelta(const RunContext&, float* w, const float* g, float* acc_g, float* acc_delta,
                     std::size_t n, const AdaDeltaParams& p) {
  each(n, [=](std::size_t i) { ops::detail::adadelta_element(w, g, acc_g, acc_delta, i, p); });
}

void update_rmsprop(const RunContext&, float* w, const float* g, float* state_n, float* state_g,
                    float* delta, std::size_t n, const RmsPropParams& p) {
  each(n, [=](std::size_t i) {
    ops::detail::rmsprop_element(w, g, state_n, state_g, delta, i, p);
  });
}

}  // namespace depengine::ops::cpu
