#include "op.h"

#include <algorithm>
#include <vector>

namespace depengine::detail {

namespace {
std::atomic<std::uint64_t> g_next_var_id{1};
}

void var_add_ref(VarState* s) noexcept { s->refs.fetch_add(1, std::memory_order_relaxed); }

void var_release(VarState* s) noexcept {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete s;
}

std::uint64_t var_id(const VarState* s) noexcept { return s->id; }

VarState* new_var_state(const void* owner) {
  return new VarState(owner, g_next_var_id.fetch_add(1, std::memory_order_relaxed));
}

void check_var(const Var& v, const void* owner, const char* what) {
  if (!v) throw Error(std::string(what) + ": null Var");
  if (v.state()->owner != owner) {
    throw Error(std::string(what) + ": var #" + std::to_string(v.id()) +
                " belongs to another engine");
  }
}

Op*& current_op() noexcept {
  thread_local Op* op = nullptr;
  return op;
}

void check_not_in_op(const char* what) {
  if (Op* op = current_op()) {
    throw Error(std::string(what) + " called from inside running operation " +
                op->display_name() + "; it would deadlock a worker");
  }
}

std::string Op::display_name() const {
  return opts.name.empty() ? "#" + std::to_string(seq) : "'" + opts.name + "'";
}

void Op::set_accesses(VarList read_list, VarList write_list, const void* owner) {
  const char* what = async ? "push_async" : "push";
  for (const Var& v : write_list) check_var(v, owner, what);
  for (const Var& v : read_list) check_var(v, owner, what);
  acc.resize(read_list.size() + write_list.size());
  std::size_t n = 0;
  for (const Var& v : write_list) acc[n++] = Access{v.state(), this, nullptr, AccessKind::write, 0};
  for (const Var& v : read_list) acc[n++] = Access{v.state(), this, nullptr, AccessKind::read, 0};
  // Merge duplicates: sort by var, then fold runs into one access (any write wins, and a
  // read together with a write makes read_write).
  std::sort(acc.begin(), acc.end(), [](const Access& a, const Access& b) {
    return std::less<>()(a.var, b.var);
  });
  std::size_t out = 0;
  for (std::size_t i = 0; i < n;) {
    Access merged = acc[i];
    bool r = merged.kind == AccessKind::read;
    bool w = writes(merged.kind);
    std::size_t j = i + 1;
    for (; j < n && acc[j].var == merged.var; ++j) {
      r = r || acc[j].kind == AccessKind::read;
      w = w || writes(acc[j].kind);
    }
    merged.kind = w ? (r ? AccessKind::read_write : AccessKind::write) : AccessKind::read;
    acc[out++] = merged;
    i = j;
  }
  acc.shrink(out);
  for (Access& a : acc) var_add_ref(a.var);
}

void Op::check_not_deleted() const {
  for (const Access& a : const_cast<Op*>(this)->acc) {
    if (a.var->deleted) {
      throw Error(std::string(async ? "push_async" : "push") + " " + display_name() +
                  ": var #" + std::to_string(a.var->id) + " was deleted");
    }
  }
}

void Op::release_vars() noexcept {
  for (Access& a : acc) {
    if (a.var) var_release(a.var);
    a.var = nullptr;
  }
}

Failure Op::upstream_failure() const noexcept {
  Failure earliest;
  for (const Access& a : const_cast<Op*>(this)->acc) {
    const Failure& f = a.var->failure;
    if (reads(a.kind) && f && (!earliest || f.origin < earliest.origin)) earliest = f;
  }
  return earliest;
}

void Op::set_write_failures(const Failure& failure) noexcept {
  for (Access& a : acc) {
    if (writes(a.kind)) a.var->failure = failure;
  }
}

void Op::observe_push(const std::shared_ptr<Observer>& obs) {
  if (!obs || waiter) return;
  observer = obs;
  std::vector<VarAccess> accesses;
  accesses.reserve(acc.size());
  for (const Access& a : acc) {
    const AccessMode mode = a.kind == AccessKind::read    ? AccessMode::read
                            : a.kind == AccessKind::write ? AccessMode::write
                                                          : AccessMode::read_write;
    accesses.push_back({a.var->id, a.version, mode});
  }
  observer->on_push(OpInfo{seq, opts.name, opts.device, opts.lane, opts.priority, accesses});
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
