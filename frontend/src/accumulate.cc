// nd::accumulate: contributions to an array through the engine's reduce(v) accesses. The
// frontend gives the engine the hooks (zeros of the array's size, elementwise sum, the
// array's storage as the target); the engine decides where the private buffers live and
// when they are summed.
#include <cstring>
#include <memory>
#include <string>

#include "autograd_internal.h"
#include "internal.h"

namespace depengine {

using detail::ArrayInternals;
using detail::Chunk;

namespace {

void add_into(float* into, const float* from, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) into[i] += from[i];
}

// Sets `c`'s reduction hooks once. The target is the chunk's host storage, which outlives
// every op on its var (its delete_var runs after them, the final combine included).
void ensure_reduction(Chunk& c) {
  if (c.reduction_set.load(std::memory_order_acquire)) return;
  const std::size_t n = c.size;
  c.engine->set_reduction(
      c.var, {.identity =
                  [n]() -> std::shared_ptr<void> {
                    float* p = detail::allocate_storage(n);
                    if (n) std::memset(p, 0, n * sizeof(float));
                    return {p, [n](void* q) { detail::free_storage(static_cast<float*>(q), n); }};
                  },
              .combine =
                  [n](void* into, const void* from) {
                    add_into(static_cast<float*>(into), static_cast<const float*>(from), n);
                  },
              .target = c.data});
  c.reduction_set.store(true, std::memory_order_release);
}

}  // namespace

void nd::accumulate(NDArray& dst, const NDArray& src) {
  constexpr const char* kOp = "nd::accumulate";
  Chunk& cd = detail::require(dst, kOp);
  Chunk& cs = detail::require(src, kOp);
  if (cd.engine != cs.engine) throw Error(std::string(kOp) + ": the arrays live on different engines");
  if (!cd.device.is_cpu() || !cs.device.is_cpu()) {
    throw Error(std::string(kOp) + ": CPU arrays only, got " + cd.device.str() + " and " +
                cs.device.str() + " (its contributions run on CPU workers)");
  }
  if (dst.shape() != src.shape()) {
    throw Error(std::string(kOp) + ": shapes " + shape_str(dst.shape()) + " and " +
                shape_str(src.shape()) + " differ");
  }
  if (&cd == &cs) throw Error(std::string(kOp) + ": src shares dst's storage");
  // Nothing to add; and an empty array has no storage for the engine to combine into (it
  // refuses a null target).
  if (dst.size() == 0) return;
  autograd::detail::in_place(dst, {&src}, kOp);
  ensure_reduction(cd);
  const float* from = cs.data;
  const std::size_t n = dst.size();
  Var target = cd.var;
  cd.engine->push([from, n, target] { add_into(reduction_buffer<float>(target), from, n); },
                  {cs.var}, {reduce(cd.var)}, {.name = "accumulate"});
}

}  // namespace depengine
