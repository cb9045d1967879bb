// depengine/observer.h — a hook that sees every operation the engine handles. The graph
// recorder and the profiler are observers; an engine without one pays one atomic load per
// event.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "depengine/device.h"

namespace depengine {

// commute: depengine::commute(v), a read-write that may swap with its neighbouring commute
// accesses; reduce: depengine::reduce(v), a contribution combined before the next other
// access (the engine then reports its combining op, named "reduce_combine", writing v).
enum class AccessMode : std::uint8_t { read, write, read_write, commute, reduce };

// One var an operation accesses, after duplicates are merged.
struct VarAccess {
  std::uint64_t var = 0;  // Var::id()
  // For a read, the number of writes to the var pushed before this op (the version it
  // sees); for a write or read_write, the version it creates (that number + 1).
  std::uint64_t version = 0;
  AccessMode mode = AccessMode::read;
};

struct OpInfo {
  std::uint64_t id = 0;  // push sequence number, unique within the engine
  std::string_view name;
  Device device;
  Lane lane = Lane::compute;
  int priority = 0;
  std::span<const VarAccess> accesses;
};

// Engines call these from their own threads, some under engine locks. What an observer may
// do:
//   - be called concurrently, from any thread: implementations must be thread-safe, and
//     should be fast (on_push runs under the push lock, in push order);
//   - not call the engine (push, wait, delete_var, set_observer): such a call throws Error;
//   - not throw. If it does anyway, the engine contains it: the op is unaffected, it stops
//     reporting to this observer, and the next wait_all reports an Error naming the event
//     and the op.
//
//   engine->set_observer(std::make_shared<MyObserver>());
class Observer {
 public:
  virtual ~Observer() = default;
  // In push order (under the engine's push lock), before the op can run. Internal ops
  // (wait_to_read's rendezvous) are not reported; delete_var is, named "delete_var".
  virtual void on_push(const OpInfo& op) = 0;
  // All dependencies of op `id` are satisfied.
  virtual void on_ready(std::uint64_t id) = 0;
  // Op `id` starts on `worker` (the CPU worker index, or the GPU lane's index).
  virtual void on_start(std::uint64_t id, int worker) = 0;
  // Op `id` finished; `skipped` when it did not run because an input had failed.
  virtual void on_end(std::uint64_t id, bool failed, bool skipped) = 0;
};

// Returns the observer to attach to a new engine, or null for none.
using ObserverFactory = std::shared_ptr<Observer> (*)();

// Registers `factory`: every engine Engine::create makes from now on asks it for an
// observer (several factories' observers are combined by an ObserverFanout, in registration
// order). A library registers its factory when it is loaded; depengine::inspect registers the
// one that DEPENGINE_RECORD and DEPENGINE_PROFILE turn on. A factory that throws makes
// Engine::create throw. Registering the same factory again has no effect.
//
//   std::shared_ptr<depengine::Observer> make_mine() { return std::make_shared<Mine>(); }
//   depengine::add_engine_observer_factory(&make_mine);
//
// This function is thread-safe.
void add_engine_observer_factory(ObserverFactory factory);

}  // namespace depengine
