// How the frontend's ops run their kernels on an array's device (ops.cc and the files of
// more ops beside it).
//
// An op's body is written once, against a kernel set `k` (ops::cpu, or ops::cuda with the
// same signatures), and placed by launch(): on the CPU it runs the CPU kernels; on a CUDA
// device it enqueues the CUDA kernels on the op's stream; on a simulated GPU it runs the CPU
// kernels inside the stream (enqueue_host), so every GPU path of the frontend runs without
// a GPU.
#pragma once

#include <string>
#include <utility>

#include "depengine/config.h"
#include "depengine/ops/batch_norm.h"
#include "depengine/ops/conv.h"
#include "depengine/ops/elementwise.h"
#include "depengine/ops/fill.h"
#include "depengine/ops/gemm.h"
#include "depengine/ops/pooling.h"
#include "depengine/ops/random.h"
#include "depengine/ops/reduce.h"
#include "depengine/ops/softmax.h"
#include "depengine/ops/strided.h"
#include "depengine/ops/transpose.h"
#include "internal.h"

#if DEPENGINE_HAS_CUDA
#include "depengine/ops/cuda.h"
#endif

namespace depengine::detail {

// Kernel sets with one signature per kernel, so that an op body names each kernel once.
#define DEPENGINE_FORWARD(ns, kernel)             \
  template <class... Args>                        \
  static void kernel(Args&&... args) {            \
    ops::ns::kernel(std::forward<Args>(args)...); \
  }
#define DEPENGINE_KERNEL_SET(ns)          \
  DEPENGINE_FORWARD(ns, unary)            \
  DEPENGINE_FORWARD(ns, binary)           \
  DEPENGINE_FORWARD(ns, binary_scalar)    \
  DEPENGINE_FORWARD(ns, binary_broadcast) \
  DEPENGINE_FORWARD(ns, fill)             \
  DEPENGINE_FORWARD(ns, arange)           \
  DEPENGINE_FORWARD(ns, copy)             \
  DEPENGINE_FORWARD(ns, gemm)             \
  DEPENGINE_FORWARD(ns, random_uniform)   \
  DEPENGINE_FORWARD(ns, random_normal)    \
  DEPENGINE_FORWARD(ns, reduce_all)       \
  DEPENGINE_FORWARD(ns, reduce_axis)      \
  DEPENGINE_FORWARD(ns, reduce_axes)      \
  DEPENGINE_FORWARD(ns, strided_copy)     \
  DEPENGINE_FORWARD(ns, transpose)        \
  DEPENGINE_FORWARD(ns, conv2d_forward)            \
  DEPENGINE_FORWARD(ns, conv2d_backward_data)      \
  DEPENGINE_FORWARD(ns, conv2d_backward_weight)    \
  DEPENGINE_FORWARD(ns, conv2d_backward_bias)      \
  DEPENGINE_FORWARD(ns, pool2d_forward)            \
  DEPENGINE_FORWARD(ns, pool2d_backward)           \
  DEPENGINE_FORWARD(ns, softmax_forward)           \
  DEPENGINE_FORWARD(ns, softmax_backward)          \
  DEPENGINE_FORWARD(ns, nll_loss_forward)          \
  DEPENGINE_FORWARD(ns, nll_loss_backward)         \
  DEPENGINE_FORWARD(ns, batch_norm_train)          \
  DEPENGINE_FORWARD(ns, batch_norm_infer)          \
  DEPENGINE_FORWARD(ns, batch_norm_backward)       \
  DEPENGINE_FORWARD(ns, batch_norm_update_running) \
  DEPENGINE_FORWARD(ns, batch_norm_infer_backward)

struct CpuKernels {
  DEPENGINE_KERNEL_SET(cpu)
  // CPU only: on a GPU they run on the simulated one (launch_host).
  DEPENGINE_FORWARD(cpu, gather)
  DEPENGINE_FORWARD(cpu, scatter_add)
};
#if DEPENGINE_HAS_CUDA
struct CudaKernels {
  DEPENGINE_KERNEL_SET(cuda)
};
#endif
#undef DEPENGINE_KERNEL_SET
#undef DEPENGINE_FORWARD

#if !DEPENGINE_HAS_CUDA
// GPU arrays of a build without CUDA exist only on simulated GPUs (Chunk refuses others).
[[noreturn]] inline void no_cuda(Device d) {
  throw Error(d.str() + ": this build has no CUDA kernels");
}
#endif

// Runs `body(ctx, kernels)` for a GPU op: the CPU kernels in stream order on a simulated
// GPU, else the CUDA kernels enqueued on ctx.stream.
template <class Body>
void on_stream(const RunContext& ctx, bool simulated, const Body& body) {
  if (simulated) {
    ctx.stream->enqueue_host([body, ctx] { body(ctx, CpuKernels{}); });
    return;
  }
#if DEPENGINE_HAS_CUDA
  body(ctx, CudaKernels{});
#else
  no_cuda(ctx.device);
#endif
}

// An op whose kernel touches at most this many elements of each array, one pass each (an
// elementwise kernel, a reduction of a small array), takes a few microseconds at most:
// less than handing it to a worker. It is pushed as a small op (PushOptions::small), which
// an otherwise idle engine runs on the pushing thread.
inline constexpr std::size_t kSmallOpElements = 256;

// Pushes `body` as an op on the device of `out` (its compute lane for a GPU). `elements`:
// how many elements its kernel touches in each array, for one that makes one pass over
// them (0: not such a kernel, or not known); a CPU op of at most kSmallOpElements is small.
template <class Body>
void launch(const Chunk& out, VarList reads, VarList writes, const char* name, Body body,
            std::size_t elements = 0) {
  if (out.device.is_cpu()) {
    const bool small = elements != 0 && elements <= kSmallOpElements;
    out.engine->push([body](const RunContext& ctx) { body(ctx, CpuKernels{}); }, reads, writes,
                     PushOptions{.small = small, .name = name});
    return;
  }
  const bool simulated = out.simulated;
  out.engine->push([body, simulated](const RunContext& ctx) { on_stream(ctx, simulated, body); },
                   reads, writes,
                   PushOptions{.device = out.device, .lane = Lane::compute, .name = name});
}

// launch() for a body that has CPU kernels only (body(ctx, CpuKernels)): the CPU and the
// simulated GPUs; an array on a CUDA device is an Error naming the op, at the call.
template <class Body>
void launch_host(const Chunk& out, VarList reads, VarList writes, const char* name, Body body) {
  if (!out.device.is_cpu() && !out.simulated) {
    throw Error(std::string(name) + ": no CUDA kernel yet for arrays on " + out.device.str() +
                " (copy_to(Device::cpu()) first)");
  }
  if (out.device.is_cpu()) {
    out.engine->push([body](const RunContext& ctx) { body(ctx, CpuKernels{}); }, reads, writes,
                     PushOptions{.name = name});
    return;
  }
  out.engine->push(
      [body](const RunContext& ctx) {
        ctx.stream->enqueue_host([body, ctx] { body(ctx, CpuKernels{}); });
      },
      reads, writes, PushOptions{.device = out.device, .lane = Lane::compute, .name = name});
}

}  // namespace depengine::detail
