// The operation record shared by both engines, with its accesses (a var's state is in
// var_state.h). The threaded engine queues accesses in per-var queues (var_queue.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "depengine/engine.h"
#include "var_queue.h"
#include "var_state.h"

// The engine's hot thread-locals (the running op, the observer and recording flags) use the
// initial-exec model: read with one instruction instead of a call to __tls_get_addr on every
// push and run. They are a few bytes, well within the static TLS that glibc keeps for
// libraries loaded by dlopen (the Python extension loads the engine that way).
#define DEPENGINE_HOT_TLS [[gnu::tls_model("initial-exec")]]

namespace depengine::detail {

class Op;
class ReduceGroup;
struct ReduceLinks;
// Defined with ReduceLinks (reduce.cc), so that op.h need not include reduce.h.
struct ReduceLinksDelete {
  void operator()(ReduceLinks* links) const noexcept;
};

// Accesses stored inline for the common small case: up to seven covers every Task Bench
// pattern (stencil: 3 reads + 1 write; nearest, spread: 5 + 1) and the ops of tiled linear
// algebra, so only long var lists pay a heap allocation.
class AccessArray {
 public:
  // Room for n accesses (on an empty array); returns the first.
  Access* resize(std::size_t n) {
    if (n > kInline) [[unlikely]] heap_ = std::make_unique<Access[]>(n);
    size_ = n;
    return begin();
  }
  Access* begin() noexcept { return heap_ ? heap_.get() : inline_; }
  Access* end() noexcept { return begin() + size_; }
  std::size_t size() const noexcept { return size_; }
  // Keeps the first n accesses (n <= size()).
  void shrink(std::size_t n) noexcept { size_ = n; }
  Access& operator[](std::size_t i) noexcept { return begin()[i]; }

 private:
  friend class Op;  // its layout check
  static constexpr std::size_t kInline = 7;
  // Where the accesses are and how many, then the first ones: begin() reads the line the
  // first accesses start on.
  std::unique_ptr<Access[]> heap_;
  std::size_t size_ = 0;
  Access inline_[kInline];
};

// Receives the completion of an asynchronous op.
class OpSink {
 public:
  virtual void finish_async(Op* op, std::exception_ptr error) = 0;
  // Whether the engine's ops hold a reference on each var they access. The threaded
  // engine's do not: a var whose last handle is dropped lives until its queue is idle
  // (var_release), so a push and a finish do not both write the var's reference count.
  bool ops_reference_vars() const noexcept { return ops_reference_vars_; }

 protected:
  explicit OpSink(bool ops_reference_vars) noexcept : ops_reference_vars_(ops_reference_vars) {}
  ~OpSink() = default;

 private:
  const bool ops_reference_vars_;
};

struct Waiter;
struct Epoch;
struct ReplayRun;

// What an op is; the engines' treatment of it follows from this one field. (How its
// accesses are ordered is separate: `replay` for the ops of a fast replay; and what kinds
// of access it makes is summed up in has_commute / has_reduce.)
enum class OpKind : std::uint8_t {
  body,            // a pushed synchronous body
  async_body,      // a pushed asynchronous body, finished by its Completion
  wait_to_read,    // wait_to_read's read of one var: no body; fills its Waiter (threaded)
  delete_var,      // delete_var's write of its var
  reduce_combine,  // combines a reduction into its var (`combines`)
};

class Op final : public CompletionTarget {
 public:
  // From the record pool (record_pool.h): ops are made on the pushing thread and freed on a worker,
  // which a general-purpose allocator handles slowly.
  static void* operator new(std::size_t size);
  static void operator delete(void* p) noexcept;

  Op(OpSink* sink, OpKind op_kind, PushOptions&& o) : kind(op_kind), sink_(sink) {
    // Field by field (a field added to PushOptions fails to compile here): most pushes are
    // unnamed, and moving even an empty string copies its buffer.
    auto& [device, lane, small, priority, name] = o;
    opts.device = device;
    opts.lane = lane;
    opts.priority = priority;
    if (!name.empty()) opts.name = std::move(name);
    opts.small = small;
  }

  bool is_async() const noexcept { return kind == OpKind::async_body; }
  // Counts among the ops in flight and in wait_all's epochs (all but wait_to_read's).
  bool counted() const noexcept { return kind != OpKind::wait_to_read; }

  // Builds the body into the op's own storage when it fits, else on the heap.
  void set_body(const BodyBuilder& body) {
    if (body.size <= kBodyInline && body.align <= alignof(std::max_align_t)) [[likely]] {
      fn = body.build(body_storage_, body.callable);
    } else {
      set_heap_body(body);
    }
  }

  // Fills `acc` from the lists: duplicates merged, a var in both lists read_write (commute
  // with a read stays commute), a reference taken on each var if the engine's ops hold them
  // (OpSink::ops_reference_vars). Throws Error for a null var
  // or one of another engine, commute() or reduce() in the reads list, reduce(v) beside
  // another access to v, and reduce() in an async or GPU op.
  void set_accesses(VarList read_list, VarList write_list, std::uint64_t owner);
  // Throws Error naming the first var that was deleted (call under the push lock).
  void check_not_deleted() const;
  // Gives each access its version, in push order (call under the push lock): a write makes
  // its var's next version, a read sees the current one.
  void stamp_versions() noexcept {
    for (Access& a : acc) {
      a.version = writes(a.kind) ? ++a.var->pushed_version : a.var->pushed_version;
    }
  }
  // Drops the references set_accesses took, if it took them.
  void release_vars() noexcept;

  std::string display_name() const;
  // The call being checked, for errors raised before the op is pushed (it has no number
  // yet): "push", "push 'name'", "push_async", "wait_to_read" or "delete_var".
  std::string call_name() const;

  // The failure with the earliest origin among the vars whose failure this op inherits
  // (reads and read-writes, not commute or reduce accesses), or none.
  Failure upstream_failure() const noexcept;
  // Stores `failure` (empty clears) in every var this op writes or read-writes; adds it to
  // its commute vars' (the earliest origin stays, success changes nothing). Reduce accesses'
  // failures go to their reductions (reduce.h).
  void set_write_failures(const Failure& failure) noexcept;
  // True when set_write_failures(failure) would change some var.
  bool write_failures_differ(const Failure& failure) noexcept;

  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // Marks the op finished; false if it already was (a second completion).
  bool mark_completed() noexcept { return !completed_.exchange(true, std::memory_order_acq_rel); }

  void complete(std::exception_ptr error) override;
  void add_completion_ref() noexcept override;
  void release_completion_ref() noexcept override;

  // The fields are laid out by who touches them. Ops are pushed far ahead of the workers
  // (100,000 at a time in the peers benchmarks), so a worker often finds an op's record in
  // memory, not in a cache, and pays a miss per line. What pushing, running, finishing and
  // destroying a plain op reads or writes fills lines 0-2; the inline accesses start on
  // line 3 (op.cc checks it), two to a line; a body of up to 64 bytes takes one more. An op
  // of three or four accesses touches 6 lines of its record (it was 9).

  // --- Line 0 (after the vtable pointer): read or written for every op.
  OpFunction* fn = nullptr;  // the body; null for wait_to_read's op
  std::uint64_t seq = 0;
  std::atomic<int> wait{0};
  OpKind kind;
  // Threaded engine: the op counts as active (ready, running, or its device work in flight)
  // and must uncount itself when it finishes.
  bool active = false;
  // Has commute accesses (commute.h), and holds their vars while it runs; has reduce ones.
  bool has_commute = false;
  bool has_reduce = false;
  bool commute_taken = false;
  // The accesses hold a reference on their vars (released with the op).
  bool holds_var_refs = false;
  // `observer` (line 2) is set: read here, so that a worker that makes the op ready or runs
  // it does not fetch line 2 only to find no observer.
  bool observed = false;

 private:
  std::atomic<int> refs_{1};
  std::atomic<int> completion_refs_{0};
  std::atomic<bool> completed_{false};
  OpSink* sink_;

 public:
  // Threaded engine: the wait_all epoch the op counts in (a push made by a running op of
  // the same engine counts in that op's epoch).
  Epoch* epoch = nullptr;
  // --- Line 1: the options (the rank reads lane and priority), the fast replay, and what
  // an observer threw.
  PushOptions opts;
  // Threaded engine: the fast replay this op belongs to (its accesses are then not in the
  // var queues: the replay's counters order it), and its index there.
  ReplayRun* replay = nullptr;
  // The first exception an observer threw while reporting this op (see observe()); the
  // engine reports it through wait_all like a failure of the op.
  std::exception_ptr observer_error;
  // --- Line 2: the observer, the fields the destructor looks at, then the accesses' count
  // and heap pointer.
  // The engine's observer when the op was pushed, if any (then `observed`).
  std::shared_ptr<Observer> observer;
  // wait_to_read's rendezvous (OpKind::wait_to_read).
  Waiter* waiter = nullptr;
  // The reductions its reduce accesses contribute to (reduce.h); null when it has none.
  std::unique_ptr<ReduceLinks, ReduceLinksDelete> reductions;

 private:
  void* heap_body_ = nullptr;  // a body that did not fit

 public:
  std::uint32_t replay_index = 0;
  // --- Lines 3-: the accesses (inline from line 3 on).
  AccessArray acc;
  // The next op parked on the same var's commute exclusion, or, for a ready op, the next in
  // the ready queue's stack of ops that did not fit its ring (ReadyFifo::push_overflow).
  Op* next_parked = nullptr;
  // The reduction an OpKind::reduce_combine op combines.
  ReduceGroup* combines = nullptr;
  // Naive engine: the seq of the outermost op whose epoch this one belongs to (its own
  // seq, unless a running op of the engine pushed it).
  std::uint64_t epoch_root = 0;

 private:
  std::size_t heap_body_align_ = 0;  // heap_body_'s alignment
  // Checks at compile time that the inline accesses and the body start lines (op.cc).
  static void check_layout() noexcept;
  // Bodies up to this size (most lambdas: a few pointers or shared_ptrs) live in the op,
  // from the start of a line.
  static constexpr std::size_t kBodyInline = 96;
  alignas(alignof(std::max_align_t)) unsigned char body_storage_[kBodyInline];

 public:
  // Observer events, contained: an observer that throws stops receiving this op's events,
  // and its exception goes to observer_error. None of these throws.
  void observe_push(const std::shared_ptr<Observer>& obs) noexcept {
    if (obs) observe_push_slow(obs);
  }
  void observe_ready() noexcept {
    if (observed) observe_ready_slow();
  }
  void observe_start(int worker) noexcept {
    if (observed) observe_start_slow(worker);
  }
  void observe_end(bool failed, bool skipped) noexcept {
    if (observed) observe_end_slow(failed, skipped);
  }
  // The op reports to its observer no more.
  void drop_observer() noexcept {
    observer.reset();
    observed = false;
  }

  // The engine that pushed the op.
  const OpSink* sink() const noexcept { return sink_; }

  // Asks, with intent to write, for the lines of the free record at `record` that making a
  // plain op writes: the header (lines 0-2), the first accesses and the inline body (the
  // record pool, before handing it out).
  static void prefetch_free_record(const void* record) noexcept;

  // Asks for the lines of the record at `record` that running its op reads, from its header
  // to the start of its inline body, all at once: a worker about to run an op pushed long
  // ago (its record in memory) then waits for them together rather than one after another.
  // An address rather than an op: a hint (VarQueue::first_hint) may name a record freed
  // since, or none, and a prefetch never faults.
  static void prefetch_record(const Op* record) noexcept;

 private:
  // set_accesses' merge of long (checked) lists into `out`, which has room for both, through
  // a sort; returns the number of accesses; throws merge errors.
  std::size_t merge_sorted(Access* out, VarList read_list, VarList write_list,
                           const char* what);
  void set_heap_body(const BodyBuilder& body);
  template <class F>
  void observe(const char* event, F&& call) noexcept;
  void observe_push_slow(const std::shared_ptr<Observer>& obs) noexcept;
  void observe_ready_slow() noexcept;
  void observe_start_slow(int worker) noexcept;
  void observe_end_slow(bool failed, bool skipped) noexcept;

  ~Op();
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
inline void Op::prefetch_record(const Op* record) noexcept {
  const char* line = reinterpret_cast<const char*>(record);
  const char* const end = line + offsetof(Op, body_storage_) + 1;
  __builtin_prefetch(line, 1, 3);  // the header, which the run and release write
  for (line += 64; line < end; line += 64) __builtin_prefetch(line, 0, 3);
}
#pragma GCC diagnostic pop

static_assert(alignof(Op) >= Waiting::kFreeBits,
              "a var queue keeps an access's kind in the low bits of its op's address");

struct OpRelease {
  void operator()(Op* op) const noexcept { op->release(); }
};
using OpPtr = std::unique_ptr<Op, OpRelease>;

// A pushed op: its body built from `body`, its accesses from the lists (set_accesses).
// Throws Error for a device or lane that does not exist (Device::Kind and Lane values out of
// range, a negative GPU, a CPU other than 0).
OpPtr make_op(OpSink* sink, const BodyBuilder& body, OpKind kind, PushOptions&& options,
              VarList reads, VarList writes, std::uint64_t owner);

// The op behind Engine::delete_var: a write of `v` (checked by EngineCore::delete_var) that
// runs `on_deleted` (if any).
OpPtr make_delete_op(OpSink* sink, const Var& v, std::function<void()> on_deleted,
                     std::uint64_t owner);

// The op that the current thread is running (for wait-inside-op and back-pressure).
inline Op*& current_op() noexcept {
  DEPENGINE_HOT_TLS thread_local Op* op = nullptr;
  return op;
}

// Sets current_op for a scope.
class CurrentOpScope {
 public:
  explicit CurrentOpScope(Op* op) noexcept : prev_(current_op()) { current_op() = op; }
  ~CurrentOpScope() { current_op() = prev_; }
  CurrentOpScope(const CurrentOpScope&) = delete;
  CurrentOpScope& operator=(const CurrentOpScope&) = delete;

 private:
  Op* prev_;
};

// Throws Error if called from inside a running operation.
void check_not_in_op(const char* what);

// True while the calling thread is inside an observer's callback (ObserverScope).
inline bool& in_observer() noexcept {
  DEPENGINE_HOT_TLS thread_local bool in = false;
  return in;
}
[[noreturn, gnu::cold]] void refuse_in_observer(const char* what);

// Throws Error if called from inside an observer's callback: it runs under engine locks, so
// pushing or waiting there would deadlock.
inline void check_not_in_observer(const char* what) {
  if (in_observer()) [[unlikely]] refuse_in_observer(what);
}

// Marks the calling thread as inside an observer callback for a scope.
class ObserverScope {
 public:
  ObserverScope() noexcept;
  ~ObserverScope();
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;
};

// Inside a catch block around an observer call: the exception in flight, as an Error naming
// the event and the op (the exception itself if even that cannot be built).
std::exception_ptr observer_failure(const char* event, const std::string& op_name) noexcept;

// A number unique among the engines of the process (never reused), at most kMaxEngineId
// (var_state.h); throws Error once the process has made that many engines.
std::uint64_t next_engine_id();

// fork(): the child process has only the thread that called fork, so an engine made before
// it has no workers there, and its locks may be held by threads that do not exist in the
// child. Such an engine refuses every call in the child (EngineHandle, engine.cc), drops
// no var state (var_release) and is left, not shut down, at exit: its pending ops are the
// parent's. watch_forks() installs the handler that notes each fork in the child (once).
void watch_forks();
// True when engine `id` was made before a fork() into this (child) process.
bool made_before_fork(std::uint64_t engine_id) noexcept;
// True in a child of fork() whose parent had made an engine. Threaded engines share
// oneTBB's worker threads, which do not survive fork: none can run in such a child (a new
// one's tasks would wait for workers that are not there).
bool engines_before_fork() noexcept;


}  // namespace depengine::detail
