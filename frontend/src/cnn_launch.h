// How the CNN ops (conv.cc, softmax.cc, batch_norm.cc) are placed, as ops.cc places its
// own: an op body is written once against a kernel set `k` (ops::cpu, or ops::cuda with
// the same signatures) and runs the CPU kernels on the CPU, the CUDA kernels on a CUDA
// device's stream, and the CPU kernels in stream order on a simulated GPU.
#pragma once

#include <string>
#include <utility>

#include "depengine/config.h"
#include "depengine/ops/batch_norm.h"
#include "depengine/ops/conv.h"
#include "depengine/ops/pooling.h"
#include "depengine/ops/softmax.h"
#include "internal.h"

#if DEPENGINE_HAS_CUDA
#include "depengine/ops/cuda.h"
#endif

namespace depengine::detail::cnn {

#define DEPENGINE_CNN_FORWARD(ns, kernel)         \
  template <class... Args>                        \
  static void kernel(Args&&... args) {            \
    ops::ns::kernel(std::forward<Args>(args)...); \
  }
#define DEPENGINE_CNN_KERNEL_SET(ns)                      \
  DEPENGINE_CNN_FORWARD(ns, conv2d_forward)               \
  DEPENGINE_CNN_FORWARD(ns, conv2d_backward_data)         \
  DEPENGINE_CNN_FORWARD(ns, conv2d_backward_weight)       \
  DEPENGINE_CNN_FORWARD(ns, conv2d_backward_bias)         \
  DEPENGINE_CNN_FORWARD(ns, pool2d_forward)               \
  DEPENGINE_CNN_FORWARD(ns, pool2d_backward)              \
  DEPENGINE_CNN_FORWARD(ns, softmax_forward)              \
  DEPENGINE_CNN_FORWARD(ns, softmax_backward)             \
  DEPENGINE_CNN_FORWARD(ns, nll_loss_forward)             \
  DEPENGINE_CNN_FORWARD(ns, nll_loss_backward)            \
  DEPENGINE_CNN_FORWARD(ns, batch_norm_train)             \
  DEPENGINE_CNN_FORWARD(ns, batch_norm_infer)             \
  DEPENGINE_CNN_FORWARD(ns, batch_norm_backward)          \
  DEPENGINE_CNN_FORWARD(ns, batch_norm_update_running)    \
  DEPENGINE_CNN_FORWARD(ns, batch_norm_infer_backward)

struct CpuKernels {
  DEPENGINE_CNN_KERNEL_SET(cpu)
};
#if DEPENGINE_HAS_CUDA
struct CudaKernels {
  DEPENGINE_CNN_KERNEL_SET(cuda)
};
#endif
#undef DEPENGINE_CNN_KERNEL_SET
#undef DEPENGINE_CNN_FORWARD

inline Chunk& chunk(const NDArray& a) noexcept { return *ArrayInternals::chunk(a); }
inline Ptr ptr_of(const NDArray& a) noexcept {
  return a.defined() ? ptr(chunk(a)) : Ptr{};
}

// Pushes `body(ctx, kernels)` on the device of `out` (its compute lane for a GPU).
template <class Body>
void launch(const Chunk& out, VarList reads, VarList writes, const char* name, Body body) {
  if (out.device.is_cpu()) {
    out.engine->push([body](const RunContext& ctx) { body(ctx, CpuKernels{}); }, reads, writes,
                     PushOptions{.name = name});
    return;
  }
  const bool simulated = out.simulated;
  out.engine->push(
      [body, simulated](const RunContext& ctx) {
        if (simulated) {
          ctx.stream->enqueue_host([body, ctx] { body(ctx, CpuKernels{}); });
          return;
        }
#if DEPENGINE_HAS_CUDA
        body(ctx, CudaKernels{});
#else
        throw Error(ctx.device.str() + ": this build has no CUDA kernels");
#endif
      },
      reads, writes, PushOptions{.device = out.device, .lane = Lane::compute, .name = name});
}

// The chunks of `arrays`, checked to be arrays (not null) on one engine and device; returns
// the first one's. Throws Error "<op>: ..." naming both devices otherwise.
inline Chunk& same_place(const char* op, std::initializer_list<const NDArray*> arrays) {
  Chunk* first = nullptr;
  for (const NDArray* a : arrays) {
    Chunk& c = require(*a, op);
    if (!first) {
      first = &c;
      continue;
    }
    if (c.engine != first->engine) {
      throw Error(std::string(op) + ": the arrays live on different engines");
    }
    if (c.device != first->device) {
      throw Error(std::string(op) + ": the arrays are on different devices, " +
                  first->device.str() + " and " + c.device.str() + " (copy_to moves an array)");
    }
  }
  return *first;
}

}  // namespace depengine::detail::cnn
