// The threaded engine. Each var keeps a FIFO of waiting accesses; an op becomes ready when
// every one of its accesses is granted (reads of one version together, writes alone), and
// is dispatched to the CPU pool or to its GPU lane. Finishing an op releases its accesses,
// which grants the next ones; the finishing CPU worker runs one newly ready op itself.
// A GPU op finishes for the var queues once its work is on its stream, and retires when
// that work completes (device/gpu_sync.h describes the events that order the rest).
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu_pool.h"
#include "device/device_backend.h"
#include "device/gpu_sync.h"
#include "engine_options.h"
#include "op.h"

namespace depengine::detail {
namespace {


// wait_to_read's rendezvous: the internal read op fills it and wakes the caller.
}  // namespace

struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr failure;
};

namespace {

// Grants `a` at once if nothing conflicts, else queues it. Call under a.var->lock.
bool grant_or_enqueue(Access& a) {
  VarState& v = *a.var;
  if (!v.head && !v.write_active) {
    if (!writes(a.kind)) {
      ++v.running_reads;
      return true;
    }
    if (v.running_reads == 0) {
      v.write_active = true;
      return true;
    }
  }
  a.next = nullptr;
  if (v.tail) {
    v.tail->next = &a;
  } else {
    v.head = &a;
  }
  v.tail = &a;
  return false;
}

Access* pop(VarState& v) {
  Access* a = v.head;
  v.head = a->next;
  if (!v.head) v.tail = nullptr;
  return a;
}

// Releases a finished access; returns the accesses it grants, chained through `next`.
// Call under var.lock.
Access* release_access(VarState& v, AccessKind kind) {
  Access* granted = nullptr;
  Access** tail = &granted;
  auto grant = [&](Access* a) {
    *tail = a;
    tail = &a->next;
  };
  if (!writes(kind)) {
    if (--v.running_reads == 0 && v.head) {  // the head can only be a write
      v.write_active = true;
      grant(pop(v));
    }
  } else {
    v.write_active = false;
    if (v.head && writes(v.head->kind)) {
      v.write_active = true;
      grant(pop(v));
    } else {
      while (v.head && !writes(v.head->kind)) {
        ++v.running_reads;
        grant(pop(v));
      }
    }
  }
  *tail = nullptr;
  return granted;
}

// A few ready ops without a heap allocation.
class ReadyList {
 public:
  void push(Op* op) {
    if (n_ < kInline) {
      inline_[n_++] = op;
    } else {
      more_.push_back(op);
    }
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i) f(inline_[i]);
    for (Op* op : more_) f(op);
  }

 private:
  static constexpr std::size_t kInline = 8;
  Op* inline_[kInline];
  std::size_t n_ = 0;
  std::vector<Op*> more_;
};

class ThreadedEngine;

// One GPU lane: a thread that launches the lane's ready ops onto its stream, in order.
class GpuLane {
 public:
  // `key` identifies the stream among all lanes (device · kLaneCount + lane).
  GpuLane(ThreadedEngine& engine, std::unique_ptr<DeviceStream> stream, int index, int key)
      : engine_(engine), stream_(std::move(stream)), index_(index), key_(key) {
    thread_ = std::thread([this] { loop(); });
  }
  ~GpuLane() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    stream_->synchronize();
  }
  void submit(Op* op) {
    {
      std::lock_guard lk(mu_);
      queue_.push_back(op);
    }
    cv_.notify_one();
  }
  DeviceStream& stream() noexcept { return *stream_; }
  int index() const noexcept { return index_; }
  int key() const noexcept { return key_; }
  // Why this lane's thread cannot launch onto its stream, if it cannot.
  const std::exception_ptr& bind_error() const noexcept { return bind_error_; }

 private:
  void loop();

  ThreadedEngine& engine_;
  std::unique_ptr<DeviceStream> stream_;
  const int index_;
  const int key_;
  std::exception_ptr bind_error_;  // set by the lane thread before its first op
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op*> queue_;
  bool stop_ = false;
  std::thread thread_;
};

class ThreadedEngine final : public Engine, public OpSink, public CpuRunner, public GpuSyncSink {
 public:
  explicit ThreadedEngine(const ResolvedOptions& o)
      : options_(o),
        pool_(o.cpu_threads, *this),
        gpu_(o.sim_gpus > 0 ? make_sim_backend(o.sim_gpus) : make_cuda_backend()) {
    for (int d = 0; d < gpu_->device_count(); ++d) {
      event_pools_.push_back(std::make_unique<EventPool>(*gpu_, d));
    }
  }

  ~ThreadedEngine() override {
    shutting_down_.store(true);  // from now on only running ops may push
    drain();
    while (external_finishers_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

  Var new_var() override { return Var(new_var_state(this)); }

  void wait_to_read(const Var& v) override {
    check_not_in_op("wait_to_read");
    check_var(v, this, "wait_to_read");
    Waiter w;
    OpPtr op(new Op(this, false, PushOptions{.name = "wait_to_read"}));
    op->waiter = &w;
    op->set_accesses({v}, {}, this);
    submit(std::move(op), nullptr);
    std::unique_lock lk(w.mu);
    w.cv.wait(lk, [&] { return w.done; });
    if (w.failure) std::rethrow_exception(w.failure);
  }

  void wait_all() override {
    check_not_in_op("wait_all");
    drain();
    std::exception_ptr failure;
    {
      std::lock_guard lk(failure_mu_);
      failure = std::exchange(failure_, nullptr);
    }
    if (failure) std::rethrow_exception(failure);
  }

  void delete_var(const Var& v, std::function<void()> on_deleted) override {
    submit(make_delete_op(this, v, std::move(on_deleted), this), v.state());
  }

  std::string_view kind() const noexcept override { return "threaded"; }
  int cpu_threads() const noexcept override { return options_.cpu_threads; }
  std::size_t max_inflight() const noexcept override { return options_.max_inflight; }
  int sim_gpus() const noexcept override { return options_.sim_gpus; }
  std::size_t pending() const noexcept override { return inflight_.load(); }
  std::size_t peak_pending() const noexcept override { return peak_.load(); }

  void set_observer(std::shared_ptr<Observer> observer) override {
    std::lock_guard lk(push_mu_);
    observer_ = std::move(observer);
  }

  Op* run_cpu(Op* op, int worker) override {
    Failure device_failure;
    if (await_device_inputs(op, device_failure)) return nullptr;
    if (Failure up = device_failure ? std::move(device_failure) : op->upstream_failure()) {
      return finish(op, std::move(up), false, true);
    }
    op->observe_start(worker);
    RunContext ctx{Device::cpu(), op->opts.lane, worker, nullptr};
    if (op->async) {
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
    return finish(op, Failure{std::move(error), op->seq}, failed, true);
  }

  // Launches a GPU op onto its lane's stream. A synchronous op finishes for the var queues
  // as soon as its work is on the stream, behind events that order it after the device work
  // it depends on, and retires in gpu_op_completed when that work has run. An asynchronous
  // op is a host op: it starts once its device inputs are complete, and ends at done().
  void run_gpu(Op* op, GpuLane& lane) {
    if (lane.bind_error()) {
      finish(op, Failure{lane.bind_error(), op->seq}, true, false);
      return;
    }
    Failure up;
    if (op->async) {
      if (await_device_inputs(op, up)) return;
      if (!up) up = op->upstream_failure();
    } else {
      up = read_failure(*op);
    }
    if (up) {
      finish(op, std::move(up), false, false);
      return;
    }
    op->observe_start(lane.index());
    DeviceStream& stream = lane.stream();
    RunContext ctx{op->opts.device, op->opts.lane, lane.index(), &stream};
    if (op->async) {
      run_async(op, ctx);
      return;
    }
    std::exception_ptr error;
    std::vector<GpuSyncPtr> upstream;
    GpuSyncPtr sync;
    {
      CurrentOpScope scope(op);
      try {
        upstream = order_after_inputs(*op, stream, lane.key());
        if (Failure late = completed_failure(upstream)) {
          up = std::move(late);
        } else {
          op->fn->call(ctx, nullptr);
          stream.check_launch();
        }
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (up) {  // an input failed while this op was being ordered: skipped, nothing launched
      // Ends the span of the waits already issued, so that the failure a data wait carries
      // is not reported for the next op on this stream.
      stream.notify_when_done([](std::exception_ptr) {});
      finish(op, std::move(up), false, false);
      return;
    }
    {
      CurrentOpScope scope(op);
      try {
        // Recorded even after a failed launch: work it enqueued before failing stays ordered.
        EventPool& events = *event_pools_[static_cast<std::size_t>(op->opts.device.id)];
        // The observer's on_end is reported when the work completes.
        sync = std::make_shared<GpuSync>(*this, events, lane.key(), op->seq, std::move(upstream),
                                         Failure{error, op->seq}, op->observer);
        stream.record(sync->event());
      } catch (...) {
        if (!error) error = std::current_exception();
        sync.reset();
      }
    }
    const bool failed = error != nullptr;
    if (sync) {
      publish(*op, sync);
      op->observer.reset();
      inflight_.fetch_add(1, std::memory_order_relaxed);  // retired by gpu_op_completed
      stream.notify_when_done([sync](std::exception_ptr e) { sync->stream_done(std::move(e)); });
    }
    finish(op, Failure{std::move(error), op->seq}, failed, false);
  }

  void gpu_op_completed(GpuSync& sync) override {
    const Failure& f = sync.failure();
    if (std::shared_ptr<Observer> observer = sync.take_observer()) {
      observer->on_end(sync.seq, static_cast<bool>(f), f && !sync.original());
    }
    if (f && sync.original() && !sync.failed_at_launch()) record_failure(sync.seq, f.error);
    retire_one();
  }

  void finish_async(Op* op, std::exception_ptr error) override {
    external_finishers_.fetch_add(1, std::memory_order_acq_rel);
    const bool failed = error != nullptr;
    finish(op, Failure{std::move(error), op->seq}, failed, false);
    external_finishers_.fetch_sub(1, std::memory_order_acq_rel);
  }

 protected:
  void push_op(const BodyBuilder& body, bool async, VarList reads, VarList writes,
               PushOptions options) override {
    OpPtr op = make_op(this, body, async, std::move(options), reads, writes, this);
    if (op->opts.device.is_gpu()) lane_for(op->opts.device, op->opts.lane);  // validates
    submit(std::move(op), nullptr);
  }

 private:
  void submit(OpPtr op, VarState* to_delete) {
    const bool counted = op->waiter == nullptr;
    if (counted && shutting_down_.load(std::memory_order_acquire) && current_op() == nullptr) {
      throw Error("push " + op->display_name() + ": the engine is shutting down");
    }
    if (counted) throttle();
    int granted = 0;
    {
      std::lock_guard lk(push_mu_);
      op->check_not_deleted();
      if (to_delete) to_delete->deleted = true;
      op->seq = next_seq_++;
      if (counted) {
        std::size_t n = inflight_.fetch_add(1, std::memory_order_relaxed) + 1;
        if (n > peak_.load(std::memory_order_relaxed)) peak_.store(n, std::memory_order_relaxed);
      }
      op->wait.store(static_cast<int>(op->acc.size()) + 1, std::memory_order_relaxed);
      for (Access& a : op->acc) {
        a.version = writes(a.kind) ? ++a.var->pushed_version : a.var->pushed_version;
      }
      op->observe_push(observer_);
      for (Access& a : op->acc) {
        std::lock_guard vl(a.var->lock);
        if (grant_or_enqueue(a)) ++granted;
      }
    }
    Op* raw = op.release();
    if (raw->wait.fetch_sub(granted + 1, std::memory_order_acq_rel) == granted + 1) dispatch(raw);
  }

  // Back-pressure: blocks a frontend thread while the in-flight bound is reached. Ops that
  // push from inside the engine are never blocked, since that could stall every worker.
  void throttle() {
    const std::size_t bound = options_.max_inflight;
    if (bound == 0 || current_op() != nullptr) return;
    if (inflight_.load(std::memory_order_acquire) < bound) return;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lk(wait_mu_);
      wait_cv_.wait(lk, [&] { return inflight_.load(std::memory_order_seq_cst) < bound; });
    }
    waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }

  // Waits until every pushed op has finished, running queued CPU ops meanwhile.
  void drain() {
    if (inflight_.load(std::memory_order_acquire) == 0) return;
    pool_.help([this] { return inflight_.load(std::memory_order_acquire) == 0; });
    if (inflight_.load(std::memory_order_acquire) == 0) return;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lk(wait_mu_);
      wait_cv_.wait(lk, [&] { return inflight_.load(std::memory_order_seq_cst) == 0; });
    }
    waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }

  void dispatch(Op* op) {
    op->observe_ready();
    redispatch(op);
  }

  // Runs wait_to_read's op inline: it only reads the var's failure and wakes the caller.
  void signal(Op* op) {
    Failure device_failure;
    if (await_device_inputs(op, device_failure)) return;
    Waiter* w = op->waiter;
    std::exception_ptr failure =
        device_failure ? std::move(device_failure.error) : op->acc[0].var->failure.error;
    finish(op, Failure{}, false, false);
    std::lock_guard lk(w->mu);
    w->failure = std::move(failure);
    w->done = true;
    w->cv.notify_all();
  }

  // Records the outcome, releases the accesses and dispatches what became ready. Returns
  // one ready plain CPU op for the calling worker to run next when `continuation`.
  //
  // `failure` is taken by value and dropped before the op counts as finished: an
  // exception_ptr still held by this thread after a waiter returned would be released
  // here, unordered with the waiter's use of the exception.
  Op* finish(Op* op, Failure failure, bool original, bool continuation) {
    op->observe_end(static_cast<bool>(failure), failure && !original);
    op->set_write_failures(failure);
    if (original && failure) record_failure(op->seq, failure.error);
    failure = Failure{};
    ReadyList ready;
    for (Access& a : op->acc) {
      Access* granted;
      {
        std::lock_guard lk(a.var->lock);
        granted = release_access(*a.var, a.kind);
      }
      while (granted) {
        Access* next = granted->next;  // read before the op can run and free it
        if (granted->op->wait.fetch_sub(1, std::memory_order_acq_rel) == 1) ready.push(granted->op);
        granted = next;
      }
    }
    const bool counted = op->waiter == nullptr;
    op->release();
    Op* next = nullptr;
    ready.for_each([&](Op* r) {
      if (continuation && !next && !r->waiter && r->opts.device.is_cpu() &&
          r->opts.priority == 0 && r->opts.lane != Lane::priority) {
        r->observe_ready();
        next = r;
      } else {
        dispatch(r);
      }
    });
    if (counted) retire_one();
    return next;
  }

  void run_async(Op* op, const RunContext& ctx) {
    std::exception_ptr thrown;
    {
      Completion done(op);
      CurrentOpScope scope(op);
      try {
        op->fn->call(ctx, &done);
      } catch (...) {
        if (op->mark_completed()) thrown = std::current_exception();
      }
    }
    if (thrown) finish(op, Failure{std::move(thrown), op->seq}, true, false);
  }

  void record_failure(std::uint64_t seq, const std::exception_ptr& error) {
    std::lock_guard lk(failure_mu_);
    if (!failure_ || seq < failure_seq_) {
      failure_ = error;
      failure_seq_ = seq;
    }
  }

  // --- Host ops behind device work (device/gpu_sync.h) ---

  // A host op (CPU op, wait_to_read's op, async GPU op) whose vars have stream work still in
  // flight is parked until that work completes, then dispatched again: returns true. Else
  // `failure` gets the failure its vars carry (when any GPU op used them) and the vars it
  // writes forget their stream ops.
  bool await_device_inputs(Op* op, Failure& failure) {
    // An engine without GPUs never has device state: CPU ops skip the scan of their vars.
    if (event_pools_.empty() || !has_gpu_state(*op)) return false;
    std::vector<GpuSyncPtr> pending;
    for (;;) {
      pending.clear();
      incomplete_inputs(*op, pending);
      if (pending.empty()) break;
      op->wait.store(static_cast<int>(pending.size()) + 1, std::memory_order_relaxed);
      for (const GpuSyncPtr& s : pending) {
        s->on_done([this, op] {
          if (op->wait.fetch_sub(1, std::memory_order_acq_rel) == 1) redispatch(op);
        });
      }
      if (op->wait.fetch_sub(1, std::memory_order_acq_rel) != 1) return true;
    }
    failure = read_failure(*op);
    reset_written(*op);
    return false;
  }

  // Dispatches a parked op again, from the completion thread of the work it waited for.
  void redispatch(Op* op) {
    if (op->waiter) {
      signal(op);
    } else if (op->opts.device.is_cpu()) {
      pool_.submit(op);
    } else {
      lane_for(op->opts.device, op->opts.lane).submit(op);
    }
  }

  // Counts one op out of flight. Wakes the waiters only when the count reaches zero
  // (drain) or drops below the back-pressure bound: waking a waiting wait_all on every op
  // would cost a futex wake and a context switch per op. The count and the waiter count are
  // read crosswise by notifier and waiter, hence seq_cst on both sides.
  void retire_one() {
    const std::size_t before = inflight_.fetch_sub(1, std::memory_order_seq_cst);
    const std::size_t bound = options_.max_inflight;
    const bool wake = before == 1 || (bound != 0 && before == bound);
    if (wake && waiters_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lk(wait_mu_);
      wait_cv_.notify_all();
    }
  }

  GpuLane& lane_for(Device d, Lane lane) {
    std::lock_guard lk(lanes_mu_);
    const std::size_t index =
        static_cast<std::size_t>(d.id) * kLaneCount + static_cast<std::size_t>(lane);
    if (d.id < 0 || d.id >= gpu_->device_count()) {
      gpu_->make_stream(d.id, lane);  // throws the backend's own error naming the device
    }
    if (lanes_.size() <= index) lanes_.resize(index + 1);
    if (!lanes_[index]) {
      lanes_[index] = std::make_unique<GpuLane>(*this, gpu_->make_stream(d.id, lane),
                                                static_cast<int>(lane), static_cast<int>(index));
    }
    return *lanes_[index];
  }

  const ResolvedOptions options_;

  std::mutex push_mu_;
  std::uint64_t next_seq_ = 0;
  std::shared_ptr<Observer> observer_;

  std::atomic<std::size_t> inflight_{0}, peak_{0};
  std::atomic<int> waiters_{0};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;

  std::mutex failure_mu_;
  std::exception_ptr failure_;
  std::uint64_t failure_seq_ = 0;

  std::atomic<bool> shutting_down_{false};
  std::atomic<int> external_finishers_{0};

  // Declared after everything their threads touch, so they stop first.
  CpuPool pool_;
  std::unique_ptr<DeviceBackend> gpu_;
  // One per device; destroyed after the lanes, whose streams may hold their events.
  std::vector<std::unique_ptr<EventPool>> event_pools_;
  std::mutex lanes_mu_;
  std::vector<std::unique_ptr<GpuLane>> lanes_;
};

void GpuLane::loop() {
  try {
    stream_->bind_thread();
  } catch (...) {
    bind_error_ = std::current_exception();
  }
  for (;;) {
    Op* op;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = queue_.front();
      queue_.pop_front();
    }
    engine_.run_gpu(op, *this);
  }
}

}  // namespace

std::unique_ptr<Engine> make_threaded_engine(const ResolvedOptions& options) {
  return std::make_unique<ThreadedEngine>(options);
}

}  // namespace depengine::detail
