// depengine/parallel_region.h — a hint from kernels to the CPU pool.
#pragma once

namespace depengine {

// Marks a kernel's parallel loop (oneTBB, in the engine's arena) for its lifetime. Idle
// threaded-engine workers that are waiting for the next operation stop waiting while any
// region is open and return to oneTBB's scheduler, where they can take the loop's chunks;
// otherwise a worker that had just run out of operations would sit out the loop. The
// kernels of depengine::ops open one around every loop they split; other kernels may too.
// Cheap (one atomic increment and decrement), thread-safe, harmless outside an engine.
class ParallelRegion {
 public:
  ParallelRegion() noexcept;
  ~ParallelRegion();
  ParallelRegion(const ParallelRegion&) = delete;
  ParallelRegion& operator=(const ParallelRegion&) = delete;
};

}  // namespace depengine
