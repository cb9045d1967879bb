// context.cc — dist::Context: MPI set-up, pushes (owner computes, transfers inferred from the
// declared reads and writes), and the collectives wait_all and get.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

#include "depengine/env.h"
#include "state.h"

namespace depengine::dist {
namespace detail {
namespace {

std::atomic<std::uint64_t> next_uid{1};

// What a rank brings to the check that opens every collective.
struct Check {
  std::uint64_t kind, seq, hash, var;
};

const char* kind_name(std::uint64_t k) {
  return k == k_wait_all ? "wait_all"
         : k == k_get   ? "get"
         : k == k_close ? "the context's destructor"
         : k == k_trace ? "write_trace"
                        : "gather_stats";
}

// The name of the dist op running on this thread, null outside one.
thread_local const std::string* t_running_op = nullptr;

// Sets t_running_op while an op's function runs (restored when it throws).
class RunningOp {
 public:
  explicit RunningOp(const std::string* name) noexcept : saved_(t_running_op) {
    t_running_op = name;
  }
  ~RunningOp() { t_running_op = saved_; }
  RunningOp(const RunningOp&) = delete;
  RunningOp& operator=(const RunningOp&) = delete;

 private:
  const std::string* saved_;
};

}  // namespace

// An op runs on one rank only, on an engine worker: a push, new_var or collective made from
// it would be seen by that rank alone (the ranks diverge, or wait for each other forever)
// and would race with the program's thread, which drives the context.
void refuse_inside_op(const char* what) {
  if (t_running_op)
    throw Error(std::string("dist::") + what + ": called from inside op '" + *t_running_op +
                "'; an op may only use its Args (the program's thread makes every " +
                "Context call, the same ones on every rank)");
}

void ContextState::record_failure(std::uint64_t op_seq, const std::string& msg) {
  std::lock_guard lk(fail_mu);
  if (op_seq < fail_seq) {
    fail_seq = op_seq;
    fail_msg = msg;
  }
}

VarRec& ContextState::rec(const DistVar& v, const char* what) {
  return const_cast<VarRec&>(std::as_const(*this).rec(v, what));
}

const VarRec& ContextState::rec(const DistVar& v, const char* what) const {
  if (!v) throw Error(std::string("dist::") + what + ": a null var");
  if (v.ctx_ != uid || v.id_ >= vars.size())
    throw Error(std::string("dist::") + what + ": var " + std::to_string(v.id_) +
                " belongs to another context");
  return vars[v.id_];
}

Slot& ContextState::local_slot(VarRec& r) {
  if (!r.slot) {
    r.slot = std::make_shared<Slot>();
    r.slot->ev = engine->new_var();
    r.slot->buf.resize(r.bytes);
  }
  return *r.slot;
}

void ContextState::mix(std::uint64_t x) {
  for (int i = 0; i < 8; ++i) {
    hash ^= (x >> (8 * i)) & 0xff;
    hash *= 1099511628211ull;
  }
}

void ContextState::mix(const std::string& s) {
  mix(s.size());
  for (unsigned char c : s) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
}

// Opens every collective: all ranks must be at the same collective after the same pushes.
// Diverged ranks would wait forever for each other's transfers, so their outstanding
// transfers are cancelled and the context refuses further use.
void check_collective(ContextState& s, std::uint64_t kind, std::uint64_t var) {
  Check mine{kind, s.seq, s.hash, var};
  std::vector<Check> all(static_cast<std::size_t>(s.size));
  s.collectives.fetch_add(1, std::memory_order_relaxed);
  s.comm_thread->call_blocking(
      {[&](MPI_Request* req) {
         return MPI_Iallgather(&mine, sizeof(Check), MPI_BYTE, all.data(), sizeof(Check),
                               MPI_BYTE, s.comm, req);
       },
       [](int err, const MPI_Status&) {
         if (err != MPI_SUCCESS) throw Error("dist: MPI_Iallgather failed");
       },
       {}});
  for (int r = 0; r < s.size; ++r) {
    const Check& c = all[static_cast<std::size_t>(r)];
    if (c.kind == mine.kind && c.seq == mine.seq && c.hash == mine.hash && c.var == mine.var)
      continue;
    s.broken = true;
    s.comm_thread->cancel_all();
    throw Error("dist: ranks pushed different op sequences: rank " + std::to_string(s.rank) +
                " reached " + kind_name(mine.kind) + " after " + std::to_string(mine.seq) +
                " ops (hash " + std::to_string(mine.hash) + "), rank " + std::to_string(r) +
                " reached " + kind_name(c.kind) + " after " + std::to_string(c.seq) +
                " ops (hash " + std::to_string(c.hash) + ")");
  }
}

namespace {

// MPI starts once per process and cannot start again after MPI_Finalize. The contexts of a
// process share it: the one that initialised it must not finalise it while another context
// still uses it, so the last context to go does. A program that finalises MPI itself while
// contexts live (a Context in main's scope, MPI_Finalize at the end of main) has them closed
// inside MPI_Finalize, which deletes MPI_COMM_SELF's attributes first, while MPI still works:
// their destructors then make no MPI call (one after MPI_Finalize aborts the job).
// Guarded by mpi_mutex(), which MPI_Finalize must not be called under (it takes it).
std::vector<ContextState*> live;
bool mpi_ours = false;  // a context initialised MPI (else the program did, and finalises it)
int finalize_key = MPI_KEYVAL_INVALID;

// What the destructor does: the collective close, every op finished, the threads stopped.
void close_context(ContextState& s) {
  if (!s.broken) {
    try {
      check_collective(s, k_close, 0);
    } catch (...) {
    }
  }
  try {
    s.engine->wait_all();
  } catch (...) {
  }
  s.engine.reset();
  s.comm_thread.reset();
  std::lock_guard mpi(mpi_mutex());
  MPI_Comm_free(&s.comm);
}

// MPI_COMM_SELF's attribute delete callback: MPI_Finalize closes the contexts still alive,
// newest first, as their destructors would.
int close_at_finalize(MPI_Comm, int, void*, void*) {
  std::vector<ContextState*> open;
  {
    std::lock_guard mpi(mpi_mutex());
    open.swap(live);
  }
  for (auto it = open.rbegin(); it != open.rend(); ++it) {
    close_context(**it);
    (*it)->closed = true;
  }
  return MPI_SUCCESS;
}

// Under mpi_mutex(), once a context left `live` (or failed to start): whether the caller is
// to finalise MPI, after unlocking.
bool last_out() {
  if (!live.empty() || !mpi_ours) return false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  return !finalized;
}

}  // namespace

void ContextState::check_usable(const char* what) const {
  if (closed)
    throw Error(std::string("dist::") + what +
                ": MPI_Finalize closed the context (the program finalised MPI while the "
                "context was alive; destroy the Context before MPI_Finalize)");
  if (broken)
    throw Error(std::string("dist::") + what + ": the context is unusable (ranks diverged)");
}

void bcast(ContextState& s, void* data, std::size_t bytes, int root) {
  s.collectives.fetch_add(1, std::memory_order_relaxed);
  s.comm_thread->call_blocking(
      {[&](MPI_Request* req) {
         return MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, s.comm, req);
       },
       [](int err, const MPI_Status&) {
         if (err != MPI_SUCCESS) throw Error("dist: MPI_Ibcast failed");
       },
       {}});
}

// Sends `text` (possibly empty) from `root` to every rank.
std::string bcast_text(ContextState& s, std::string text, int root) {
  std::uint64_t len = text.size();
  bcast(s, &len, sizeof len, root);
  text.resize(len);
  if (len) bcast(s, text.data(), len, root);
  return text;
}

}  // namespace detail

using detail::ContextState;

std::byte* Args::buffer(std::span<detail::Slot* const> s, std::size_t i, const char* what) {
  if (i >= s.size())
    throw Error(std::string("dist::Args::") + what + "(" + std::to_string(i) +
                "): the op has only " + std::to_string(s.size()));
  return s[i]->buf.data();
}

std::size_t Args::bytes(std::span<detail::Slot* const> s, std::size_t i, const char* what) {
  if (i >= s.size())
    throw Error(std::string("dist::Args::") + what + "(" + std::to_string(i) +
                "): the op has only " + std::to_string(s.size()));
  return s[i]->buf.size();
}

Context::Context(int* argc, char*** argv, ContextOptions options)
    : s_(std::make_unique<ContextState>()) {
  ContextState& s = *s_;
  s.uid = detail::next_uid.fetch_add(1);
  // Bad settings are reported before MPI starts. The bound is the environment variable's:
  // a delay beyond it would overflow the steady clock's time points.
  if (options.latency_us < -1 || options.latency_us > 10'000'000)
    throw Error("dist::Context: latency_us " + std::to_string(options.latency_us) +
                " is outside 0..10000000 (or -1: DEPENGINE_DIST_LATENCY_US, else 0)");
  s.latency_us = options.latency_us >= 0
                     ? options.latency_us
                     : env_long("DEPENGINE_DIST_LATENCY_US", 0, 10'000'000, 0);
  std::unique_lock mpi(detail::mpi_mutex());  // another context's comm thread may be running
  // Any MPI call but these few after MPI_Finalize aborts the job.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw Error("dist::Context: MPI is already finalized (by the program, or by the last "
                "Context when a Context initialised it), and it cannot start twice in one "
                "process: keep a Context, or the program's own MPI_Init, for the program's life");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw Error("dist::Context: MPI_Init_thread failed");
    detail::mpi_ours = true;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    const bool finalize = detail::last_out();
    mpi.unlock();
    if (finalize) MPI_Finalize();
    throw Error("dist::Context: MPI gives thread level " + std::to_string(provided) +
                "; the communication thread needs MPI_THREAD_SERIALIZED or more");
  }
  if (detail::finalize_key == MPI_KEYVAL_INVALID) {
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, detail::close_at_finalize,
                           &detail::finalize_key, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, detail::finalize_key, nullptr);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &s.comm);
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(s.comm, &s.rank);
  MPI_Comm_size(s.comm, &s.size);
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(s.comm, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) s.tag_ub = *ub;
  mpi.unlock();
  s.sent_to.assign(static_cast<std::size_t>(s.size), 0);
  s.received_from.assign(static_cast<std::size_t>(s.size), 0);
  try {
    s.engine = Engine::create(options.engine, {.cpu_threads = options.cpu_threads});
  } catch (...) {
    std::unique_lock again(detail::mpi_mutex());
    MPI_Comm_free(&s.comm);
    const bool finalize = detail::last_out();
    again.unlock();
    if (finalize) MPI_Finalize();
    throw;
  }
  s.comm_thread = std::make_unique<detail::Comm>(s.comm);
  std::lock_guard mpi_again(detail::mpi_mutex());
  detail::live.push_back(&s);
}

Context::~Context() {
  ContextState& s = *s_;
  {
    std::lock_guard mpi(detail::mpi_mutex());
    auto it = std::find(detail::live.begin(), detail::live.end(), &s);
    if (it == detail::live.end()) return;  // closed by MPI_Finalize
    detail::live.erase(it);
  }
  detail::close_context(s);
  std::unique_lock mpi(detail::mpi_mutex());
  const bool finalize = detail::last_out();
  mpi.unlock();
  if (finalize) MPI_Finalize();
}

int Context::rank() const noexcept { return s_->rank; }
int Context::size() const noexcept { return s_->size; }

DistVar Context::new_var(std::size_t bytes, int owner) {
  detail::refuse_inside_op("new_var");
  ContextState& s = *s_;
  s.check_usable("new_var");
  if (owner < 0 || owner >= s.size)
    throw Error("dist::new_var: owner " + std::to_string(owner) + " is outside 0.." +
                std::to_string(s.size - 1));
  if (bytes > static_cast<std::size_t>(INT32_MAX) - sizeof(detail::Header))
    throw Error("dist::new_var: " + std::to_string(bytes) + " bytes is more than one MPI message holds");
  detail::VarRec r;
  r.bytes = bytes;
  r.owner = owner;
  r.holds.assign(static_cast<std::size_t>(s.size), 0);
  r.holds[static_cast<std::size_t>(owner)] = 1;
  s.vars.push_back(std::move(r));
  if (owner == s.rank) s.local_slot(s.vars.back());
  s.mix(0xfeedull);
  s.mix(bytes);
  s.mix(static_cast<std::uint64_t>(owner));
  return DistVar(s.uid, s.vars.size() - 1);
}

int Context::owner(const DistVar& v) const {
  detail::refuse_inside_op("owner");
  return s_->rec(v, "owner").owner;
}

void Context::push(std::function<void(Args)> fn, DistVarList reads, DistVarList writes,
                   DistPushOptions options) {
  push(std::move(fn), std::vector<DistVar>(reads), std::vector<DistVar>(writes),
       std::move(options));
}

void Context::push(std::function<void(Args)> fn, const std::vector<DistVar>& reads,
                   const std::vector<DistVar>& writes, DistPushOptions options) {
  detail::refuse_inside_op("push");
  ContextState& s = *s_;
  s.check_usable("push");
  if (!fn) throw Error("dist::push: the function is empty");
  for (const DistVar& v : reads) s.rec(v, "push");
  for (const DistVar& v : writes) s.rec(v, "push");
  if (options.on_rank < -1 || options.on_rank >= s.size)
    throw Error("dist::push: on_rank " + std::to_string(options.on_rank) + " is outside 0.." +
                std::to_string(s.size - 1));
  const int exec = options.on_rank >= 0   ? options.on_rank
                   : !writes.empty()      ? s.vars[writes[0].id()].owner
                   : !reads.empty()       ? s.vars[reads[0].id()].owner
                                          : 0;
  const std::uint64_t seq = ++s.seq;
  s.mix(0xabcdull);
  s.mix(options.name);
  s.mix(static_cast<std::uint64_t>(exec));
  for (const DistVar& v : reads) s.mix(v.id());
  s.mix(0xffffull);
  for (const DistVar& v : writes) s.mix(v.id());

  // Distinct vars, in first-seen order.
  std::vector<std::uint64_t> rset, wset;
  for (const DistVar& v : reads)
    if (std::find(rset.begin(), rset.end(), v.id()) == rset.end()) rset.push_back(v.id());
  for (const DistVar& v : writes)
    if (std::find(wset.begin(), wset.end(), v.id()) == wset.end()) wset.push_back(v.id());

  // Values read where they are not: fetched from the owner (who always holds the current
  // version: a result written elsewhere goes back to it at once).
  for (std::uint64_t id : rset) {
    detail::VarRec& r = s.vars[id];
    if (r.holds[static_cast<std::size_t>(exec)]) continue;
    s.transfer(id, r.owner, exec, seq);
    r.holds[static_cast<std::size_t>(exec)] = 1;
  }
  if (s.rank == exec) {
    std::vector<detail::Slot*> rslots, wslots;
    std::vector<depengine::Var> evr, evw;
    for (const DistVar& v : reads) rslots.push_back(&s.local_slot(s.vars[v.id()]));
    for (const DistVar& v : writes) wslots.push_back(&s.local_slot(s.vars[v.id()]));
    for (std::uint64_t id : rset) evr.push_back(s.vars[id].slot->ev);
    for (std::uint64_t id : wset) evw.push_back(s.vars[id].slot->ev);
    // Slots live as long as the context; the engine finishes before they go.
    ContextState* sp = &s;
    s.engine->push(
        [sp, fn = std::move(fn), rslots = std::move(rslots), wslots = std::move(wslots),
         name = options.name, seq]() {
          std::shared_ptr<const std::string> poison;
          for (detail::Slot* r : rslots)
            if (r->poison) {
              poison = r->poison;
              break;
            }
          if (!poison) {
            try {
              detail::RunningOp running(&name);
              fn(Args(rslots, wslots, sp->rank));
            } catch (const std::exception& e) {
              poison = std::make_shared<const std::string>(
                  "op '" + name + "' (#" + std::to_string(seq) + ") failed on rank " +
                  std::to_string(sp->rank) + ": " + e.what());
            } catch (...) {
              poison = std::make_shared<const std::string>(
                  "op '" + name + "' (#" + std::to_string(seq) + ") failed on rank " +
                  std::to_string(sp->rank) + ": an exception of unknown type");
            }
            if (poison) sp->record_failure(seq, *poison);
          }
          for (detail::Slot* w : wslots) w->poison = poison;
        },
        evr, evw, {.priority = options.priority, .name = options.name});
  }
  for (std::uint64_t id : wset) {
    detail::VarRec& r = s.vars[id];
    ++r.version;
    std::fill(r.holds.begin(), r.holds.end(), 0);
    r.holds[static_cast<std::size_t>(exec)] = 1;
    if (exec != r.owner) {
      s.transfer(id, exec, r.owner, seq);
      r.holds[static_cast<std::size_t>(r.owner)] = 1;
    }
  }
}

void Context::wait_all() {
  detail::refuse_inside_op("wait_all");
  ContextState& s = *s_;
  s.check_usable("wait_all");
  detail::check_collective(s, detail::k_wait_all, 0);
  try {
    s.engine->wait_all();
  } catch (const std::exception& e) {
    s.record_failure(0, std::string("engine failure on rank ") + std::to_string(s.rank) + ": " + e.what());
  }
  struct First {
    std::uint64_t seq;
    std::uint64_t rank;
  } mine{}, first{};
  {
    std::lock_guard lk(s.fail_mu);
    mine = {s.fail_seq, static_cast<std::uint64_t>(s.rank)};
  }
  std::vector<First> all(static_cast<std::size_t>(s.size));
  s.collectives.fetch_add(1, std::memory_order_relaxed);
  s.comm_thread->call_blocking(
      {[&](MPI_Request* req) {
         return MPI_Iallgather(&mine, sizeof(First), MPI_BYTE, all.data(), sizeof(First),
                               MPI_BYTE, s.comm, req);
       },
       [](int err, const MPI_Status&) {
         if (err != MPI_SUCCESS) throw Error("dist: MPI_Iallgather failed");
       },
       {}});
  first = all[0];
  for (const First& f : all)
    if (f.seq < first.seq) first = f;
  if (first.seq == UINT64_MAX) return;
  std::string text;
  {
    std::lock_guard lk(s.fail_mu);
    if (s.rank == static_cast<int>(first.rank)) text = s.fail_msg;
    s.fail_seq = UINT64_MAX;
    s.fail_msg.clear();
  }
  throw Error(detail::bcast_text(s, std::move(text), static_cast<int>(first.rank)));
}

std::vector<std::byte> Context::get(const DistVar& v) {
  detail::refuse_inside_op("get");
  ContextState& s = *s_;
  s.check_usable("get");
  detail::VarRec& r = s.rec(v, "get");
  detail::check_collective(s, detail::k_get, v.id());
  std::vector<std::byte> out(r.bytes);
  std::string poison;
  if (s.rank == r.owner) {
    s.engine->wait_to_read(r.slot->ev);
    out = r.slot->buf;
    if (r.slot->poison) poison = *r.slot->poison;
  }
  poison = detail::bcast_text(s, std::move(poison), r.owner);
  if (!poison.empty()) throw Error(poison);
  if (!out.empty()) detail::bcast(s, out.data(), out.size(), r.owner);
  return out;
}

void Context::set_observer(std::shared_ptr<Observer> observer) {
  detail::refuse_inside_op("set_observer");
  s_->check_usable("set_observer");
  s_->observer_since_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  s_->engine->set_observer(std::move(observer));
}

CommStats Context::stats() const {
  return {s_->messages_sent.load(), s_->bytes_sent.load(), s_->messages_received.load(),
          s_->collectives.load()};
}

std::vector<CommStats> Context::gather_stats() {
  detail::refuse_inside_op("gather_stats");
  ContextState& s = *s_;
  s.check_usable("gather_stats");
  detail::check_collective(s, detail::k_stats, 0);
  CommStats mine = stats();
  std::vector<CommStats> all(static_cast<std::size_t>(s.size));
  s.comm_thread->call_blocking(
      {[&](MPI_Request* req) {
         return MPI_Iallgather(&mine, sizeof(CommStats), MPI_BYTE, all.data(), sizeof(CommStats),
                               MPI_BYTE, s.comm, req);
       },
       [](int err, const MPI_Status&) {
         if (err != MPI_SUCCESS) throw Error("dist: MPI_Iallgather failed");
       },
       {}});
  return all;
}

}  // namespace depengine::dist
