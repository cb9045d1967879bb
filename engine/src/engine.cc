// Engine construction, the process default engine, environment options, devices.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "depengine/engine.h"
#include "depengine/env.h"
#include "depengine/observer_fanout.h"
#include "engine_core.h"
#include "engine_options.h"
#include "op.h"

namespace depengine {
namespace {

// std::exit inside an op. oneTBB (2021.8) faults in its own library finalization when exit
// runs on one of its worker threads (a task that calls exit is enough, without depengine),
// and threaded ops run on those threads. So when exit was called from inside an op, the
// engine ends the process itself at the last moment before oneTBB's finalizer: after every
// exit handler and static destructor has run (this is a destructor of the engine library,
// run by the dynamic loader after them and before the libraries it depends on), it flushes
// stdio and leaves with the status given to exit, as exit would have.
std::atomic<int> g_exit_status{0};

void remember_exit_status(int status, void*) { g_exit_status.store(status); }

void watch_exit_status() {
  static std::once_flag once;
  std::call_once(once, [] { ::on_exit(remember_exit_status, nullptr); });
}

[[gnu::destructor]] void finish_exit_called_inside_an_op() {
  if (detail::current_op() == nullptr) return;
  std::fflush(nullptr);
  std::_Exit(g_exit_status.load());
}

std::mutex g_factories_mutex;
std::vector<ObserverFactory>& observer_factories() {
  static std::vector<ObserverFactory> factories;
  return factories;
}

// DEPENGINE_RECORD / DEPENGINE_PROFILE asked for something that only depengine::inspect
// (a registered factory) provides: says so once rather than ignoring them silently.
void warn_inspection_unavailable() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"DEPENGINE_RECORD", "DEPENGINE_PROFILE"}) {
      const char* v = std::getenv(name);
      if (v && *v && std::string_view(v) != "0") {
        std::fprintf(stderr,
                     "depengine: %s is set, but this program does not link depengine::inspect; "
                     "nothing is recorded\n",
                     name);
      }
    }
  });
}

// The observer the registered factories give a new engine: null, one, or their fanout.
std::shared_ptr<Observer> observer_from_factories() {
  std::vector<ObserverFactory> factories;
  {
    std::lock_guard lock(g_factories_mutex);
    factories = observer_factories();
  }
  if (factories.empty()) warn_inspection_unavailable();
  std::vector<std::shared_ptr<Observer>> observers;
  for (ObserverFactory f : factories) {
    if (auto o = f()) observers.push_back(std::move(o));
  }
  if (observers.empty()) return nullptr;
  if (observers.size() == 1) return std::move(observers.front());
  return std::make_shared<ObserverFanout>(std::move(observers));
}

}  // namespace

void add_engine_observer_factory(ObserverFactory factory) {
  if (factory == nullptr) throw Error("add_engine_observer_factory: the factory is null");
  std::lock_guard lock(g_factories_mutex);
  auto& factories = observer_factories();
  if (std::find(factories.begin(), factories.end(), factory) == factories.end()) {
    factories.push_back(factory);
  }
}

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
  if (o.inline_small_ops < -1 || o.inline_small_ops > 1) {
    throw Error("EngineOptions::inline_small_ops=" + std::to_string(o.inline_small_ops) +
                " is not -1 (no), 0 (default) or 1 (yes)");
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
  r.inline_small_ops = o.inline_small_ops ? o.inline_small_ops == 1
                                          : env_long("DEPENGINE_INLINE_SMALL_OPS", 0, 1, 1) == 1;
  return r;
}

// What a child of fork() can do instead of using an engine made before the fork.
constexpr const char* kAfterFork =
    "make a naive engine in the child, or start child processes without fork (posix_spawn; "
    "Python multiprocessing's 'spawn' or 'forkserver')";

// The public Engine: forwards to its core and runs the shutdown sequence when destroyed.
class EngineHandle final : public Engine {
 public:
  explicit EngineHandle(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {}

  ~EngineHandle() override {
    if (made_before_fork(core_->id())) {
      // In a child of fork(): the workers to stop and the ops to wait for are the parent's.
      // The engine's memory is the child's copy and goes with the process.
      (void)core_.release();
      return;
    }
    if (core_->owns(current_op())) {
      // Destroyed by one of its own ops (delete, or std::exit inside an op of Engine::get()):
      // waiting for that op here would wait for ourselves. The core keeps running; a thread
      // of its own finishes the remaining work and stops it once the op has returned.
      core_->shutdown_from_own_op();
      EngineCore* core = core_.release();
      try {
        std::thread([core] {
          core->shutdown();
          delete core;
        }).detach();
      } catch (...) {
        // No thread to be had: the core is left running rather than waited for here.
      }
      return;
    }
    core_->shutdown();
  }

  Var new_var() override {
    check_process("new_var");
    return core_->new_var();
  }
  void wait_to_read(const Var& v) override {
    check_process("wait_to_read");
    core_->check_not_recording("wait_to_read");
    core_->wait_to_read(v);
  }
  void wait_all() override {
    check_process("wait_all");
    core_->check_not_recording("wait_all");
    core_->wait_all();
  }
  void delete_var(const Var& v, std::function<void()> on_deleted,
                  DeleteOptions options) override {
    check_process("delete_var");
    core_->check_not_recording("delete_var");
    core_->delete_var(v, std::move(on_deleted), options);
  }
  void replay(const Segment& segment) override {
    check_process("replay");
    core_->replay(segment);
  }
  void set_reduction(const Var& v, Reduction reduction) override {
    check_process("set_reduction");
    check_not_in_observer("set_reduction");
    core_->set_reduction(v, std::move(reduction));
  }
  std::string_view kind() const noexcept override { return core_->kind(); }
  int cpu_threads() const noexcept override { return core_->cpu_threads(); }
  std::size_t max_inflight() const noexcept override { return core_->max_inflight(); }
  int sim_gpus() const noexcept override { return core_->sim_gpus(); }
  std::size_t pending() const noexcept override { return core_->pending(); }
  std::size_t peak_pending() const noexcept override { return core_->peak_pending(); }
  void set_observer(std::shared_ptr<Observer> observer) override {
    check_process("set_observer");
    core_->set_observer(std::move(observer));
  }

 protected:
  void push_op(const BodyBuilder& body, bool async, VarList reads, VarList writes,
               PushOptions&& options) override {
    check_process(async ? "push_async" : "push");
    core_->push(body, async, reads, writes, std::move(options));
  }
  Segment record_region(void (*call)(void*), void* fn) override {
    check_process("record");
    return core_->record(call, fn);
  }

 private:
  // Refuses every call in a child of fork() made after the engine (op.h, watch_forks):
  // the child has none of its workers, so its ops would never run and its waits never end.
  void check_process(const char* call) const {
    if (made_before_fork(core_->id())) {
      throw Error(std::string(call) +
                  ": this engine was made before fork(), and this child process has none of "
                  "its threads; " + kAfterFork);
    }
  }

  std::unique_ptr<EngineCore> core_;
};

}  // namespace detail

std::unique_ptr<Engine> Engine::create(std::string_view kind, EngineOptions options) {
  detail::ResolvedOptions r = detail::resolve_options(options);
  watch_exit_status();
  detail::watch_forks();
  std::unique_ptr<detail::EngineCore> core;
  if (kind == "threaded") {
    if (detail::engines_before_fork()) {
      throw Error(
          std::string("Engine::create(\"threaded\"): this process is a child of fork() made "
                      "after an engine; oneTBB's worker threads, which threaded engines run "
                      "on, do not survive fork; ") +
          detail::kAfterFork);
    }
    core = detail::make_threaded_core(r);
  } else if (kind == "naive") {
    core = detail::make_naive_core(r);
  } else {
    throw Error("unknown engine kind '" + std::string(kind) +
                "' (expected \"naive\" or \"threaded\")");
  }
  std::unique_ptr<Engine> engine = std::make_unique<detail::EngineHandle>(std::move(core));
  // The registered factories' observers (depengine::inspect's: DEPENGINE_RECORD and
  // DEPENGINE_PROFILE). The engine holds the only reference, so their files are written when
  // it is destroyed.
  if (auto observer = observer_from_factories()) engine->set_observer(std::move(observer));
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
