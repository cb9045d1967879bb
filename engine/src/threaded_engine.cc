// The threaded engine: an op's life from push to retirement. Each var keeps a FIFO of
// waiting accesses (var_queue.h); an op becomes ready when every one of its accesses is
// granted (reads of one version together, writes alone), and is dispatched to the CPU
// scheduler (scheduler.h) or to its GPU lane (device_dispatch.h). Finishing an op releases
// its accesses, which grants the next ones; the finishing CPU worker offers one newly ready
// op to the scheduler as its continuation. This file composes the parts: the in-flight
// accounting, epochs and shutdown stage (accounting.h), the CPU scheduler, the GPU launch
// (gpu_launch.h: a GPU op finishes for the var queues once its work is on its stream, and
// retires when that work completes), the fast replay of recorded segments (replay_run.h: one
// access per var in the queues, the segment's ops released among themselves by counters),
// commute exclusion (commute.h) and reductions (reduce.h).
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "accounting.h"
#include "commute.h"
#include "device_dispatch.h"
#include "gpu_launch.h"
#include "engine_core.h"
#include "engine_options.h"
#include "invariant.h"
#include "notifier.h"
#include "op.h"
#include "ready_list.h"
#include "reduce.h"
#include "replay_run.h"
#include "scheduler.h"
#include "spin_lock.h"

namespace depengine::detail {

// wait_to_read's rendezvous: the internal read op fills it, sets `done` and notifies the
// engine's waits.
struct Waiter {
  std::exception_ptr failure;
  std::atomic<bool> done{false};
};

namespace {

constexpr std::uint64_t kActive = Accounting::kActive;

class ThreadedCore final : public EngineCore, public CpuRunner, public GpuLaunchHost {
 public:
  explicit ThreadedCore(const ResolvedOptions& o)
      : EngineCore(o, /*ops_reference_vars=*/false),
        counts_(o.max_inflight),
        devices_(o.sim_gpus,
                 [this](Op* op, GpuLane& lane) { launch_gpu_op(op, lane, devices_, *this); },
                 [this](Op* op) { redispatch(op); }) {
    sched_.emplace(o.cpu_threads, *this);
  }

  ~ThreadedCore() override { shutdown(); }

  void wait_to_read(const Var& v) override {
    check_not_in_op("wait_to_read");
    check_not_in_observer("wait_to_read");
    check_var(v, id(), "wait_to_read");
    auto caller = counts_.caller();
    Waiter w;
    OpPtr op(new Op(this, OpKind::wait_to_read, PushOptions{.name = "wait_to_read"}));
    op->waiter = &w;
    op->set_accesses({v}, {}, id());
    submit(std::move(op), nullptr);
    // As wait_all, the waiting thread runs queued ops until the var is ready.
    auto ready = [&] { return w.done.load(std::memory_order_seq_cst); };
    sched_->help(ready);
    counts_.block_until(ready);
    if (w.failure) std::rethrow_exception(w.failure);
  }

  void wait_all() override {
    check_not_in_op("wait_all");
    check_not_in_observer("wait_all");
    auto caller = counts_.caller();
    std::vector<Epoch*> open;
    {
      std::lock_guard lk(push_mu_);
      combine_open_reductions();
      open = counts_.watch_open_epochs();
    }
    if (!open.empty()) {
      auto drained = [&] { return Accounting::drained(open); };
      sched_->help(drained);
      counts_.block_until(drained);
      std::lock_guard lk(push_mu_);
      counts_.unwatch(open);
    }
    if (std::exception_ptr failure = take_failure()) std::rethrow_exception(failure);
  }

  void set_reduction(const Var& v, Reduction reduction) override {
    auto hooks = checked_reduction(v, std::move(reduction), id());
    std::lock_guard lk(push_mu_);
    set_reduction_locked(v, std::move(hooks));
  }

  // A replay of a segment of plain CPU ops (ReplayPlan) with its internal edges
  // precomputed: its ops are made and numbered under the push lock as pushes would be (so
  // observers see the same versions, hence the same edges), but only one compound access
  // per var (a gate) enters the var queues; the ops wait for their gates and internal
  // predecessors by counters. Back-pressure (a bounded engine, outside an op), a deleted
  // var and a shutting-down engine leave it to the per-op path, which pushes op by op.
  bool replay_fast(const std::shared_ptr<const SegmentData>& seg) override {
    const ReplayPlan& plan = seg->plan;
    if (!plan.usable) return false;
    if (options_.max_inflight != 0 && current_op() == nullptr) return false;
    const std::size_t n = seg->ops.size();
    if (n == 0) return true;
    // Built before the lock; a throw (bad_alloc) frees what was built.
    std::vector<OpPtr> built;
    std::unique_ptr<ReplayRun> run = build_replay(seg, this, built);
    std::lock_guard lk(push_mu_);
    if (counts_.stage() != Stage::running) return false;
    for (const ReplayPlan::Gate& g : plan.gates) {
      if (g.var->deleted) return false;
    }
    // Room for each gate, and for the combining op of an open reduction before it.
    for (const ReplayPlan::Gate& g : plan.gates) {
      g.var->queue.make_room(g.var->reduction_open ? 2 : 1);
    }
    // Nothing below throws. A run of reduce accesses ends before the replay's first access.
    for (const ReplayPlan::Gate& g : plan.gates) {
      if (g.var->reduction_open) combine_reduction(g.var);
    }
    Epoch* epoch = push_epoch(current_op());
    Accounting::add_to_epoch(epoch, n);
    for (OpPtr& op : built) {
      op->seq = next_seq_++;
      op->stamp_versions();
      op->observe_push(observer_);
      op->epoch = epoch;
    }
    // Counted in flight before any op can run; active when found ready below.
    note_pending(Accounting::inflight_of(counts_.raise(n)));
    // Dispatched under the push lock, as enqueue does (a full list flushes here too).
    ReadyList ready(&ThreadedCore::flush_ready, this);
    for (std::size_t g = 0; g < plan.gates.size(); ++g) {
      ReplayGate& gate = run->gates[g];
      bool granted;
      {
        std::lock_guard vl(gate.var->queue.lock);
        granted = gate.var->queue.grant_or_enqueue(gate);
      }
      if (granted) grant_gate(gate, ready);
    }
    // The run now belongs to its ops; each op's own hold (the +1) goes last, and the ops
    // it brings to zero are ready.
    run.release();
    for (OpPtr& op : built) count_down(op.release(), ready);
    activate_and_dispatch(ready.data(), ready.size());
    return true;
  }

  std::string_view kind() const noexcept override { return "threaded"; }
  std::size_t pending() const noexcept override { return counts_.in_flight(); }

  void set_observer(std::shared_ptr<Observer> observer) override {
    check_not_in_observer("set_observer");
    std::lock_guard lk(push_mu_);
    observer_ = std::move(observer);
  }

  void shutdown() noexcept override {
    // This thread's held retirements (of this engine's or another's) go first.
    HeldRetires::here().flush();
    {
      std::lock_guard lk(push_mu_);
      if (counts_.stage() == Stage::stopped) return;
      combine_open_reductions();  // pending work finishes at shutdown, reductions included
      counts_.set_stage(Stage::draining);  // pushers held by back-pressure see it and leave
    }
    // Drain. Running ops may still push, and delete_var is still accepted, so the engine is
    // stopped only once it is seen idle under the push lock (which also waits out a pusher
    // still dispatching the op it just pushed).
    for (;;) {
      auto idle = [&] { return counts_.idle(); };
      // The thread of a core destroyed from inside its own op only waits: it may run during
      // std::exit, when a thread inside oneTBB's arena would race the library's own
      // finalization.
      if (!destroyed_in_own_op_.load()) sched_->help(idle);
      counts_.block_until(idle);
      std::lock_guard lk(push_mu_);
      if (idle()) {
        counts_.set_stage(Stage::stopped);
        break;
      }
    }
    // Stop: lanes first (their threads and streams may still be returning from the last
    // completion callbacks), then the events, the backend and the CPU pool.
    devices_.stop();
    sched_.reset();
    // A call refused meanwhile may still be on its way out.
    counts_.block_until([&] { return counts_.no_callers(); });
    // The thread whose CountScope took a count to zero may still be notifying; the core may
    // be deleted once this returns.
    counts_.quiesce();
  }

  void shutdown_from_own_op() noexcept override {
    // Its thread's held retirements would keep activity above one.
    HeldRetires::here().flush();
    {
      std::lock_guard lk(push_mu_);
      if (counts_.stage() == Stage::running) counts_.set_stage(Stage::draining);
    }
    // Everything that can still run without the calling op (which stays active) finishes
    // first. This thread helps: with one worker, it is the only one.
    // A thread lent to the pool by a wait leaves it within kLinger once there is nothing to
    // run; std::exit must not go on while it is inside oneTBB's arena.
    destroyed_in_own_op_.store(true);
    counts_.watch_for_last_active();
    auto only_caller = [&] { return counts_.active() <= 1 && !sched_->helped_elsewhere(); };
    while (!only_caller()) {
      sched_->help(only_caller);
      // Bounded: helped_elsewhere() changes without a notify (a helping thread leaves help()
      // within kLinger once there is nothing to run).
      counts_.block_until(only_caller, std::chrono::milliseconds(1));
    }
  }

  Op* run_cpu(Op* op, int worker) override {
    Op::prefetch_record(op);
    // Retirements this thread holds for another engine or epoch go before the op runs: it
    // may block on a waiter of theirs (HeldRetires).
    HeldRetires::here().flush_unless(counts_, op->epoch);
    // A pool thread's retirements may be held; a thread lent by a wait holds none, as it
    // leaves the pool without telling the scheduler.
    const bool may_hold = worker < sched_->threads();
    // The op reads its vars' failures now, on their second lines, and releases their queues
    // when it finishes: a write on the first line, which the pushing thread most likely wrote
    // last, a read on the second (var_state.h). Asked for together, they come over in
    // parallel rather than one after another. A read leaves the first line alone: a widely
    // read var's is where the pushing thread queues its next readers. (This is PREFETCHT0, a
    // read: the build names no -mprfchw. PREFETCHW, which would bring them exclusive for the
    // release, measured no better here and takes a line from a core that may still be using
    // it: prefetch.h.)
    for (const Access& a : op->acc) {
      __builtin_prefetch(&a.var->failure, 1, 3);
      if (a.kind != AccessKind::read) __builtin_prefetch(a.var, 1, 3);
    }
    Failure device_failure;
    // Commute vars first: a GPU op of the same run publishes its device work while it holds
    // them, so the device inputs are complete only when looked at after taking them.
    if (!take_commute(op, [this](Op* parked) { redispatch(parked); })) return nullptr;
    if (devices_.await_inputs(op, device_failure)) return nullptr;
    if (Failure up = input_failure(*op, std::move(device_failure))) {
      return finish(op, std::move(up), {.continuation = true, .may_hold = may_hold});
    }
    // The vars' lines are here now (their failures were read). Their first waiting accesses
    // are most likely what this op's release will grant, and the op it grants last is what
    // this thread runs next (the continuation): their records (the first line, which the
    // grant writes, through the accesses, which the run reads) are asked for now, to come
    // over while the body runs rather than inside the release and the next run. With the
    // pushing thread far ahead, a record was written long ago and is no longer in any
    // core's cache: on the random DAG of 1 µs tasks, asking for the first line alone left
    // the next run waiting for the rest (speedup over the serial loop 1.14 against 1.20,
    // docs/benchmarks.md). A read that others of its version outlast grants nothing
    // (release_shared_read); one that may be the last takes the first line's lock when it
    // finishes, so that line is asked for too.
    for (const Access& a : op->acc) {
      if (a.kind == AccessKind::read) {
        if (a.var->queue.reads_running() > 1) continue;
        __builtin_prefetch(a.var, 1, 3);
      }
      if (a.var->queue.waiting_now() == 0) continue;
      const Waiting next = a.var->queue.first_hint();
      if (!next.is_gate()) Op::prefetch_record(next.op());
    }
    op->observe_start(worker);
    RunContext ctx{Device::cpu(), op->opts.lane, worker, nullptr};
    if (op->is_async()) {
      run_async(op, ctx);
      return nullptr;
    }
    std::exception_ptr error;
    {
      CurrentOpScope scope(op);
      try {
        op->fn->call(ctx, nullptr);
      } catch (...) {
        error = std::current_exception();
      }
    }
    const bool failed = error != nullptr;
    return finish(op, Failure{std::move(error), op->seq},
                  {.original = failed, .continuation = true, .may_hold = may_hold});
  }

  void ran_out() override { HeldRetires::here().flush(); }

  // GpuLaunchHost: what launch_gpu_op (gpu_launch.h) needs of the engine.
  void finish_launched(Op* op, Failure failure, bool original) override {
    finish(op, std::move(failure), {.original = original});
  }
  void run_async_body(Op* op, const RunContext& ctx) override { run_async(op, ctx); }
  void redispatch_parked(Op* op) override { redispatch(op); }
  void device_work_started(Epoch* epoch) override {
    Accounting::add_to_epoch(epoch, 1);
    counts_.raise(Accounting::kOneActive);
  }

  void gpu_op_completed(GpuSync& sync) override {
    const Failure& f = sync.failure();
    if (std::shared_ptr<Observer> observer = sync.take_observer()) {
      ObserverScope scope;
      try {
        observer->on_end(sync.seq, static_cast<bool>(f), f && !sync.original());
      } catch (...) {
        record_failure(sync.seq, observer_failure("on_end", "#" + std::to_string(sync.seq)));
      }
    }
    if (f && sync.original() && !sync.failed_at_launch()) record_failure(sync.seq, f.error);
    counts_.retire(static_cast<TrackedSync&>(sync).epoch, 0 - Accounting::kOneActive);
  }

  void finish_async(Op* op, std::exception_ptr error) override {
    auto busy = counts_.busy();
    const bool failed = error != nullptr;
    finish(op, Failure{std::move(error), op->seq}, {.original = failed});
  }

 private:
  void check_gpu_queue(Device device, Lane lane) override { devices_.lane_for(device, lane); }

  // All-or-nothing: everything that can throw (back-pressure refusal, shutdown refusal, a
  // deleted var) happens before the op changes any state; observers are contained. A small
  // op that the push found ready in an otherwise idle engine runs here, after the push lock
  // is let go (enqueue).
  void submit(OpPtr&& op, VarState* to_delete) override {
    if (Op* here = submit_locked(std::move(op), to_delete)) run_pushed_here(here);
  }

  // Runs a small ready op on the pushing thread (PushOptions::small), as the thread lent by a
  // wait runs queued ops; if another thread is lent at the moment, a worker runs it.
  void run_pushed_here(Op* op) {
    op->observe_ready();
    if (!sched_->run_here(op)) sched_->submit(op);
  }

  Op* submit_locked(OpPtr&& op, VarState* to_delete) {
    const bool counted = op->counted();
    Op* running = current_op();
    // A frontend push into a bounded engine reserves its place first, and may wait for it.
    // Pushes made by running ops never wait (that could stall every worker).
    const bool reserved = counted && options_.max_inflight != 0 && running == nullptr;
    if (reserved) counts_.reserve([&] { return op->call_name(); });
    std::lock_guard lk(push_mu_);
    // A run of reduce accesses ends at the first other access to its var (wait_to_read's
    // and delete_var's included): its combining op goes first (below).
    bool ends_reductions = false;
    try {
      check_admission(counts_.stage(), *op, to_delete != nullptr, owns(running));
      for (const Access& a : op->acc) {
        if (a.var->deleted) [[unlikely]] op->check_not_deleted();  // throws, naming the first
        const bool ends = a.var->reduction_open && a.kind != AccessKind::reduce;
        ends_reductions |= ends;
        // Room in the var's queue for this access, and for the combining op's before it.
        a.var->queue.make_room(ends ? 2 : 1);
      }
      if (op->has_reduce) check_reductions(*op);
    } catch (...) {
      if (reserved) counts_.retire(nullptr, 0 - Accounting::kOneActive);
      throw;
    }
    if (to_delete) to_delete->deleted = true;
    if (op->opts.device.is_gpu()) {
      for (Access& a : op->acc) a.var->gpu_pushed = true;
    }
    if (ends_reductions) [[unlikely]] {
      for (Access& a : op->acc) {
        if (a.var->reduction_open && a.kind != AccessKind::reduce) combine_reduction(a.var);
      }
    }
    link_reductions(*op, true, [&](VarState* v) {
      var_add_ref(v);
      open_reductions_.emplace(v, Var(v));
    });
    return enqueue(std::move(op), counted, reserved, running);
  }

  // delete_var without an op. A var that nothing pending uses (its queue idle: every earlier
  // op on it has finished) is deleted at once, on the calling thread: a frontend that drops
  // each array after its op has run (the chapter's `y = x + 1` loop, synchronous) pushed half
  // its ops for this. A busy var whose `on_deleted` only frees memory (DeleteOptions) is
  // deleted too, its callback left with the var for the release that leaves the queue idle
  // (release_access): a frontend that runs ahead drops arrays whose ops have not run yet.
  // The op stays where it shows or orders something: with an observer (graphs and profiles
  // show it), for a var a GPU op used (its device work may outlast the op's access) or with
  // an open reduction, and for an engine that has stopped (which refuses it). `on_deleted` run here runs after the push lock is let go
  // (it may push); what it throws is reported by wait_all, as the op's failure would be.
  //
  // No count is held while `on_deleted` runs: it is the frontend's own call, and one that
  // ends the process (std::exit) must find the engine's shutdown free to finish; a core
  // shut down meanwhile by another thread is not touched again unless it throws.
  bool delete_without_op(VarState* v, std::function<void()>& on_deleted,
                         DeleteOptions options) override {
    // A busy var whose callback needs an op is told by its queue alone, so that its delete
    // takes the push lock once, in submit, not twice.
    if (!options.frees_memory_only) {
      std::lock_guard vl(v->queue.lock);
      if (!v->queue.idle_but_for_credits()) return false;
    }
    std::uint64_t seq;
    {
      std::lock_guard lk(push_mu_);
      if (observer_ || counts_.stage() == Stage::stopped || v->deleted || v->reduction_open ||
          v->gpu_pushed || v->gpu.get() != nullptr) {
        return false;
      }
      std::lock_guard vl(v->queue.lock);
      // The reads granted at push on credit (VarQueue::read_credits) are not running: once
      // given back, the queue shows what still is.
      v->queue.return_read_credits();
      const bool idle = v->queue.idle();
      if (!idle && !options.frees_memory_only) return false;
      v->deleted = true;
      seq = next_seq_++;
      if (!idle) {
        v->pending_delete = std::move(on_deleted);
        v->pending_delete_seq = seq;
        v->queue.delete_pending = true;
        return true;
      }
    }
    run_deleted(on_deleted, seq);
    return true;
  }

  // Runs the `on_deleted` of a delete without an op; what it throws is reported by wait_all
  // as the failure of the op it stands for (push sequence number `seq`).
  void run_deleted(std::function<void()>& on_deleted, std::uint64_t seq) {
    if (!on_deleted) return;
    try {
      on_deleted();
    } catch (...) {
      auto caller = counts_.caller();
      record_failure(seq, std::current_exception());
    }
  }

  // Registers and grants a checked op, dispatching it when every access was granted. Call
  // under the push lock.
  // `running`: the op the pushing thread runs, if any (current_op()).
  // Returns, instead of dispatching it, a small CPU op pushed from outside the engine's ops
  // that is ready and the only active op: the caller runs it once it lets go of the lock.
  Op* enqueue(OpPtr&& op, bool counted, bool reserved, const Op* running) {
    op->seq = next_seq_++;
    op->stamp_versions();
    op->observe_push(observer_);
    if (counted) op->epoch = push_epoch(running);
    const int n = static_cast<int>(op->acc.size());
    op->wait.store(n + 1, std::memory_order_relaxed);
    int granted = 0;
    for (Access& a : op->acc) {
      // A read of a var that nothing waits on and no write holds, the frontend's inputs'
      // common case, is granted without the var's lock (the push lock orders the pushes).
      if (a.var->queue.grant_read_unlocked(a)) {
        ++granted;
        continue;
      }
      std::lock_guard vl(a.var->queue.lock);
      if (a.var->queue.grant_or_enqueue(a)) ++granted;
    }
    // Counted in flight before the op can run. An op this push granted entirely is ready,
    // and active at once (a reserved op was counted active provisionally, so that a
    // concurrent push never sees it idle); one whose last accesses other threads grant
    // meanwhile becomes active below, when this thread finds it ready.
    const bool all_granted = granted == n;
    std::uint64_t after = 0;
    if (counted) {
      // The epoch's count and the state word share a line that finishing workers write too:
      // updated one after the other, the second finds the line the first brought over.
      Accounting::add_to_epoch(op->epoch, 1);
      if (reserved) {
        // The provisional activity of the reservation goes when the op must wait.
        after = all_granted ? counts_.state() : counts_.retire(nullptr, 0 - kActive);
      } else {
        after = counts_.raise(all_granted ? Accounting::kOneActive : Accounting::kOne);
      }
      op->active = all_granted;
      note_pending(Accounting::inflight_of(after));
    }
    // Dispatched under the push lock: shutdown takes it once idle, so no pusher is still
    // inside the pool or a lane when they stop.
    // An op granted entirely here is in no var queue, so no other thread counts it down.
    Op* raw = op.release();
    const int waited =
        all_granted ? n + 1 : raw->wait.fetch_sub(granted + 1, std::memory_order_acq_rel);
    DEPENGINE_INVARIANT(waited >= granted + 1, "an op was granted more accesses than it has");
    if (waited == granted + 1) {
      if (counted && !raw->active) {
        raw->active = true;
        counts_.raise(kActive);
      }
      // Granted here and nothing else ready or running (`after` counts this op alone): a
      // worker would be woken for a body shorter than the wake-up (PushOptions::small).
      if (raw->opts.small && options_.inline_small_ops && all_granted && running == nullptr &&
          raw->kind == OpKind::body && raw->opts.device.is_cpu() &&
          Accounting::active_of(after) == 1) {
        return raw;
      }
      dispatch(raw);
    }
    return nullptr;
  }

  void dispatch(Op* op) {
    op->observe_ready();
    redispatch(op);
  }

  // Runs wait_to_read's op inline: it only reads the var's failure and wakes the caller.
  void signal(Op* op) {
    Failure device_failure;
    if (devices_.await_inputs(op, device_failure)) return;
    Waiter* w = op->waiter;
    std::exception_ptr failure =
        device_failure ? std::move(device_failure.error) : op->acc[0].var->failure.error;
    finish(op, Failure{}, {});
    // Counted busy before the waiter can return: shutdown then waits until this thread has
    // notified.
    auto busy = counts_.busy();
    w->failure = std::move(failure);
    w->done.store(true, std::memory_order_seq_cst);
    counts_.notify();
  }

  // Releases an access of `kind` to `v` and collects the ops its grants make ready.
  void release_access(VarState* v, AccessKind kind, ReadyList& ready) {
    // A read that others of its version outlast grants nothing: released without the lock,
    // so that the readers of a widely read var (a fan's hub) do not queue for it.
    if (kind == AccessKind::read && v->queue.release_shared_read()) return;
    bool last;
    // A pending delete's callback is taken out under the lock: once the queue is idle, the
    // var's last handle may be dropped on another thread, which then frees it (var_release).
    std::function<void()> on_deleted;
    std::uint64_t deleted_seq = 0;
    Granted granted;
    {
      std::lock_guard lk(v->queue.lock);
      v->queue.release(kind, granted);
      const bool idle = v->queue.idle();
      last = v->queue.orphaned && idle;
      if (v->queue.delete_pending && idle) [[unlikely]] {
        v->queue.delete_pending = false;
        on_deleted = std::move(v->pending_delete);
        deleted_seq = v->pending_delete_seq;
      }
    }
    // Nothing was granted when the queue went idle.
    if (on_deleted) [[unlikely]] run_deleted(on_deleted, deleted_seq);
    // Ops hold no reference on their vars: a var whose handles are all gone is freed by the
    // release that leaves it idle (var_release, op.cc).
    if (last) {
      delete v;
      return;
    }
    grant_all(granted, ready);
    // A run longer than Granted holds, in parts: this thread's token on the run keeps the
    // var from going idle (and from being freed) until the last part is taken.
    while (granted.continues()) {
      {
        std::lock_guard lk(v->queue.lock);
        v->queue.continue_run(granted);
      }
      grant_all(granted, ready);
    }
  }

  static void grant_all(const Granted& granted, ReadyList& ready) {
    // Each grant counts down its op's `wait`, a line the pushing thread wrote, and finish()
    // reads the options of an op that became ready (its device and rank), on the next line:
    // asked for all at once, a run of granted reads pays for about one transfer instead of
    // one each.
    for (Waiting w : granted) {
      if (w.is_gate()) continue;
      __builtin_prefetch(&w.op()->wait, 1, 3);
      __builtin_prefetch(&w.op()->opts, 0, 3);
    }
    for (Waiting w : granted) grant(w, ready);
  }

  // One granted access: its op is ready when it was the last grant it missed; a replay's
  // gate releases the segment's first ops on its var instead.
  static void grant(Waiting w, ReadyList& ready) {
    if (w.is_gate()) {
      grant_gate(*static_cast<const ReplayGate*>(w.gate()), ready);
    } else {
      count_down(w.op(), ready);
    }
  }

  // How finish treats an op. `original`: the failure is the op's own (it threw, or its
  // launch failed), reported by wait_all, rather than inherited from an input.
  // `continuation`: the caller is a CPU worker that may run next one op this made ready.
  struct Ending {
    bool original = false;
    bool continuation = false;
    // The caller is a pool thread, which may hold the op's retirement back (HeldRetires).
    bool may_hold = false;
  };

  // Records the outcome, releases the accesses and dispatches what became ready. Returns
  // one ready plain CPU op for the calling worker to run next when `continuation` and
  // nothing more urgent became ready with it.
  //
  // `failure` is taken by value and dropped before the op counts as finished: an
  // exception_ptr still held by this thread after a waiter returned would be released
  // here, unordered with the waiter's use of the exception.
  Op* finish(Op* op, Failure failure, Ending how) {
    const bool original = how.original, continuation = how.continuation;
    op->observe_end(static_cast<bool>(failure), failure && !original);
    op->set_write_failures(failure);  // commute vars' while still holding them
    release_commute(op, [this](Op* parked) { redispatch(parked); });
    if (op->reductions) fail_reductions(*op, failure);
    if (original && failure) record_failure(op->seq, failure.error);
    if (op->observer_error) record_failure(op->seq, std::exchange(op->observer_error, nullptr));
    failure = Failure{};
    ReadyList ready(&ThreadedCore::flush_ready, this);
    if (op->replay) {
      release_replayed(*op, ready, [](void* self, VarState* v, AccessKind k, ReadyList& r) {
        static_cast<ThreadedCore*>(self)->release_access(v, k, r);
      }, this);
    } else {
      for (Access& a : op->acc) release_access(a.var, a.kind, ready);
    }
    const bool counted = op->counted();
    const bool was_active = op->active;
    Epoch* epoch = op->epoch;
    op->release();
    // The newly ready ops become active in the same atomic step that retires this one, and
    // before any of them can run and retire itself (those of a list that filled up were
    // counted and dispatched then: activate_and_dispatch).
    std::uint64_t delta = 0;
    std::size_t now_active = 0;
    ready.for_each([&](Op* r) {
      if (!r->counted()) return;
      r->active = true;
      ++now_active;
    });
    delta += now_active * kActive;
    if (was_active) delta -= kActive;
    if (counted) delta -= 1;
    // Held back only when it raises no count (what is held may only delay a waiter), and
    // while other ops are in flight (made ready here, or queued): a thread about to run out
    // of ops retires at once, with what it held, so that an engine that has finished
    // everything never shows an op pending (Engine::pending) to a waiter it woke.
    if (how.may_hold && counted && now_active <= (was_active ? 1u : 0u) &&
        counts_.bound() == 0 && (now_active != 0 || sched_->queued_now())) {
      HeldRetires::here().hold(counts_, epoch, delta);
    } else if (counted || delta != 0) {
      if (how.may_hold) HeldRetires::here().flush();
      counts_.retire(counted ? epoch : nullptr, delta);
    }
    // The continuation offered to the scheduler is the most urgent ready CPU op; it keeps it
    // only when nothing more urgent is queued (Scheduler::keep_continuation).
    Op* next = nullptr;
    if (continuation) {
      ready.for_each([&](Op* r) {
        if (r->counted() && r->opts.device.is_cpu() && (!next || rank(*r) > rank(*next))) next = r;
      });
    }
    dispatch_ready(ready.data(), ready.size(), next);
    return next;
  }

  // A ReadyList that filled up (a release that made many ops ready at once): its ops count
  // as active, before any of them can run and retire itself, and are dispatched.
  static void flush_ready(void* self, Op* const* ops, std::size_t n) {
    static_cast<ThreadedCore*>(self)->activate_and_dispatch(ops, n);
  }
  void activate_and_dispatch(Op* const* ops, std::size_t n) {
    std::uint64_t active = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!ops[i]->counted()) continue;
      ops[i]->active = true;
      active += kActive;
    }
    if (active != 0) counts_.raise(active);
    dispatch_ready(ops, n, nullptr);
  }

  // Dispatches ops made ready, counted active already, but `kept` (which the caller runs
  // next). The CPU ops of rank 0 go to the scheduler in chunks (Scheduler::submit_rank0),
  // small enough that the first are taken while the rest are still being queued.
  void dispatch_ready(Op* const* ops, std::size_t n, const Op* kept) {
    constexpr std::size_t kChunk = 32;
    Op* chunk[kChunk];
    std::size_t queued = 0;
    auto submit_chunk = [&] {
      if (queued == 1) {
        sched_->submit(chunk[0]);
      } else if (queued > 1) {
        sched_->submit_rank0(chunk, queued);
      }
      queued = 0;
    };
    for (std::size_t i = 0; i < n; ++i) {
      Op* r = ops[i];
      r->observe_ready();
      if (r == kept) continue;
      if (r->kind != OpKind::wait_to_read && r->opts.device.is_cpu() && rank(*r) == 0) {
        chunk[queued++] = r;
        if (queued == kChunk) submit_chunk();
      } else {
        redispatch(r);
      }
    }
    submit_chunk();
  }

  // An async body is active while it runs; once it returns, its op waits for a Completion
  // that only some other thread can call.
  // The body also counts in the op's epoch, so that wait_all sees what it throws after done().
  void run_async(Op* op, const RunContext& ctx) {
    auto busy = counts_.busy();
    op->active = false;  // uncounted below, when the body returns, not by finish()
    const std::uint64_t seq = op->seq;
    Epoch* epoch = op->epoch;
    Accounting::add_to_epoch(epoch, 1);
    {
      Completion done(op);
      CurrentOpScope scope(op);
      try {
        op->fn->call(ctx, &done);
      } catch (...) {
        if (op->mark_completed()) {
          finish(op, Failure{std::current_exception(), seq}, {.original = true});
        } else {
          // Thrown after done() (a second done() included): the op has finished, but the
          // exception is not dropped: wait_all reports it.
          record_failure(seq, std::current_exception());
        }
      }
    }
    counts_.retire(epoch, 0 - kActive);
  }



  // What an op that is about to run inherits: the earliest failure among the vars it reads
  // (`device_failure` when its inputs had device state: read_failure covers them all), and
  // for a combining op the failure of its reduction's contributions.
  static Failure input_failure(const Op& op, Failure device_failure) noexcept {
    Failure up = device_failure ? std::move(device_failure) : op.upstream_failure();
    if (op.combines) {
      up.keep_earliest(op.combines->failure());
    }
    return up;
  }

  // Pushes the op that combines `v`'s open reduction into v. Call under the push lock.
  void combine_reduction(VarState* v) {
    // The map's handle may be the last one, and ops hold no reference on their vars: it goes
    // only once the combining op's access is queued, which keeps v alive from then on.
    v->queue.make_room(1);
    auto entry = open_reductions_.find(v);
    const Var keep = std::move(entry->second);
    open_reductions_.erase(entry);
    // A combining op is not small: enqueue dispatches it.
    enqueue(make_combine_op(this, v, std::move(v->open_reduction)), true, false, current_op());
  }

  // wait_all's: every reduction still open is combined before the ops it waits for end.
  void combine_open_reductions() {
    while (!open_reductions_.empty()) combine_reduction(open_reductions_.begin()->first);
  }

  // Dispatches a parked op again, from the completion thread of the work it waited for.
  void redispatch(Op* op) {
    if (op->kind == OpKind::wait_to_read) {
      signal(op);
    } else if (op->opts.device.is_cpu()) {
      sched_->submit(op);
    } else {
      devices_.lane_for(op->opts.device, op->opts.lane).submit(op);
    }
  }

  // Held for the few hundred nanoseconds of a push (longer only for wait_all's bookkeeping,
  // a replay's registration, or an observer's on_push): a spin lock that yields. It and the
  // fields after it, which only pushing threads touch, start a cache line of their own: the
  // line before ends with the CpuRunner's vtable pointer, which every worker reads per op,
  // and a push writing the lock there made each op cost the frontend one more transfer.
  alignas(64) SpinLock push_mu_;
  std::uint64_t next_seq_ = 0;
  // Vars with a run of reduce accesses not yet combined, under push_mu_ (the handle keeps
  // the var alive until its combining op is pushed).
  std::unordered_map<VarState*, Var> open_reductions_;
  std::shared_ptr<Observer> observer_;

  // The epoch a push made now counts in: a push made by a running op of this engine belongs
  // to that op's epoch (as MXNet's WaitForAll, a wait_all that waits for the op waits for
  // what it pushes; the op holds its epoch open until it finishes, after its pushes), any
  // other the current one. `running`: current_op(). Call under the push lock.
  Epoch* push_epoch(const Op* running) const noexcept {
    return owns(running) && running->epoch ? running->epoch : counts_.current_epoch();
  }

  Accounting counts_;
  std::atomic<bool> destroyed_in_own_op_{false};  // shutdown_from_own_op() was called

  // Stopped in this order by shutdown(): the device side, then the scheduler.
  std::optional<Scheduler> sched_;
  DeviceDispatch devices_;
};

}  // namespace

std::unique_ptr<EngineCore> make_threaded_core(const ResolvedOptions& options) {
  return std::make_unique<ThreadedCore>(options);
}

}  // namespace depengine::detail
