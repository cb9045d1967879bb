// depengine/dist.h — the push/wait programming model across MPI ranks (sequential task flow,
// as StarPU-MPI): every rank runs the same program and pushes the same ops; each var has an
// owner rank; an op runs on the owner of what it writes; the values it reads from other
// ranks arrive as engine ops (a send on the holder, a receive into a replica cached per
// version), so communication overlaps computation by the same dependency rules.
//
//   namespace dd = depengine::dist;
//   dd::Context ctx(&argc, &argv);
//   dd::DistVar a = ctx.new_var(n * sizeof(double), /*owner=*/0);
//   dd::DistVar b = ctx.new_var(n * sizeof(double), /*owner=*/1);
//   ctx.push([](dd::Args x) { x.write<double>(0)[0] = 1; }, {}, {a}, {.name = "init"});
//   ctx.push([](dd::Args x) { x.write<double>(0)[0] = 2 * x.read<double>(0)[0]; },
//            {a}, {b}, {.name = "twice"});          // runs on rank 1; a travels 0 -> 1
//   std::vector<std::byte> v = ctx.get(b);         // on every rank
//
// Threads: one thread of the program drives a Context (push, new_var, wait_all and get are
// called in the same order on every rank, as the model requires); ops run on the rank's
// engine workers, MPI runs on the context's communication thread. An op runs on one rank
// only, so from inside an op every Context member but rank, size and stats throws Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "depengine/error.h"

namespace depengine {
class Observer;
class Profiler;
}  // namespace depengine

namespace depengine::dist {

class Context;

namespace detail {
struct Slot;
struct ContextState;
}  // namespace detail

// A distributed var: a buffer of a fixed number of bytes owned by one rank. A cheap handle
// (an index into its context); copyable. A default-constructed DistVar is null and rejected.
// Named apart from the engine's depengine::Var (as DistVarList and DistPushOptions from
// VarList and PushOptions), so code that uses both namespaces sees no shadowing.
class DistVar {
 public:
  DistVar() noexcept = default;
  explicit operator bool() const noexcept { return ctx_ != 0; }
  // The index of the var in its context (the same on every rank).
  std::uint64_t id() const noexcept { return id_; }
  friend bool operator==(const DistVar&, const DistVar&) noexcept = default;

 private:
  friend class Context;
  friend struct detail::ContextState;
  DistVar(std::uint64_t ctx, std::uint64_t id) noexcept : ctx_(ctx), id_(id) {}
  std::uint64_t ctx_ = 0;  // the context's unique number; 0 for null
  std::uint64_t id_ = 0;
};

// What an op's function sees: the local buffers of its reads and writes, in the order
// given to push (duplicates kept at their positions). A var in both lists is one
// read-write access: write<T>(i) then holds its current value. A write-only access may
// start from garbage.
class Args {
 public:
  template <class T>
  const T* read(std::size_t i) const {
    return reinterpret_cast<const T*>(buffer(reads_, i, "read"));
  }
  template <class T>
  T* write(std::size_t i) const {
    return reinterpret_cast<T*>(buffer(writes_, i, "write"));
  }
  // Bytes of reads[i]; write_size(i) of writes[i].
  std::size_t size(std::size_t i) const { return bytes(reads_, i, "size"); }
  std::size_t read_size(std::size_t i) const { return bytes(reads_, i, "read_size"); }
  std::size_t write_size(std::size_t i) const { return bytes(writes_, i, "write_size"); }
  std::size_t reads() const noexcept { return reads_.size(); }
  std::size_t writes() const noexcept { return writes_.size(); }
  // The rank running the op.
  int rank() const noexcept { return rank_; }

  Args(std::span<detail::Slot* const> reads, std::span<detail::Slot* const> writes,
       int rank) noexcept
      : reads_(reads), writes_(writes), rank_(rank) {}

 private:
  static std::byte* buffer(std::span<detail::Slot* const> s, std::size_t i, const char* what);
  static std::size_t bytes(std::span<detail::Slot* const> s, std::size_t i, const char* what);
  std::span<detail::Slot* const> reads_, writes_;
  int rank_;
};

using DistVarList = std::initializer_list<DistVar>;

struct DistPushOptions {
  // Shown in errors, profiles and graphs.
  std::string name{};
  // The rank that runs the op; -1: the owner of writes[0] (rank 0 when it writes nothing).
  int on_rank = -1;
  int priority = 0;
};

struct ContextOptions {
  // The engine each rank runs its ops on: "threaded" (default) or "naive".
  std::string engine = "threaded";
  int cpu_threads = 0;  // 0: DEPENGINE_CPU_THREADS, else the number of cores
  // Injected delay before each message is handed to MPI, in microseconds (a stand-in for a
  // slower network), at most 10 s. -1: DEPENGINE_DIST_LATENCY_US, else 0.
  long latency_us = -1;
};

// Transfers and collectives this rank made so far.
struct CommStats {
  std::uint64_t messages_sent = 0;  // value messages (a poisoned value adds its text)
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t collectives = 0;
};

// One distributed program's context: MPI, this rank's engine and communication thread.
class Context {
 public:
  // Initialises MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED: every MPI call after it comes
  // from the communication thread, one at a time) or adopts an MPI the program or another
  // Context initialised with at least MPI_THREAD_SERIALIZED (the program finalises its own;
  // one a Context initialised is finalised when the last Context goes). Collective.
  // Throws Error when MPI cannot be initialised at a level that suffices, or was finalized
  // already (MPI cannot start twice in one process), or for options outside their ranges.
  Context(int* argc, char*** argv, ContextOptions options = {});
  explicit Context(ContextOptions options = {}) : Context(nullptr, nullptr, std::move(options)) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  // Collective: finishes every op pushed (failures are dropped; call wait_all to see them),
  // stops the communication thread, and finalises MPI when a Context initialised it and no
  // other Context is left. A program that calls MPI_Finalize while the Context lives has
  // this done inside MPI_Finalize; the Context's members (but rank, size, owner and stats)
  // then throw Error, and its destructor does nothing.
  ~Context();

  int rank() const noexcept;
  int size() const noexcept;

  // A var of `bytes` bytes owned by `owner` (0..size()-1), zero-filled on its owner.
  // Every rank must make the same vars in the same order. Throws Error for a bad owner.
  DistVar new_var(std::size_t bytes, int owner);
  // The owner of `v`. Throws Error for a null or foreign var.
  int owner(const DistVar& v) const;

  // Pushes `fn(Args)`, to run on the owner of writes[0] (or options.on_rank) once its
  // inputs are there; values held elsewhere are sent there, and results written on a rank
  // that does not own them go back to their owner. Returns at once. Every rank must push
  // the same ops in the same order (checked: a hash of (name, reads, writes, rank) is
  // compared at every wait_all and get, and each message names the value it carries).
  // Throws Error for a null or foreign var, an on_rank outside 0..size()-1, an empty
  // function, or a context made unusable by diverging ranks.
  void push(std::function<void(Args)> fn, DistVarList reads, DistVarList writes,
            DistPushOptions options = {});
  void push(std::function<void(Args)> fn, const std::vector<DistVar>& reads,
            const std::vector<DistVar>& writes, DistPushOptions options = {});

  // Collective: returns once every op pushed before it has finished on every rank.
  // Rethrows, on every rank, the first failure (in push order) since the previous wait_all,
  // as Error("op 'NAME' (#SEQ) failed on rank R: ORIGINAL MESSAGE"). Throws Error when the
  // ranks pushed different op sequences (or called different collectives).
  void wait_all();

  // Collective blocker: `v`'s current value, on every rank. Rethrows `v`'s failure on every
  // rank when it holds one.
  std::vector<std::byte> get(const DistVar& v);

  // Observer (GraphRecorder, Profiler, ObserverFanout) on this rank's engine, for the ops
  // pushed after: user ops under their names, transfers as "send v3@2>1" / "recv v3@2<0".
  void set_observer(std::shared_ptr<Observer> observer);

  // Collective: writes one Chrome trace of every rank (one process per rank, flow arrows from
  // each send to its receive) to `path` on rank 0, from the per-rank Profiler given
  // (attached with set_observer). Throws Error, on every rank, when the file cannot be
  // written.
  void write_trace(const std::string& path, const Profiler& profiler);

  // This rank's counts so far. Thread-safe.
  CommStats stats() const;
  // Collective: every rank's counts, indexed by rank, on every rank.
  std::vector<CommStats> gather_stats();

 private:
  std::unique_ptr<detail::ContextState> s_;
};

}  // namespace depengine::dist
