// depengine/engine.h — the dependency engine: push operations that declare what they read
// and write; the engine runs each one as soon as its inputs are ready.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "depengine/completion.h"
#include "depengine/device.h"
#include "depengine/error.h"
#include "depengine/observer.h"
#include "depengine/segment.h"
#include "depengine/reduction.h"
#include "depengine/stream.h"
#include "depengine/var.h"

namespace depengine {

// Per-push options. Designated initializers keep call sites readable:
//   engine->push(fn, {a}, {b}, {.priority = 1, .name = "gemm"});
struct PushOptions {
  Device device = Device::cpu();
  Lane lane = Lane::compute;
  // The body is short (a few microseconds at most), takes no lock the pushing thread may
  // hold, and waits for nothing the pushing thread does after the push. A threaded engine
  // with nothing else ready or running then runs such a CPU op, once its accesses are
  // granted at push, on the pushing thread before push returns, instead of handing it to a
  // worker: waking a worker and moving the op's record, its vars and the queue to another
  // core cost more than the body. Pushes made inside an op are never run that way. The
  // NDArray frontend marks its elementwise kernels on small arrays so.
  // (Declared here, in the padding before `priority`: {.small = true, .name = ...}.)
  bool small = false;
  // Among ready operations of one device, higher runs first.
  int priority = 0;
  // Shown in errors, profiles and graph dumps.
  std::string name{};
};

// Per-delete options (Engine::delete_var).
struct DeleteOptions {
  // `on_deleted` only gives memory back: it pushes nothing, waits for nothing, touches
  // nothing an op or the engine uses, does not throw and does not end the process. The
  // engine may then delete a var that earlier ops still use without an op of its own, and
  // run `on_deleted` on the thread that finishes the last of them (a worker), as MXNet's
  // frontend frees an array's memory; it still uses an op where one orders something (a
  // var a GPU op used, an observer). What it throws anyway is reported by wait_all.
  bool frees_memory_only = false;
};

// Engine construction options; zero means "take it from the environment or the default".
struct EngineOptions {
  // CPU worker threads. Default: DEPENGINE_CPU_THREADS, else the number of cores.
  int cpu_threads = 0;
  // Bound on operations pushed and not yet finished; push blocks while it is reached, with
  // any number of pushing threads. In the threaded engine a blocked push resumes once the
  // operations in flight have fallen by an eighth of the bound (at least one), so that a
  // frontend far ahead is not woken for every operation that finishes. Pushes made by
  // running ops never block, nor does a push made while every op in flight waits for a
  // Completion (which the pushing thread may be the one to call). Default:
  // DEPENGINE_MAX_INFLIGHT, else unbounded. -1 forces unbounded.
  long max_inflight = 0;
  // Host-simulated GPUs: when > 0, Device::gpu(i) for i < sim_gpus runs on threads that
  // stand in for streams, so GPU scheduling works on machines without one.
  // Default: DEPENGINE_SIM_GPUS, else 0 (real CUDA devices).
  int sim_gpus = 0;
  // Whether the threaded engine runs a small op (PushOptions::small) on the pushing thread
  // when it finds it ready and nothing else ready or running: 1 yes, -1 no (every op is
  // handed to a worker, as d2l's chapter 13.2 describes an engine). Default:
  // DEPENGINE_INLINE_SMALL_OPS (0 or 1), else yes.
  int inline_small_ops = 0;
};

namespace detail {
// A type-erased operation body; built by Engine::push / push_async.
class OpFunction {
 public:
  virtual ~OpFunction() = default;
  // Synchronous bodies ignore `done`; asynchronous ones receive it.
  virtual void call(const RunContext& ctx, Completion* done) = 0;
};

// How push hands a body to the engine: the engine chooses the storage (inside its op
// record when the body fits, so that a push makes one allocation, not two) and `build`
// constructs the body there straight from the caller's callable (moved from an rvalue,
// copied from an lvalue).
struct BodyBuilder {
  std::size_t size = 0;
  std::size_t align = 0;
  void* callable = nullptr;
  OpFunction* (*build)(void* storage, void* callable) = nullptr;
};

template <class Body, class F>
BodyBuilder body_builder(F&& callable) {
  using Ref = std::remove_reference_t<F>;
  return {sizeof(Body), alignof(Body), const_cast<std::remove_const_t<Ref>*>(&callable),
          [](void* storage, void* c) -> OpFunction* {
            return ::new (storage) Body(std::forward<F>(*static_cast<Ref*>(c)));
          }};
}

template <class F>
class SyncFunction final : public OpFunction {
 public:
  template <class G>
  explicit SyncFunction(G&& g) : f_(std::forward<G>(g)) {}
  void call(const RunContext& ctx, Completion*) override {
    if constexpr (std::invocable<F&, const RunContext&>) {
      f_(ctx);
    } else {
      f_();
    }
  }

 private:
  F f_;
};

template <class F>
class AsyncFunction final : public OpFunction {
 public:
  template <class G>
  explicit AsyncFunction(G&& g) : f_(std::forward<G>(g)) {}
  void call(const RunContext& ctx, Completion* done) override {
    if constexpr (std::invocable<F&, const RunContext&, Completion>) {
      f_(ctx, *done);
    } else {
      f_(*done);
    }
  }

 private:
  F f_;
};

template <class T>
inline constexpr bool is_std_function_v = false;
template <class R, class... A>
inline constexpr bool is_std_function_v<std::function<R(A...)>> = true;

// Rejects callables that can be empty and are (an empty std::function, a null pointer).
template <class F>
void check_not_empty(const F& f, const char* what) {
  if constexpr (is_std_function_v<F> || std::is_pointer_v<F>) {
    if (!f) throw Error(std::string(what) + ": the function is empty");
  }
}
}  // namespace detail

// The engine interface. Two implementations: "naive" runs every operation inline in push
// order (the debugging reference and the serialized side of comparisons); "threaded" runs
// ready operations on oneTBB-backed CPU pools and per-device GPU lanes.
//
// Contract (docs/design.md): results equal those of running the pushes one by one in push
// order; reads of one version of a var run concurrently; a write waits for every earlier
// access of its vars. A failed op marks the vars it writes as failed; ops that read a
// failed var are skipped and pass the failure on; waits rethrow it.
//
// Every member function is thread-safe unless its comment says otherwise.
class Engine {
 public:
  // Makes an engine of the given kind, "naive" or "threaded". Throws Error for an unknown
  // kind or a bad environment value.
  //   auto e = depengine::Engine::create("threaded", {.cpu_threads = 2});
  static std::unique_ptr<Engine> create(std::string_view kind, EngineOptions options = {});

  // The process-wide engine, made on first use: kind from DEPENGINE_TYPE (default
  // "threaded"), options from the environment. It lives until exit, finishing pending work
  // then. Objects with static storage duration constructed after the first call of get()
  // are destroyed before it: ops that use them must be waited for before main returns.
  static Engine& get();

  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Shuts down: refuses pushes from outside the engine's own ops (Error "the engine is
  // shutting down"; running ops may still push, and delete_var is still accepted), waits for
  // every pending op, async body and Completion still running, then stops the GPU lanes and
  // the CPU pool. A call that overlaps the destructor is refused or finished before it
  // returns; one that starts after it returned is undefined, as for any object.
  // Called from inside one of the engine's own ops (an op that deletes its engine, or
  // std::exit inside an op of get()), it cannot wait for that op: it waits until nothing
  // else can progress, returns, and the engine finishes and stops on a thread of its own.
  virtual ~Engine() = default;

  // A new variable with no pending accesses.
  virtual Var new_var() = 0;

  // Pushes a synchronous operation: `fn()` or `fn(const RunContext&)`, done when it
  // returns; a throw fails it. Returns at once (or once back-pressure allows). A var listed
  // twice counts once; a var in both lists is one read-write access. In the writes list,
  // commute(v) and reduce(v) (depengine/var.h) relax the order among consecutive such
  // accesses; commute(v) with a read of v is one commute access, with a write of v a
  // read-write one. All or nothing: when it
  // throws (a null, deleted or foreign var, an unknown device or lane, a shutting-down
  // engine), nothing was pushed.
  //   engine->push([&] { c = a + b; }, {va, vb}, {vc}, {.name = "add"});
  template <class F>
  void push(F&& fn, VarList reads, VarList writes, PushOptions options = {}) {
    using Fn = std::decay_t<F>;
    detail::check_not_empty(fn, "push");
    push_op(detail::body_builder<detail::SyncFunction<Fn>>(std::forward<F>(fn)), false, reads,
            writes, std::move(options));
  }

  // Pushes an asynchronous operation: `fn(Completion done)` or
  // `fn(const RunContext&, Completion done)`; the operation finishes when `done` is called.
  //   engine->push_async([](depengine::Completion done) { start(done); }, {a}, {b});
  template <class F>
  void push_async(F&& fn, VarList reads, VarList writes, PushOptions options = {}) {
    using Fn = std::decay_t<F>;
    detail::check_not_empty(fn, "push_async");
    push_op(detail::body_builder<detail::AsyncFunction<Fn>>(std::forward<F>(fn)), true, reads,
            writes, std::move(options));
  }

  // Blocks until every write to `v` pushed before this call has finished; rethrows the
  // failure `v` holds, if any. Throws Error when called from inside a running operation.
  virtual void wait_to_read(const Var& v) = 0;

  // Blocks until every operation pushed before this call has finished, with the operations
  // those push while they run, and theirs (a push from inside a running op of this engine
  // belongs to that op's epoch, as in MXNet's WaitForAll); ops pushed later from outside
  // them, by any thread, do not hold it. Rethrows the first failure (in push order) since
  // the previous wait_all, then forgets it. Also reports, as a failure of the op concerned, an
  // exception an observer threw and one an async body threw after calling done().
  virtual void wait_all() = 0;

  // Deletes `v`: runs `on_deleted` (if given) once the earlier accesses are done (with none
  // pending, it may run at once on the calling thread; with `.frees_memory_only`, on the
  // thread that finishes the last of them), drops the bookkeeping; later use throws.
  virtual void delete_var(const Var& v, std::function<void()> on_deleted = {},
                          DeleteOptions options = {}) = 0;

  // Runs `fn()` on the calling thread, as usual, and returns the ops it pushed to this
  // engine (not those its ops push, nor other threads') as a Segment that replay() pushes
  // again. Throws Error, after `fn` returns or throws, when `fn` did what a replay cannot
  // repeat: wait_to_read, wait_all or delete_var on this engine (an implicit blocker
  // included; the call itself throws and does nothing), a nested record on this thread; or
  // when called from inside a running op or an observer. Thread-safe; one record at a time
  // per thread.
  //   depengine::Segment seg = e->record([&] { step(x, w, y); });
  template <class F>
  Segment record(F&& fn) {
    return record_region([](void* f) { (*static_cast<std::remove_reference_t<F>*>(f))(); },
                         const_cast<void*>(static_cast<const void*>(&fn)));
  }
  // Pushes the ops of `segment` again, in their order, exactly as if they were pushed at
  // this point (ordering, failures, waits and back-pressure as for push); the bodies are
  // the recorded ones, so a body runs once per replay and two replays of an op that writes
  // nothing may run it concurrently. A segment whose ops all sit on one GPU stream
  // replays as one op launching their work as one (a CUDA graph; Segment::one_stream).
  // Throws Error for a segment not recorded on this engine and, as push does, for a var
  // deleted since (the ops before it are pushed, as they would have been). Thread-safe.
  //   for (int i = 0; i < steps; ++i) e->replay(seg);
  virtual void replay(const Segment& segment) = 0;

  // Sets the hooks that combine the reduce(v) accesses to `v` (depengine/reduction.h). A
  // reduction already under way keeps the hooks it started with. Throws Error for a null,
  // deleted or foreign var, or an empty identity or combine hook.
  //   engine->set_reduction(v, {.identity = make_zero, .combine = add, .target = &total});
  virtual void set_reduction(const Var& v, Reduction reduction) = 0;

  // "naive" or "threaded".
  virtual std::string_view kind() const noexcept = 0;
  virtual int cpu_threads() const noexcept = 0;
  // The back-pressure bound; 0 when unbounded.
  virtual std::size_t max_inflight() const noexcept = 0;
  // Host-simulated GPUs this engine was made with (EngineOptions::sim_gpus, resolved);
  // 0 when Device::gpu(i) means CUDA device i.
  virtual int sim_gpus() const noexcept = 0;
  // Operations pushed and not yet finished.
  virtual std::size_t pending() const noexcept = 0;
  // Most operations pending at once since the engine was made.
  virtual std::size_t peak_pending() const noexcept = 0;

  // Attaches `observer` to every later push (nullptr detaches). Ops pushed before keep
  // reporting to the observer they were pushed under, which is kept alive until they end.
  virtual void set_observer(std::shared_ptr<Observer> observer) = 0;

 protected:
  virtual void push_op(const detail::BodyBuilder& body, bool async, VarList reads,
                       VarList writes, PushOptions&& options) = 0;
  virtual Segment record_region(void (*call)(void*), void* fn) = 0;
};

}  // namespace depengine
