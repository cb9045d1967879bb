// The naive engine: every operation runs on the pushing thread, in push order, before push
// returns (except after an async op left suspended, below). It is the oracle of the tests
// and the serialized side of every comparison.
// With cpu_threads = 1 it is fully serial: ops run in a one-slot oneTBB arena, so the loops
// inside their kernels stay on the pushing thread too. Otherwise (the default) kernels split
// over the calling thread's arena, every core, as NumPy's BLAS does. (A private arena of
// more slots would hold oneTBB workers that a threaded engine in the same process needs.)
// A GPU op is launched on its stream and then waited for (the stream is drained after each
// op, as MXNet 1.x synchronized after every GPU op): the baseline for event completion.
// Pushes made while an op runs (by the op itself, or by another thread such as the one that
// completes an async op) are queued and run after it, as push order demands; with
// max_inflight, a push from outside an op waits while the bound's worth are pending.
// An async op whose body returns before its Completion is called is left suspended: push
// returns, later pushes are queued, and once done() is called the engine's resuming thread
// (made with the first async op) finishes the op and runs the queue. The threaded engine
// accepts a program whose pushing thread is the one that calls done(), so the oracle must
// too; and done() is often called from a stream's callback, where no op may run.
#include <deque>
#include <mutex>
#include <optional>
#include <set>

#include <oneapi/tbb/task_arena.h>

#include "device/device_backend.h"
#include "engine_core.h"
#include "engine_options.h"
#include "notifier.h"
#include "op.h"
#include "reduce.h"
#include "serial_worker.h"

namespace depengine::detail {
namespace {


class NaiveCore final : public EngineCore {
 public:
  explicit NaiveCore(const ResolvedOptions& o)
      : EngineCore(o, /*ops_reference_vars=*/true),
        gpu_(make_backend(o.sim_gpus)) {
    if (o.cpu_threads == 1) serial_.emplace(1, 1);
  }

  ~NaiveCore() override { shutdown(); }

  void wait_to_read(const Var& v) override {
    check_not_in_op("wait_to_read");
    check_not_in_observer("wait_to_read");
    check_var(v, id(), "wait_to_read");
    std::unique_lock lk(mu_);
    if (v.state()->deleted) {
      throw Error("wait_to_read: var #" + std::to_string(v.id()) + " was deleted");
    }
    wait_for_ops(lk, next_seq_);
    if (v.state()->failure) std::rethrow_exception(v.state()->failure.error);
  }

  void wait_all() override {
    check_not_in_op("wait_all");
    check_not_in_observer("wait_all");
    std::exception_ptr failure;
    {
      std::unique_lock lk(mu_);
      // The ops pushed so far, and those that the running ones among them push meanwhile
      // (they belong to their pusher's epoch, as in the threaded engine): held while a
      // pending nested op's outermost pusher came before the call.
      const std::uint64_t count = next_seq_;
      wait_for(lk, [&] {
        return done_ >= count && (nested_roots_.empty() || *nested_roots_.begin() >= count);
      });
      failure = take_failure();
    }
    if (failure) std::rethrow_exception(failure);
  }

  void set_reduction(const Var& v, Reduction reduction) override {
    auto hooks = checked_reduction(v, std::move(reduction), id());
    std::lock_guard lk(mu_);
    set_reduction_locked(v, std::move(hooks));
  }

  std::string_view kind() const noexcept override { return "naive"; }
  std::size_t pending() const noexcept override { return pending_.load(); }

  void set_observer(std::shared_ptr<Observer> observer) override {
    check_not_in_observer("set_observer");
    std::lock_guard lk(mu_);
    observer_ = std::move(observer);
  }

  // Called while the op's body runs (its thread ends the op), or after it returned and left
  // the op suspended: the resuming thread then ends the op and drains the queue. Not the
  // calling thread: done() is often called from a stream's completion callback, where
  // running the next ops (a GPU op waits for its stream) would deadlock or break CUDA's rules.
  void finish_async(Op* op, std::exception_ptr error) override {
    std::lock_guard lk(async_mu_);
    if (async_state_ == AsyncState::running) {
      async_error_ = std::move(error);
      async_state_ = AsyncState::completed;
      return;
    }
    async_state_ = AsyncState::idle;
    resumer_->push(Resume{op, std::move(error)});
  }

  void shutdown() noexcept override {
    std::unique_lock lk(mu_);
    if (stage_ == Stage::stopped) return;
    stage_ = Stage::draining;
    // Running ops may push, and delete_var is accepted, until the queue is seen empty.
    waits_.wait_locked(lk, [&] { return !draining_ && queue_.empty() && callers_ == 0; });
    stage_ = Stage::stopped;
    lk.unlock();
    // The resuming thread has recorded its last op (the wait above); joined as it returns,
    // outside the lock that execute and finish_async take to reach it.
    std::unique_ptr<SerialWorker<Resume>> resumer;
    {
      std::lock_guard al(async_mu_);
      resumer = std::move(resumer_);
    }
    resumer.reset();
    streams_.clear();
  }

  void shutdown_from_own_op() noexcept override {
    // Ops run one at a time in push order: nothing else can run before the calling op ends.
    std::lock_guard lk(mu_);
    if (stage_ == Stage::running) stage_ = Stage::draining;
  }

 private:

  // A suspended async op completed, with its error, for the resuming thread.
  struct Resume {
    Op* op = nullptr;
    std::exception_ptr error;
  };

  struct Outcome {
    Failure failure;             // for the vars the op writes
    std::exception_ptr report;  // for wait_all: its own failure, or an observer's, or late
  };

  // What start left: the outcome, or none for an async op whose body returned (settle_async
  // then says whether it was completed), and an exception its body threw after done().
  struct Started {
    std::optional<Outcome> outcome;
    std::exception_ptr late;
  };

  void check_gpu_queue(Device device, Lane lane) override { stream_for(device, lane); }

  // Registers the op in push order, all-or-nothing: what can throw (shutdown refusal, a
  // deleted var) comes before any state changes, and observers are contained. The thread
  // that finds no other draining runs the queue, this op included, before returning (or
  // until an async op is left suspended, see drain); a push made meanwhile (by a running op,
  // or by a thread completing an async op) is queued and runs after the ops before it, on
  // the draining thread. No lock is held while ops run.
  void submit(OpPtr&& op, VarState* to_delete) override {
    std::unique_lock lk(mu_);
    wait_for_place(lk);
    check_admission(stage_, *op, to_delete != nullptr, owns(current_op()));
    op->check_not_deleted();
    check_reductions(*op);
    if (to_delete) to_delete->deleted = true;
    // Each reduce access gets a reduction of its own, combined right after its op: the
    // sequential meaning.
    link_reductions(*op, false, [](VarState*) {});
    op->seq = next_seq_++;
    const Op* running = current_op();
    op->epoch_root = owns(running) ? running->epoch_root : op->seq;
    if (op->epoch_root != op->seq) nested_roots_.insert(op->epoch_root);
    op->stamp_versions();
    op->observe_push(observer_);
    note_pending(pending_.fetch_add(1) + 1);
    if (draining_) {
      queue_.push_back(op.release());
      return;
    }
    draining_ = true;
    // This op first (the queue is empty when no thread drains), then whatever was pushed
    // meanwhile.
    drain(lk, op.release());
  }

  // Runs `next` (if any), then the queued ops, one at a time, until the queue is empty.
  // Call with the lock held and draining_ set; returns with it held and draining_ cleared.
  // An async op left suspended stops the loop with draining_ still set (later pushes are
  // queued): this returns at once, without the lock and without touching the engine again,
  // and the resuming thread continues the loop once the op is completed (finish_async).
  // The lock is taken twice per op: to register it, and to record it. The serial arena is
  // entered per op and left before draining_ is cleared or an op suspended, so that no
  // thread is inside it once the engine may be stopped or another thread may drain.
  void drain(std::unique_lock<std::mutex>& lk, Op* next) {
    while (next) {
      lk.unlock();
      Started started;
      if (serial_) {
        serial_->execute([&] { started = start(next); });
      } else {
        started = start(next);
      }
      if (!started.outcome) {
        // Under the lock, so that the resuming thread, which clears suspended_ under it,
        // cannot run in between.
        lk.lock();
        std::optional<std::exception_ptr> error = settle_async();
        if (!error) {
          suspended_ = true;
          if (callers_ != 0) waits_.notify_all();  // pushers held by the bound go through
          lk.unlock();
          return;
        }
        lk.unlock();
        started.outcome = end(next, std::move(*error), std::move(started.late));
      }
      record(lk, next, std::move(*started.outcome));
      next = pop_queued();
    }
    draining_ = false;
    if (callers_ != 0 || stage_ != Stage::running) waits_.notify_all();
  }

  // Back-pressure: a push from outside an op that would be queued behind another thread's
  // drain waits while max_inflight ops are pending. Not while an async op is suspended (its
  // done() may be this thread's to call), nor once the engine shuts down (submit then
  // decides). Call with mu_ held.
  void wait_for_place(std::unique_lock<std::mutex>& lk) {
    const std::size_t bound = options_.max_inflight;
    if (bound == 0 || current_op() != nullptr) return;
    auto held = [&] {
      return stage_ == Stage::running && draining_ && !suspended_ && pending_.load() >= bound;
    };
    if (!held()) return;
    ++callers_;
    waits_.wait_locked(lk, [&] { return !held(); });
    if (--callers_ == 0 && stage_ != Stage::running) waits_.notify_all();
  }

  // The next queued op, or null. Call with mu_ held.
  Op* pop_queued() noexcept {
    if (queue_.empty()) return nullptr;
    Op* next = queue_.front();
    queue_.pop_front();
    return next;
  }

  // Stores a finished op's outcome, and drops the draining thread's reference to it. Call
  // without the lock; returns with it held.
  void record(std::unique_lock<std::mutex>& lk, Op* op, Outcome&& outcome) {
    // A wait_to_read on another thread reads the vars' failures under the lock, so they
    // change under it; only the draining thread writes them, so it may compare without it.
    if (op->write_failures_differ(outcome.failure)) {
      lk.lock();
      op->set_write_failures(outcome.failure);
      lk.unlock();
    }
    if (outcome.failure && op->reductions) {
      lk.lock();
      fail_reduce_vars(*op, outcome.failure);
      lk.unlock();
    }
    // Destroying the op may push (an array its body held is deleted): queued, as this
    // thread drains.
    const std::uint64_t seq = op->seq;
    const std::uint64_t root = op->epoch_root;
    OpPtr(op).reset();
    // This thread's references to the exceptions go before the op counts as done, under the
    // lock the waiters take: one released after a waiter returned would free the exception
    // unordered with the waiter's use of it.
    Outcome last = std::move(outcome);
    lk.lock();
    if (last.report) record_failure(seq, last.report);
    last = Outcome{};
    ++done_;
    if (root != seq) nested_roots_.erase(nested_roots_.find(root));
    pending_.fetch_sub(1, std::memory_order_relaxed);
    if (callers_ != 0) waits_.notify_all();
  }

  // Blocks until the first `count` ops pushed have run. Call with mu_ held.
  void wait_for_ops(std::unique_lock<std::mutex>& lk, std::uint64_t count) {
    wait_for(lk, [&] { return done_ >= count; });
  }

  // Waits until `ready()` (a condition under mu_, which record() changes) holds.
  template <class Ready>
  void wait_for(std::unique_lock<std::mutex>& lk, const Ready& ready) {
    if (ready()) return;
    ++callers_;
    waits_.wait_locked(lk, ready);
    if (--callers_ == 0 && stage_ != Stage::running) waits_.notify_all();
  }

  // Runs one op (without the lock), or for an async op its body. Its writes' failures are
  // stored by the caller, under it.
  Started start(Op* op) noexcept {
    op->observe_ready();
    Failure upstream = op->upstream_failure();
    if (upstream) {
      op->observe_end(true, true);
      return {Outcome{std::move(upstream), std::exchange(op->observer_error, nullptr)}, nullptr};
    }
    op->observe_start(0);
    Started started;
    std::optional<std::exception_ptr> error = execute(op, started.late);
    if (error) started.outcome = end(op, std::move(*error), std::move(started.late));
    return started;
  }

  // Ends an op that ran with `error` (null on success): combines its reductions and reports
  // its end. `late` is an exception its async body threw after done().
  Outcome end(Op* op, std::exception_ptr error, std::exception_ptr late) noexcept {
    Failure failure{std::move(error), op->seq};
    if (!failure && op->reductions) failure = Failure{combine(*op), op->seq};
    op->observe_end(static_cast<bool>(failure), false);
    std::exception_ptr report;
    if (failure) {
      report = failure.error;
    } else if (late) {
      report = std::move(late);
    } else {
      report = std::exchange(op->observer_error, nullptr);
    }
    return {std::move(failure), std::move(report)};
  }

  // After an async op's body returned: its error if it was completed meanwhile, else none,
  // and the op is left suspended for the thread that completes it.
  std::optional<std::exception_ptr> settle_async() noexcept {
    std::lock_guard lk(async_mu_);
    if (async_state_ == AsyncState::completed) {
      async_state_ = AsyncState::idle;
      return std::exchange(async_error_, nullptr);
    }
    async_state_ = AsyncState::suspended;
    return std::nullopt;
  }

  // On the resuming thread: ends a suspended async op that was completed, then drains the
  // ops queued behind it.
  void resume(Resume& r) noexcept {
    {
      std::lock_guard lk(mu_);
      suspended_ = false;
    }
    Outcome outcome = end(r.op, std::move(r.error), nullptr);
    std::unique_lock lk(mu_, std::defer_lock);
    record(lk, r.op, std::move(outcome));
    drain(lk, pop_queued());
  }

  // Returns the op's failure, or none for an async op whose body returned (its error comes
  // through finish_async); `late` gets an exception an async body threw after done().
  std::optional<std::exception_ptr> execute(Op* op, std::exception_ptr& late) noexcept {
    RunContext ctx{op->opts.device, op->opts.lane, 0, nullptr};
    DeviceStream* stream = nullptr;
    std::exception_ptr error;
    try {
      if (ctx.device.is_gpu()) {
        stream = stream_for(ctx.device, ctx.lane);
        ctx.stream = stream;
      }
    } catch (...) {
      return std::current_exception();
    }
    if (!op->is_async()) {
      try {
        CurrentOpScope scope(op);
        if (stream) stream->bind_thread();
        op->fn->call(ctx, nullptr);
        if (stream) stream->check_launch();
      } catch (...) {
        error = std::current_exception();
      }
      if (stream) {
        std::exception_ptr stream_error = wait_stream(*stream);
        if (!error) error = stream_error;
      }
      return error;
    }
    {
      std::lock_guard lk(async_mu_);
      // Made before the first async body runs, where a failure to start a thread can still
      // fail the op.
      if (!resumer_) {
        try {
          resumer_ = std::make_unique<SerialWorker<Resume>>([this](Resume& r) { resume(r); });
        } catch (...) {
          return std::current_exception();
        }
      }
      async_state_ = AsyncState::running;
    }
    {
      Completion done(op);
      CurrentOpScope scope(op);
      try {
        if (stream) stream->bind_thread();
        op->fn->call(ctx, &done);
      } catch (...) {
        if (op->mark_completed()) {
          finish_async(op, std::current_exception());
        } else {
          late = std::current_exception();  // after done(): reported by wait_all, as threaded
        }
      }
    }
    return std::nullopt;
  }

  // Folds the op's contributions into its reduce vars (a failed var keeps its failure and
  // its value, as the threaded engine's combining op is skipped). Returns what a hook threw.
  static std::exception_ptr combine(Op& op) noexcept {
    try {
      for (auto& [var, group] : op.reductions->groups) {
        if (!var->failure) group->combine_all();
      }
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  // A failed or skipped op's failure reaches its reduce vars as the threaded engine's
  // combining op passes it on: the earliest origin wins. Call with mu_ held.
  static void fail_reduce_vars(Op& op, const Failure& failure) noexcept {
    for (Access& a : op.acc) {
      if (a.kind != AccessKind::reduce) continue;
      a.var->failure.keep_earliest(failure);
    }
  }

  // The callback notifies under the lock: this thread returns (and destroys the locals)
  // only after it has taken the lock again.
  static std::exception_ptr wait_stream(DeviceStream& stream) {
    std::mutex m;
    Notifier n;
    bool done = false;
    std::exception_ptr error;
    stream.notify_when_done([&](std::exception_ptr e) {
      std::lock_guard lk(m);
      error = std::move(e);
      done = true;
      n.notify_all();
    });
    std::unique_lock lk(m);
    n.wait_locked(lk, [&] { return done; });
    return error;
  }

  DeviceStream* stream_for(Device d, Lane lane) {
    return &streams_.get(*gpu_, d, lane, [](std::unique_ptr<DeviceStream> s, int) { return s; });
  }

  std::optional<oneapi::tbb::task_arena> serial_;  // one slot, when cpu_threads is 1
  std::unique_ptr<DeviceBackend> gpu_;

  std::mutex mu_;  // the queue and everything below; never held while an op runs
  Notifier waits_;  // wait_to_read, wait_all, shutdown; conditions under mu_
  std::deque<Op*> queue_;
  bool draining_ = false;
  bool suspended_ = false;  // an async op is suspended and not yet resumed (under mu_)
  Stage stage_ = Stage::running;
  int callers_ = 0;  // threads in a wait
  std::uint64_t next_seq_ = 0;
  std::uint64_t done_ = 0;  // ops run so far (they run in seq order)
  // The epoch_root of each pending op pushed by a running op (under mu_): wait_all waits
  // for those whose outermost pusher it waits for.
  std::multiset<std::uint64_t> nested_roots_;
  std::shared_ptr<Observer> observer_;
  std::atomic<std::size_t> pending_{0};

  // The async op being run, if any: its body runs, or it was completed while its body ran
  // (async_error_ holds its error), or its body returned first and left it suspended.
  enum class AsyncState { idle, running, completed, suspended };
  std::mutex async_mu_;
  AsyncState async_state_ = AsyncState::idle;
  std::exception_ptr async_error_;
  // The thread that resumes after a suspended op, made before the first async body runs
  // (under async_mu_); joined by shutdown.
  std::unique_ptr<SerialWorker<Resume>> resumer_;

  PerLane<DeviceStream> streams_;
};

}  // namespace

std::unique_ptr<EngineCore> make_naive_core(const ResolvedOptions& options) {
  return std::make_unique<NaiveCore>(options);
}

}  // namespace depengine::detail
