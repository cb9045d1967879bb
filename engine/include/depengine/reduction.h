// depengine/reduction.h — the hooks behind reduce(v) accesses. The engine knows no data:
// the user (or the frontend) says how to make a private buffer holding the identity and how
// to combine two values, and the engine decides when and where to do both.
#pragma once

#include <functional>
#include <memory>

#include "depengine/var.h"

namespace depengine {

// How the contributions of reduce(v) accesses to one var are combined (StarPU's init and
// redux codelets of starpu_data_set_reduction_methods; OpenMP's declare reduction with its
// initializer). `combine` must be associative and commutative: the engine combines the
// private buffers pairwise as a tree, in an order that depends on scheduling.
//
//   engine->set_reduction(sum_var, {
//       .identity = [] { return std::make_shared<long>(0); },
//       .combine = [](void* into, const void* from) {
//         *static_cast<long*>(into) += *static_cast<const long*>(from); },
//       .target = &sum});
struct Reduction {
  // A new private buffer holding the identity (zero for a sum). Called on the thread whose
  // ops will add into it, while an op of the reduction runs; the buffer is dropped once
  // combined.
  std::function<std::shared_ptr<void>()> identity;
  // into = into (+) from. `into` is a private buffer or `target`; `from` a private buffer.
  // Runs inside the engine's combining op, which holds v exclusively.
  std::function<void(void* into, const void* from)> combine;
  // The var's own value, into which the combined buffers are folded; required (non-null).
  // Must stay valid while reduce accesses to the var are pending (a delete_var runs after
  // the final combine).
  void* target = nullptr;
};

namespace detail {
void* reduction_buffer(const Var& v);
}  // namespace detail

// Inside a running op that lists reduce(v) in its writes: the calling thread's private
// buffer for v's current reduction, made by the Reduction's identity hook on first use and
// shared by the ops of that reduction that run on this thread (never at the same time).
// Throws Error outside such an op.
//   engine->push([=] { *depengine::reduction_buffer<long>(v) += 1; }, {}, {depengine::reduce(v)});
template <class T>
T* reduction_buffer(const Var& v) {
  return static_cast<T*>(detail::reduction_buffer(v));
}

}  // namespace depengine
