#include "floor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include <oneapi/tbb/scalable_allocator.h>

#include "machine.h"

namespace depengine::cli {
namespace {

using bench::spin_until;

using Clock = std::chrono::steady_clock;

// A var's state: a lock and a count on a line of its own, as the engine's VarState.
struct alignas(64) ModelVar {
  std::atomic<bool> locked{false};
  long users = 0;

  void update(long delta) noexcept {
    while (locked.exchange(true, std::memory_order_acquire)) {
      spin_until([&] { return !locked.load(std::memory_order_relaxed); });
    }
    users += delta;
    locked.store(false, std::memory_order_release);
  }
};

// An op's record: its vars, padded to four lines as a small engine op would be.
struct alignas(64) ModelOp {
  std::uint32_t n = 0;
  std::uint32_t vars[15] = {};
  unsigned char payload[192] = {};
};

// Records come from oneTBB's scalable allocator, as the engine's ops do (op.cc), except under
// a sanitizer, which must see each record's lifetime and the synchronization of its reuse.
ModelOp* new_record() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return new ModelOp;
#else
  void* p = scalable_aligned_malloc(sizeof(ModelOp), alignof(ModelOp));
  if (!p) throw std::bad_alloc();
  return new (p) ModelOp;
#endif
}

void delete_record(ModelOp* op) noexcept {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  delete op;
#else
  op->~ModelOp();
  scalable_aligned_free(op);
#endif
}

// A single-producer, single-consumer ring of records; the ends on lines of their own.
class Ring {
 public:
  explicit Ring(std::size_t capacity) : slots_(capacity) {}
  void push(ModelOp* op) noexcept {
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    spin_until([&] { return t - head_.load(std::memory_order_acquire) != slots_.size(); });
    slots_[t % slots_.size()] = op;
    tail_.store(t + 1, std::memory_order_release);
  }
  ModelOp* pop() noexcept {
    const std::size_t h = head_.load(std::memory_order_relaxed);
    spin_until([&] { return tail_.load(std::memory_order_acquire) != h; });
    ModelOp* op = slots_[h % slots_.size()];
    head_.store(h + 1, std::memory_order_release);
    return op;
  }

 private:
  std::vector<ModelOp*> slots_;
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
};

}  // namespace

double handoff_floor_ns(const graphfile::Program& program) {
  const std::size_t n = program.ops.size();
  if (n == 0) return 0;
  // The accesses resolved before the clock starts, as run_plain does.
  std::vector<std::uint32_t> flat;
  std::vector<std::uint32_t> starts;
  starts.reserve(n + 1);
  for (const graphfile::OpSpec& s : program.ops) {
    starts.push_back(static_cast<std::uint32_t>(flat.size()));
    std::size_t k = 0;
    for (const auto* list : {&s.reads, &s.writes, &s.commutes, &s.reduces}) {
      for (std::size_t v : *list) {
        if (k++ < 15) flat.push_back(static_cast<std::uint32_t>(v));
      }
    }
  }
  starts.push_back(static_cast<std::uint32_t>(flat.size()));
  auto vars = std::make_unique<ModelVar[]>(program.vars.size() + 1);
  Ring ring(4096);
  Clock::time_point end;
  std::thread worker([&] {
    for (std::size_t i = 0; i < n; ++i) {
      ModelOp* op = ring.pop();
      for (std::uint32_t k = 0; k < op->n; ++k) vars[op->vars[k]].update(-1);
      delete_record(op);
    }
    end = Clock::now();
  });
  const auto start = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    ModelOp* op = new_record();
    op->n = starts[i + 1] - starts[i];
    for (std::uint32_t k = 0; k < op->n; ++k) {
      op->vars[k] = flat[starts[i] + k];
      vars[op->vars[k]].update(+1);
    }
    op->payload[0] = static_cast<unsigned char>(i);
    ring.push(op);
  }
  worker.join();
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(n);
}

}  // namespace depengine::cli
