// depengine/env.h — the one parser for depengine's integer environment variables
// (DEPENGINE_CPU_THREADS, DEPENGINE_MAX_INFLIGHT, DEPENGINE_SIM_GPUS, ...). The engine reads
// its options with it, and so does every tool, so a value means the same everywhere.
#pragma once

#include "depengine/error.h"

namespace depengine {

// A malformed or out-of-range environment variable. Tools tell it apart from other errors
// (the `depengine` command line exits 2 for it, as for a bad flag).
class EnvError : public Error {
 public:
  using Error::Error;
};

// The integer in the environment variable `name`, which must be in [lo, hi]; `fallback`
// when the variable is unset or empty. Anything else (text, trailing characters, leading
// spaces, a value out of range) throws EnvError naming the variable, its value and the
// range:  DEPENGINE_SIM_GPUS='1abc' is not an integer in [0, 64]
//
//   const int gpus = static_cast<int>(depengine::env_long("DEPENGINE_SIM_GPUS", 0, 64, 0));
//
// Thread-safe as long as nothing calls setenv at the same time.
long env_long(const char* name, long lo, long hi, long fallback);

}  // namespace depengine
