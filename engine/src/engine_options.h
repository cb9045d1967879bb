// Engine options resolved against the environment.
#pragma once

#include <cstddef>

#include "depengine/engine.h"

namespace depengine::detail {

struct ResolvedOptions {
  int cpu_threads;
  std::size_t max_inflight;  // 0: unbounded
  int sim_gpus;
  bool inline_small_ops;
};

// Explicit options win; zeros are filled from DEPENGINE_CPU_THREADS, DEPENGINE_MAX_INFLIGHT,
// DEPENGINE_SIM_GPUS and DEPENGINE_INLINE_SMALL_OPS, then defaults. Throws Error naming a bad
// value.
ResolvedOptions resolve_options(const EngineOptions& options);


}  // namespace depengine::detail
