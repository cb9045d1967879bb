// Engine construction, the process default engine, environment options, devices.
#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "depengine/engine.h"
#include "engine_options.h"
#include "inspect/env_observer.h"

namespace depengine {
namespace {

// Reads an integer variable in [lo, hi]; returns `fallback` when unset or empty.
long env_long(const char* name, long lo, long hi, long fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  long value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < lo || value > hi) {
    throw Error(std::string(name) + "='" + text + "' is not an integer in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

}  // namespace

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "gpu(" + std::to_string(id) + ")";
}

const char* lane_name(Lane lane) noexcept {
  switch (lane) {
    case Lane::compute:
      return "compute";
    case Lane::copy_to_device:
      return "copy_to_device";
    case Lane::copy_from_device:
      return "copy_from_device";
    case Lane::priority:
      return "priority";
  }
  return "unknown";
}

namespace detail {

ResolvedOptions resolve_options(const EngineOptions& o) {
  constexpr long kMaxThreads = 1024;
  if (o.cpu_threads < 0 || o.cpu_threads > kMaxThreads) {
    throw Error("EngineOptions::cpu_threads=" + std::to_string(o.cpu_threads) +
                " is not in [1, 1024]");
  }
  if (o.sim_gpus < 0) {
    throw Error("EngineOptions::sim_gpus=" + std::to_string(o.sim_gpus) + " is negative");
  }
  if (o.max_inflight < -1) {
    throw Error("EngineOptions::max_inflight=" + std::to_string(o.max_inflight) +
                " is not -1 (unbounded), 0 (default) or a bound");
  }
  long cores = static_cast<long>(std::thread::hardware_concurrency());
  ResolvedOptions r{};
  r.cpu_threads = o.cpu_threads
                      ? o.cpu_threads
                      : static_cast<int>(env_long("DEPENGINE_CPU_THREADS", 1, kMaxThreads,
                                                  cores > 0 ? cores : 1));
  if (o.max_inflight == -1) {
    r.max_inflight = 0;
  } else {
    r.max_inflight = o.max_inflight ? static_cast<std::size_t>(o.max_inflight)
                                    : static_cast<std::size_t>(env_long(
                                          "DEPENGINE_MAX_INFLIGHT", 0, 1L << 40, 0));
  }
  r.sim_gpus = o.sim_gpus ? o.sim_gpus
                          : static_cast<int>(env_long("DEPENGINE_SIM_GPUS", 0, 64, 0));
  return r;
}

}  // namespace detail

std::unique_ptr<Engine> Engine::create(std::string_view kind, EngineOptions options) {
  detail::ResolvedOptions r = detail::resolve_options(options);
  std::unique_ptr<Engine> engine;
  if (kind == "threaded") {
    engine = detail::make_threaded_engine(r);
  } else if (kind == "naive") {
    engine = detail::make_naive_engine(r);
  } else {
    throw Error("unknown engine kind '" + std::string(kind) +
                "' (expected \"naive\" or \"threaded\")");
  }
  // DEPENGINE_RECORD / DEPENGINE_PROFILE: the engine holds the only reference, so the
  // files are written when it is destroyed.
  if (auto observer = detail::observer_from_environment()) engine->set_observer(std::move(observer));
  return engine;
}

Engine& Engine::get() {
  // Destroyed at exit, which finishes pending work before the workers stop.
  static std::unique_ptr<Engine> engine = [] {
    const char* kind = std::getenv("DEPENGINE_TYPE");
    std::string_view k = kind && *kind ? kind : "threaded";
    if (k != "naive" && k != "threaded") {
      throw Error("DEPENGINE_TYPE='" + std::string(k) + "' is not \"naive\" or \"threaded\"");
    }
    return create(k);
  }();
  return *engine;
}

}  // namespace depengine
