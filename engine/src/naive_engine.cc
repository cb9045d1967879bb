// The naive engine: every operation runs on the pushing thread, in push order, before push
// returns. It is the oracle of the tests and the serialized side of every comparison.
// With cpu_threads = 1 it is fully serial: ops run in a one-slot oneTBB arena, so the loops
// inside their kernels stay on the pushing thread too. Otherwise (the default) kernels split
// over the calling thread's arena, every core, as NumPy's BLAS does. (A private arena of
// more slots would hold oneTBB workers that a threaded engine in the same process needs.)
// A GPU op is launched on its stream and then waited for (the stream is drained after each
// op, as MXNet 1.x synchronized after every GPU op): the baseline for event completion.
// Pushes made by a running op are queued and run after it, as push order demands.
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include <oneapi/tbb/task_arena.h>

#include "device/device_backend.h"
#include "engine_options.h"
#include "op.h"

namespace depengine::detail {
namespace {


class NaiveEngine final : public Engine, public OpSink {
 public:
  explicit NaiveEngine(const ResolvedOptions& o)
      : options_(o),
        gpu_(o.sim_gpus > 0 ? make_sim_backend(o.sim_gpus) : make_cuda_backend()) {
    if (o.cpu_threads == 1) serial_.emplace(1, 1);
  }

  ~NaiveEngine() override {
    std::lock_guard lk(mu_);
    streams_.clear();
  }

  Var new_var() override { return Var(new_var_state(this)); }

  void wait_to_read(const Var& v) override {
    check_not_in_op("wait_to_read");
    check_var(v, this, "wait_to_read");
    std::lock_guard lk(mu_);
    if (v.state()->deleted) {
      throw Error("wait_to_read: var #" + std::to_string(v.id()) + " was deleted");
    }
    if (v.state()->failure) std::rethrow_exception(v.state()->failure.error);
  }

  void wait_all() override {
    check_not_in_op("wait_all");
    std::exception_ptr failure;
    {
      std::lock_guard lk(mu_);
      failure = std::exchange(failure_, nullptr);
    }
    if (failure) std::rethrow_exception(failure);
  }

  void delete_var(const Var& v, std::function<void()> on_deleted) override {
    submit(make_delete_op(this, v, std::move(on_deleted), this), v.state());
  }

  std::string_view kind() const noexcept override { return "naive"; }
  int cpu_threads() const noexcept override { return options_.cpu_threads; }
  std::size_t max_inflight() const noexcept override { return options_.max_inflight; }
  int sim_gpus() const noexcept override { return options_.sim_gpus; }
  std::size_t pending() const noexcept override { return pending_.load(); }
  std::size_t peak_pending() const noexcept override { return peak_.load(); }

  void set_observer(std::shared_ptr<Observer> observer) override {
    std::lock_guard lk(observer_mu_);
    observer_ = std::move(observer);
  }

  void finish_async(Op*, std::exception_ptr error) override {
    std::lock_guard lk(async_mu_);
    async_error_ = std::move(error);
    async_done_ = true;
    async_cv_.notify_all();
  }

 protected:
  void push_op(const BodyBuilder& body, bool async, VarList reads, VarList writes,
               PushOptions options) override {
    OpPtr op = make_op(this, body, async, std::move(options), reads, writes, this);
    if (op->opts.device.is_gpu()) stream_for(op->opts.device, op->opts.lane);
    submit(std::move(op), nullptr);
  }

 private:
  static const NaiveEngine*& draining() noexcept {
    thread_local const NaiveEngine* engine = nullptr;
    return engine;
  }

  void submit(OpPtr op, VarState* to_delete) {
    if (draining() == this) {  // pushed by a running op: runs after it
      enqueue(std::move(op), to_delete);
      return;
    }
    std::lock_guard lk(mu_);
    enqueue(std::move(op), to_delete);
    draining() = this;
    auto run_queue = [&] {
      while (!queue_.empty()) {
        OpPtr next(queue_.front());
        queue_.pop_front();
        run(next.get());
        pending_.fetch_sub(1);
      }
    };
    if (serial_) {
      serial_->execute(run_queue);
    } else {
      run_queue();
    }
    draining() = nullptr;
  }

  void enqueue(OpPtr op, VarState* to_delete) {
    op->check_not_deleted();
    if (to_delete) to_delete->deleted = true;
    op->seq = next_seq_++;
    for (Access& a : op->acc) {
      a.version = writes(a.kind) ? ++a.var->pushed_version : a.var->pushed_version;
    }
    {
      std::lock_guard lk(observer_mu_);
      op->observe_push(observer_);
    }
    queue_.push_back(op.release());
    std::size_t n = pending_.fetch_add(1) + 1;
    if (n > peak_.load()) peak_.store(n);
  }

  void run(Op* op) {
    op->observe_ready();
    Failure failure = op->upstream_failure();
    const bool skipped = static_cast<bool>(failure);
    if (!skipped) {
      op->observe_start(0);
      failure = Failure{execute(op), op->seq};
    }
    op->observe_end(static_cast<bool>(failure), skipped);
    op->set_write_failures(failure);
    if (failure && !skipped && !failure_) failure_ = failure.error;
  }

  std::exception_ptr execute(Op* op) {
    RunContext ctx{op->opts.device, op->opts.lane, 0, nullptr};
    DeviceStream* stream = nullptr;
    if (ctx.device.is_gpu()) {
      stream = stream_for(ctx.device, ctx.lane);
      ctx.stream = stream;
    }
    std::exception_ptr error;
    if (!op->async) {
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
      async_done_ = false;
      async_error_ = nullptr;
    }
    {
      Completion done(op);
      CurrentOpScope scope(op);
      try {
        if (stream) stream->bind_thread();
        op->fn->call(ctx, &done);
      } catch (...) {
        if (op->mark_completed()) finish_async(op, std::current_exception());
      }
    }
    std::unique_lock lk(async_mu_);
    async_cv_.wait(lk, [&] { return async_done_; });
    return async_error_;
  }

  static std::exception_ptr wait_stream(DeviceStream& stream) {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    stream.notify_when_done([&](std::exception_ptr e) {
      std::lock_guard lk(m);
      error = std::move(e);
      done = true;
      cv.notify_all();
    });
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return done; });
    return error;
  }

  DeviceStream* stream_for(Device d, Lane lane) {
    std::lock_guard lk(streams_mu_);
    auto key = std::make_pair(d.id, static_cast<int>(lane));
    auto it = streams_.find(key);
    if (it == streams_.end()) it = streams_.emplace(key, gpu_->make_stream(d.id, lane)).first;
    return it->second.get();
  }

  const ResolvedOptions options_;
  std::optional<oneapi::tbb::task_arena> serial_;  // one slot, when cpu_threads is 1
  std::unique_ptr<DeviceBackend> gpu_;
  std::mutex mu_;  // held while ops run: one op at a time, in push order
  std::deque<Op*> queue_;
  std::uint64_t next_seq_ = 0;
  std::exception_ptr failure_;
  std::atomic<std::size_t> pending_{0}, peak_{0};

  std::mutex async_mu_;
  std::condition_variable async_cv_;
  bool async_done_ = false;
  std::exception_ptr async_error_;

  std::mutex observer_mu_;
  std::shared_ptr<Observer> observer_;

  std::mutex streams_mu_;
  std::map<std::pair<int, int>, std::unique_ptr<DeviceStream>> streams_;
};

}  // namespace

std::unique_ptr<Engine> make_naive_engine(const ResolvedOptions& options) {
  return std::make_unique<NaiveEngine>(options);
}

}  // namespace depengine::detail
