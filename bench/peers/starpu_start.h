// Starting StarPU the same way for every peer benchmark: CPU workers only, `threads` of
// them, the given scheduler, and a fresh STARPU_HOME per process (performance models from
// one run must not steer the next). The settings named here win over the caller's
// environment; STARPU_SILENT only defaults. Workers are left paused: idle StarPU workers
// poll, and paused they leave the cores to the other runtimes until starpu_resume().
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <starpu.h>

namespace depengine::peers {

inline void starpu_start(int threads, const char* sched) {
  const std::string n = std::to_string(threads);
  setenv("STARPU_NCPU", n.c_str(), 1);
  setenv("STARPU_SCHED", sched, 1);
  setenv("STARPU_NCUDA", "0", 1);
  setenv("STARPU_NOPENCL", "0", 1);
  setenv("STARPU_NMIC", "0", 1);
  setenv("STARPU_NMPI_MS", "0", 1);
  setenv("STARPU_SILENT", "1", 0);
  if (!std::getenv("STARPU_HOME")) {
    std::string dir = (std::filesystem::temp_directory_path() / "depengine-peers-XXXXXX").string();
    if (mkdtemp(dir.data())) setenv("STARPU_HOME", dir.c_str(), 1);
  }
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = threads;
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.sched_policy_name = sched;
  if (const int rc = starpu_init(&conf); rc != 0) {
    throw std::runtime_error("starpu_init failed (" + std::to_string(rc) + ")");
  }
  starpu_pause();
}

}  // namespace depengine::peers
