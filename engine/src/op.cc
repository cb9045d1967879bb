#include "op.h"

#include <pthread.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <new>
#include <system_error>
#include <vector>

#include "depengine/running_op.h"
#include "prefetch.h"
#include "record_pool.h"
#include "reduce.h"

namespace depengine::detail {

void* Op::operator new(std::size_t) { return record_pool::allocate(record_pool::Record::op); }
void Op::operator delete(void* p) noexcept {
  record_pool::release(record_pool::Record::op, p);
}

namespace {
std::atomic<std::uint64_t> g_next_engine_id{1};
// Engines with an id below this were made before the latest fork() into this process (0:
// no fork, or none before it). Written only by the child's fork handler, on the one thread
// the child has.
std::atomic<std::uint64_t> g_forked_below{0};

void note_fork_in_child() noexcept {
  g_forked_below.store(g_next_engine_id.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
}

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// Rejects a device or lane that does not name a queue of this engine, before anything is
// registered (a Device is a plain struct: any Kind and id can be written into one).
void check_placement(const PushOptions& o, const char* what) {
  const auto kind = static_cast<unsigned>(o.device.kind);
  if (kind > static_cast<unsigned>(Device::Kind::gpu)) {
    throw Error(std::string(what) + ": unknown device kind " + std::to_string(kind));
  }
  if (o.device.is_cpu() && o.device.id != 0) {
    throw Error(std::string(what) + ": unknown device cpu(" + std::to_string(o.device.id) +
                "); the CPU is Device::cpu()");
  }
  if (o.device.id < 0) {
    throw Error(std::string(what) + ": unknown device " + o.device.str());
  }
  const auto lane = static_cast<unsigned>(o.lane);
  if (lane >= static_cast<unsigned>(kLaneCount)) {
    throw Error(std::string(what) + ": unknown lane " + std::to_string(lane) + " (lanes are 0.." +
                std::to_string(kLaneCount - 1) + ")");
  }
}
}  // namespace

std::uint64_t next_engine_id() {
  const std::uint64_t id = g_next_engine_id.fetch_add(1, std::memory_order_relaxed);
  if (id > kMaxEngineId) [[unlikely]] {
    throw Error("this process has made " + std::to_string(kMaxEngineId) +
                " engines, as many as their vars can tell apart (an engine id is 32 bits)");
  }
  return id;
}

void watch_forks() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (int err = ::pthread_atfork(nullptr, nullptr, note_fork_in_child)) {
      throw std::system_error(err, std::generic_category(), "pthread_atfork");
    }
  });
}

bool made_before_fork(std::uint64_t engine_id) noexcept {
  return engine_id < g_forked_below.load(std::memory_order_relaxed);
}

bool engines_before_fork() noexcept { return made_before_fork(1); }

ObserverScope::ObserverScope() noexcept { in_observer() = true; }
ObserverScope::~ObserverScope() { in_observer() = false; }

std::exception_ptr observer_failure(const char* event, const std::string& op_name) noexcept {
  try {
    return std::make_exception_ptr(Error("Observer::" + std::string(event) +
                                         " threw for operation " + op_name + ": " +
                                         describe(std::current_exception())));
  } catch (...) {
    return std::current_exception();
  }
}

void refuse_in_observer(const char* what) {
  throw Error(std::string(what) +
              " called from inside an Observer callback; observers must not call the engine");
}

void check_not_in_op(const char* what) {
  if (Op* op = current_op()) {
    throw Error(std::string(what) + " called from inside running operation " +
                op->display_name() + "; it would deadlock a worker");
  }
}

OpPtr make_op(OpSink* sink, const BodyBuilder& body, OpKind kind, PushOptions&& options,
              VarList reads, VarList writes, std::uint64_t owner) {
  // The CPU's one queue, checked inline: most pushes name no device.
  const bool plain_cpu = options.device == Device::cpu() &&
                         static_cast<unsigned>(options.lane) < static_cast<unsigned>(kLaneCount);
  if (!plain_cpu) check_placement(options, kind == OpKind::async_body ? "push_async" : "push");
  OpPtr op(new Op(sink, kind, std::move(options)));
  op->set_body(body);
  op->set_accesses(reads, writes, owner);
  return op;
}

OpPtr make_delete_op(OpSink* sink, const Var& v, std::function<void()> on_deleted,
                     std::uint64_t owner) {
  auto fn = [f = std::move(on_deleted)] {
    if (f) f();
  };
  return make_op(sink, body_builder<SyncFunction<decltype(fn)>>(std::move(fn)),
                 OpKind::delete_var, PushOptions{.name = "delete_var"}, {}, {v}, owner);
}

void Op::set_heap_body(const BodyBuilder& body) {
  void* storage = ::operator new(body.size, std::align_val_t(body.align));
  try {
    fn = body.build(storage, body.callable);
  } catch (...) {
    ::operator delete(storage, std::align_val_t(body.align));
    throw;
  }
  heap_body_ = storage;
  heap_body_align_ = body.align;
}

// The record pool gives ops 64-byte aligned memory (record_pool.cc), so these offsets are
// cache-line offsets: see the layout comment in op.h. With another standard library the
// sizes of std::string and std::shared_ptr differ and the offsets with them (a slower
// layout, not a wrong one), so only libstdc++'s are checked.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
void Op::check_layout() noexcept {
#ifdef __GLIBCXX__
  static_assert((offsetof(Op, acc) + offsetof(AccessArray, inline_)) % 64 == 0,
                "Op's inline accesses must start a cache line");
  static_assert(offsetof(Op, body_storage_) % 64 == 0, "Op's inline body must start a cache line");
  static_assert(offsetof(Op, acc) + offsetof(AccessArray, inline_) == 3 * 64,
                "Op's fields before the accesses must fit in lines 0-2");
#endif
}

void Op::prefetch_free_record(const void* record) noexcept {
  const char* const p = static_cast<const char*>(record);
  constexpr std::size_t kAccesses = offsetof(Op, acc) + offsetof(AccessArray, inline_);
  for (std::size_t line = 0; line <= kAccesses; line += 64) prefetch_for_write(p + line);
  prefetch_for_write(p + offsetof(Op, body_storage_));
}
#pragma GCC diagnostic pop

Op::~Op() {
  release_vars();
  if (fn) fn->~OpFunction();
  if (heap_body_) ::operator delete(heap_body_, std::align_val_t(heap_body_align_));
}

std::string Op::display_name() const {
  return opts.name.empty() ? "#" + std::to_string(seq) : "'" + opts.name + "'";
}

std::string Op::call_name() const {
  switch (kind) {
    case OpKind::wait_to_read:
      return "wait_to_read";
    case OpKind::delete_var:
      return "delete_var";
    case OpKind::body:
    case OpKind::async_body:
    case OpKind::reduce_combine:  // "push 'reduce_combine'", as before the kinds
      break;
  }
  const std::string call = is_async() ? "push_async" : "push";
  return opts.name.empty() ? call : call + " '" + opts.name + "'";
}

namespace {
AccessKind write_kind(const Var& v) noexcept {
  switch (v.mode()) {
    case VarMode::commute:
      return AccessKind::commute;
    case VarMode::reduce:
      return AccessKind::reduce;
    case VarMode::plain:
      break;
  }
  return AccessKind::write;
}

// The one access an op makes to a var it lists twice. Throws for reduce(v) beside another
// access to v: a contribution cannot also see or replace the value it contributes to.
AccessKind merge_kinds(AccessKind a, AccessKind b, const VarState* v, const char* what) {
  if (a == b) return a;
  if (a == AccessKind::reduce || b == AccessKind::reduce) {
    throw Error(std::string(what) + ": var #" + std::to_string(v->id) +
                " is listed as reduce() and accessed otherwise in the same op");
  }
  if ((a == AccessKind::commute && b == AccessKind::read) ||
      (a == AccessKind::read && b == AccessKind::commute)) {
    return AccessKind::commute;
  }
  return AccessKind::read_write;
}

// Throws the Error for an access that check_access refused.
[[noreturn, gnu::cold]] void refuse_access(const Var& v, AccessKind k, std::uint64_t owner,
                                           const char* what) {
  check_var(v, owner, what);  // a null var, or one of another engine
  if (k == AccessKind::reduce) {
    throw Error(std::string(what) + ": reduce(var #" + std::to_string(v.id()) +
                ") needs a synchronous CPU op (its private buffer is the running thread's)");
  }
  throw Error(std::string(what) + ": var #" + std::to_string(v.id()) + " is marked " +
              (v.mode() == VarMode::commute ? "commute()" : "reduce()") +
              " in the reads list; commute() and reduce() belong in the writes list");
}

// Throws Error for a var that the op cannot access as `k`: null, another engine's, reduce()
// in an op that cannot reduce, commute() or reduce() in the reads list.
inline void check_access(const Var& v, AccessKind k, std::uint64_t owner, bool reduce_allowed,
                         const char* what) {
  if (!v || v.state()->owner != owner || (k == AccessKind::reduce && !reduce_allowed) ||
      (k == AccessKind::read && v.mode() != VarMode::plain)) [[unlikely]] {
    refuse_access(v, k, owner, what);
  }
}
}  // namespace

void Op::set_accesses(VarList read_list, VarList write_list, std::uint64_t owner) {
  const char* what = is_async() ? "push_async" : "push";
  const bool reduce_allowed = !is_async() && !opts.device.is_gpu();
  const std::size_t total = read_list.size() + write_list.size();
  Access* out = acc.resize(total);
  std::size_t n = 0;
  // Each var checked, then merged into the accesses so far (merge_kinds) by a linear search,
  // which suits the usual handful of vars; long lists are checked, then merged by a sort.
  auto add = [&](VarState* v, AccessKind k) {
    for (std::size_t i = 0; i < n; ++i) {
      if (out[i].var == v) [[unlikely]] {
        out[i].kind = merge_kinds(out[i].kind, k, v, what);
        return;
      }
    }
    out[n++] = make_access(v, this, k);
  };
  constexpr std::size_t kLinear = 16;
  try {
    if (total <= kLinear) {
      // The vars' first lines are read here (the owner check) and written right after, under
      // their locks, by the threaded engine's push; a worker that released an access wrote
      // them last. Asked for with intent to write, each comes over once, and all together.
      for (const Var& v : write_list) __builtin_prefetch(v.state(), 1, 3);
      for (const Var& v : read_list) __builtin_prefetch(v.state(), 1, 3);
      for (const Var& v : write_list) {
        const AccessKind k = write_kind(v);
        check_access(v, k, owner, reduce_allowed, what);
        add(v.state(), k);
      }
      for (const Var& v : read_list) {
        check_access(v, AccessKind::read, owner, reduce_allowed, what);
        add(v.state(), AccessKind::read);
      }
    } else {
      for (const Var& v : write_list) check_access(v, write_kind(v), owner, reduce_allowed, what);
      for (const Var& v : read_list) check_access(v, AccessKind::read, owner, reduce_allowed, what);
      n = merge_sorted(out, read_list, write_list, what);
    }
  } catch (...) {
    acc.shrink(0);  // no reference was taken yet
    throw;
  }
  acc.shrink(n);
  holds_var_refs = sink_ == nullptr || sink_->ops_reference_vars();
  bool commute = false, reduce = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (holds_var_refs) var_add_ref(out[i].var);
    commute |= out[i].kind == AccessKind::commute;
    reduce |= out[i].kind == AccessKind::reduce;
  }
  has_commute = commute;
  has_reduce = reduce;
}

std::size_t Op::merge_sorted(Access* out, VarList read_list, VarList write_list,
                             const char* what) {
  std::size_t n = 0;
  for (const Var& v : write_list) out[n++] = make_access(v.state(), this, write_kind(v));
  for (const Var& v : read_list) out[n++] = make_access(v.state(), this, AccessKind::read);
  std::sort(out, out + n,
            [](const Access& a, const Access& b) { return std::less<>()(a.var, b.var); });
  std::size_t merged_n = 0;
  for (std::size_t i = 0; i < n;) {
    Access merged = out[i];
    std::size_t j = i + 1;
    for (; j < n && out[j].var == merged.var; ++j) {
      merged.kind = merge_kinds(merged.kind, out[j].kind, merged.var, what);
    }
    out[merged_n++] = merged;
    i = j;
  }
  return merged_n;
}

void Op::check_not_deleted() const {
  for (const Access& a : const_cast<Op*>(this)->acc) {
    if (a.var->deleted) {
      throw Error(call_name() + ": var #" + std::to_string(a.var->id) +
                  (kind == OpKind::delete_var ? " was already deleted" : " was deleted"));
    }
  }
}

void Op::release_vars() noexcept {
  if (!holds_var_refs) return;
  holds_var_refs = false;
  for (Access& a : acc) {
    if (a.var) var_release(a.var);
  }
}

Failure Op::upstream_failure() const noexcept {
  Failure earliest;
  for (const Access& a : const_cast<Op*>(this)->acc) {
    if (inherits_failure(a.kind)) earliest.keep_earliest(a.var->failure);
  }
  return earliest;
}

bool Op::write_failures_differ(const Failure& failure) noexcept {
  for (const Access& a : acc) {
    if (sets_failure(a.kind) && a.var->failure.error != failure.error) return true;
    if (merges_failure(a.kind) && a.var->failure.comes_after(failure)) return true;
  }
  return false;
}

void Op::set_write_failures(const Failure& failure) noexcept {
  for (Access& a : acc) {
    Failure& held = a.var->failure;
    // Success over success, the usual case, changes nothing (and copies no exception_ptr).
    const bool changes = sets_failure(a.kind) ? failure || held
                                              : merges_failure(a.kind) && held.comes_after(failure);
    if (changes) held = failure;
  }
}

template <class F>
void Op::observe(const char* event, F&& call) noexcept {
  ObserverScope scope;
  try {
    call(*observer);
  } catch (...) {
    // Contained: the engine's own state is never left half-changed by an observer. The op
    // stops reporting to it (a recorder that missed on_push must not see on_end), and wait_all
    // reports what happened.
    if (!observer_error) {
      std::string name;
      try {
        name = display_name();
      } catch (...) {
      }
      observer_error = observer_failure(event, name);
    }
    drop_observer();
  }
}

void Op::observe_ready_slow() noexcept {
  observe("on_ready", [&](Observer& o) { o.on_ready(seq); });
}
void Op::observe_start_slow(int worker) noexcept {
  observe("on_start", [&](Observer& o) { o.on_start(seq, worker); });
}
void Op::observe_end_slow(bool failed, bool skipped) noexcept {
  observe("on_end", [&](Observer& o) { o.on_end(seq, failed, skipped); });
}

static_assert(static_cast<int>(AccessMode::reduce) == static_cast<int>(AccessKind::reduce) &&
                  static_cast<int>(AccessMode::commute) == static_cast<int>(AccessKind::commute) &&
                  static_cast<int>(AccessMode::read_write) ==
                      static_cast<int>(AccessKind::read_write),
              "observers see an access kind as the AccessMode of the same number");

void Op::observe_push_slow(const std::shared_ptr<Observer>& obs) noexcept {
  if (kind == OpKind::wait_to_read) return;
  observer = obs;
  observed = true;
  observe("on_push", [&](Observer& o) {
    std::vector<VarAccess> accesses;
    accesses.reserve(acc.size());
    for (const Access& a : acc) {
      accesses.push_back({a.var->id, a.version, static_cast<AccessMode>(a.kind)});
    }
    o.on_push(OpInfo{seq, opts.name, opts.device, opts.lane, opts.priority, accesses});
  });
}

void Op::complete(std::exception_ptr error) {
  if (!mark_completed()) {
    throw Error("Completion of operation " + display_name() + " called twice");
  }
  sink_->finish_async(this, std::move(error));
}

void Op::add_completion_ref() noexcept {
  add_ref();
  completion_refs_.fetch_add(1, std::memory_order_relaxed);
}

void Op::release_completion_ref() noexcept {
  if (completion_refs_.fetch_sub(1, std::memory_order_acq_rel) == 1 && mark_completed()) {
    sink_->finish_async(this, std::make_exception_ptr(Error(
                                  "asynchronous operation " + display_name() +
                                  " dropped its Completion without calling it")));
  }
  release();
}

}  // namespace depengine::detail

namespace depengine {
bool in_running_op() noexcept { return detail::current_op() != nullptr; }
}  // namespace depengine
