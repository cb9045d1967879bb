#include "device/gpu_sync.h"

#include <algorithm>

namespace depengine::detail {

GpuVarSlot::~GpuVarSlot() { delete p_.load(std::memory_order_acquire); }

GpuVarState& GpuVarSlot::get_or_make() {
  if (GpuVarState* s = get()) return *s;
  auto made = std::make_unique<GpuVarState>();
  GpuVarState* expected = nullptr;
  if (p_.compare_exchange_strong(expected, made.get(), std::memory_order_acq_rel)) {
    return *made.release();
  }
  return *expected;  // another reader made it first
}

std::unique_ptr<StreamEvent> EventPool::take() {
  {
    std::lock_guard lk(mu_);
    if (!free_.empty()) {
      std::unique_ptr<StreamEvent> e = std::move(free_.back());
      free_.pop_back();
      return e;
    }
    ++created_;
  }
  return backend_.make_event(device_);
}

void EventPool::give_back(std::unique_ptr<StreamEvent> event) {
  std::lock_guard lk(mu_);
  free_.push_back(std::move(event));
}

std::size_t EventPool::created() const {
  std::lock_guard lk(mu_);
  return created_;
}

GpuSync::GpuSync(GpuSyncSink& sink, EventPool& pool, int key, std::uint64_t op_seq,
                 std::vector<std::shared_ptr<GpuSync>> upstream, Failure launch_failure,
                 std::shared_ptr<Observer> observer)
    : stream_key(key),
      seq(op_seq),
      sink_(sink),
      pool_(pool),
      event_(pool.take()),
      upstream_(std::move(upstream)),
      launch_failure_(std::move(launch_failure)),
      observer_(std::move(observer)) {}

void GpuSync::order_before(DeviceStream& stream, WaitKind kind) {
  // Under the lock: the event goes back to the pool, and may be recorded again by another
  // op, only once done() is set.
  std::lock_guard lk(mu_);
  if (!done_.load(std::memory_order_relaxed)) stream.wait(*event_, kind);
}

void GpuSync::on_done(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    if (!done_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void GpuSync::stream_done(std::exception_ptr error) {
  own_error_ = std::move(error);
  // The upstream ops finished their work before this one (stream order or event waits),
  // but their own completion callbacks may run on other threads and not have run yet.
  pending_.store(static_cast<int>(upstream_.size()) + 1, std::memory_order_relaxed);
  for (const GpuSyncPtr& u : upstream_) {
    u->on_done([self = shared_from_this()] { self->arrive(); });
  }
  arrive();
}

void GpuSync::arrive() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) complete();
}

void GpuSync::complete() {
  if (launch_failure_) {
    failure_ = launch_failure_;
    original_ = true;
  } else {
    for (const GpuSyncPtr& u : upstream_) {
      failure_.keep_earliest(u->failure());
    }
    if (!failure_ && own_error_) {
      failure_ = Failure{own_error_, seq};
      original_ = true;
    }
  }
  upstream_.clear();
  own_error_ = nullptr;
  std::vector<std::function<void()>> callbacks;
  std::unique_ptr<StreamEvent> event;
  {
    std::lock_guard lk(mu_);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    event = std::move(event_);
  }
  pool_.give_back(std::move(event));
  for (auto& fn : callbacks) fn();
  // Last: once the engine has retired the op it may be destroyed.
  sink_.gpu_op_completed(*this);
}

bool has_gpu_state(Op& op) noexcept {
  return std::any_of(op.acc.begin(), op.acc.end(),
                     [](const Access& a) { return a.var->gpu.get() != nullptr; });
}

Failure read_failure(Op& op) {
  Failure first;
  for (const Access& a : op.acc) {
    if (a.kind == AccessKind::commute) {
      // Not inherited (docs/design.md, commute): a failure of the device work before the
      // run stays with the var, which this op holds.
      const GpuVarState* g = a.var->gpu.get();
      if (g && g->writer && g->writer->done()) {
        a.var->failure.keep_earliest(g->writer->failure());
      }
      continue;
    }
    if (!inherits_failure(a.kind)) continue;
    const Failure* f = &a.var->failure;
    if (!*f) {
      const GpuVarState* g = a.var->gpu.get();
      if (!g || !g->writer || !g->writer->done()) continue;
      f = &g->writer->failure();
    }
    first.keep_earliest(*f);
  }
  return first;
}

void incomplete_inputs(Op& op, std::vector<GpuSyncPtr>& out) {
  for (const Access& a : op.acc) {
    GpuVarState* g = a.var->gpu.get();
    if (!g) continue;
    if (g->writer && !g->writer->done()) out.push_back(g->writer);
    if (writes(a.kind)) {
      std::lock_guard lk(g->lock);
      for (const GpuSyncPtr& r : g->readers) {
        if (!r->done()) out.push_back(r);
      }
    }
  }
}

void reset_written(Op& op) {
  for (const Access& a : op.acc) {
    GpuVarState* g = a.var->gpu.get();
    // A reduce access leaves the var's device writer in place: the combining op after the
    // run inherits its failure (the contributions, running concurrently, cannot).
    if (!g || !writes(a.kind) || a.kind == AccessKind::reduce) continue;
    g->writer.reset();
    std::lock_guard lk(g->lock);
    g->readers.clear();
  }
}

Failure completed_failure(const std::vector<GpuSyncPtr>& syncs) {
  Failure first;
  for (const GpuSyncPtr& s : syncs) {
    if (!s->done()) continue;
    first.keep_earliest(s->failure());
  }
  return first;
}

std::vector<GpuSyncPtr> order_after_inputs(Op& op, DeviceStream& stream, int stream_key) {
  std::vector<GpuSyncPtr> upstream;
  // Collected first: the same op may turn up as a write this op reads and as one it
  // overwrites (or as a reader of a var it overwrites), and then the data wait wins.
  struct Wait {
    GpuSyncPtr sync;
    WaitKind kind;
  };
  std::vector<Wait> waits;
  auto wait_for = [&](const GpuSyncPtr& s, WaitKind kind) {
    if (s->stream_key == stream_key || s->done()) return;
    auto it = std::find_if(waits.begin(), waits.end(),
                           [&](const Wait& w) { return w.sync == s; });
    if (it == waits.end()) {
      waits.push_back(Wait{s, kind});
    } else if (kind == WaitKind::data) {
      it->kind = WaitKind::data;
    }
  };
  for (const Access& a : op.acc) {
    GpuVarState* g = a.var->gpu.get();
    if (!g) continue;
    if (g->writer) {
      wait_for(g->writer, reads(a.kind) ? WaitKind::data : WaitKind::order);
      // Kept even when already done: read_failure() may have run before the writer
      // completed, and its failure must still reach this op (complete() reads it).
      if (reads(a.kind)) upstream.push_back(g->writer);
    }
    if (writes(a.kind)) {
      std::lock_guard lk(g->lock);
      for (const GpuSyncPtr& r : g->readers) wait_for(r, WaitKind::order);
    }
  }
  for (const Wait& w : waits) w.sync->order_before(stream, w.kind);
  return upstream;
}

void publish(Op& op, const GpuSyncPtr& sync) {
  for (const Access& a : op.acc) {
    GpuVarState& g = a.var->gpu.get_or_make();
    if (writes(a.kind)) {
      g.writer = sync;
      std::lock_guard lk(g.lock);
      g.readers.clear();
    } else {
      std::lock_guard lk(g.lock);
      std::erase_if(g.readers, [&](const GpuSyncPtr& r) {
        return r->stream_key == sync->stream_key || r->done();
      });
      g.readers.push_back(sync);
    }
  }
}

}  // namespace depengine::detail
