// Parallel loops for the CPU kernels.
//
// Chunks have a fixed size, so which elements one task handles (and, for reductions, the
// order of additions) never depends on the thread count. The loop runs in the calling
// thread's task arena — inside the threaded engine that is the engine's arena, so a kernel
// borrows idle engine workers and never adds threads — and it is isolated: a worker that
// waits for the loop's chunks runs only those, never another engine operation nested on
// its stack.
#pragma once

#include <algorithm>
#include <cstddef>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include "depengine/parallel_region.h"

namespace depengine::ops::cpu::detail {

// Elements per task of a memory-bound elementwise loop (128 KiB of float32 per stream):
// large enough to hide the task overhead, small enough to spread a 1 MiB array.
inline constexpr std::size_t kElementGrain = 32 * 1024;

// ⌈n / d⌉ for d > 0, without the overflow of (n + d - 1) / d for n near SIZE_MAX.
constexpr std::size_t ceil_div(std::size_t n, std::size_t d) noexcept {
  return n / d + (n % d != 0);
}

// Calls body(begin, end) for [c·grain, min(n, (c+1)·grain)) for every chunk c, in parallel
// (grain > 0; no bound wraps, whatever n).
template <class Body>
void parallel_chunks(std::size_t n, std::size_t grain, const Body& body) {
  if (n == 0) return;
  const std::size_t chunks = ceil_div(n, grain);
  auto run = [&](std::size_t c) {
    const std::size_t begin = c * grain;
    body(begin, begin + std::min(grain, n - begin));
  };
  if (chunks == 1) {
    body(std::size_t{0}, n);
    return;
  }
#if defined(__SANITIZE_THREAD__)
  // libtbb is not instrumented: parallel_for's own task and tree-node objects, recycled by
  // its small-object pool across threads, read as races to ThreadSanitizer. Under TSan the
  // chunks run in order on the calling thread, which gives the same results (chunking is
  // fixed); the engine's concurrency between operations is still fully exercised.
  for (std::size_t c = 0; c < chunks; ++c) run(c);
#else
  const ParallelRegion region;  // calls idle engine workers back to take chunks
  oneapi::tbb::this_task_arena::isolate([&] {
    oneapi::tbb::parallel_for(
        oneapi::tbb::blocked_range<std::size_t>(0, chunks, 1),
        [&](const oneapi::tbb::blocked_range<std::size_t>& r) {
          for (std::size_t c = r.begin(); c != r.end(); ++c) run(c);
        },
        oneapi::tbb::simple_partitioner());
  });
#endif
}

}  // namespace depengine::ops::cpu::detail
