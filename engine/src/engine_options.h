// Engine options resolved against the environment.
#pragma once

#include <cstddef>

#include "depengine/engine.h"

namespace depengine::detail {

struct ResolvedOptions {
  int cpu_threads;
  std::size_t max_inflight;  // 0: unbounded
  int sim_gpus;
};

// Explicit options win; zeros are filled from DEPENGINE_CPU_THREADS, DEPENGINE_MAX_INFLIGHT
// and DEPENGINE_SIM_GPUS, then defaults. Throws Error naming a bad value.
ResolvedOptions resolve_options(const EngineOptions& options);


}  // namespace depengine::detail
