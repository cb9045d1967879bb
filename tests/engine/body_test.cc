// Operation bodies: a push stores the callable inside the engine's op record when it fits
// and on the heap when it does not (too large, or over-aligned). Whichever storage it gets,
// the body runs once with its captures intact and is destroyed exactly once; a callable
// whose copy or move throws leaves nothing pushed.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include <oneapi/tbb/task_arena.h>

#include "test_util.h"

namespace depengine::test {
namespace {

class Bodies : public testing::TestWithParam<EngineParam> {
 protected:
  std::unique_ptr<Engine> e_ = make_engine(GetParam());
};

// Counts live copies of a capture, to check that every copy the engine makes is destroyed.
struct Tracked {
  explicit Tracked(std::atomic<int>& live) : live_(&live) { live_->fetch_add(1); }
  Tracked(const Tracked& o) : live_(o.live_) { live_->fetch_add(1); }
  Tracked(Tracked&& o) noexcept : live_(o.live_) { live_->fetch_add(1); }
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() { live_->fetch_sub(1); }
  std::atomic<int>* live_;
};

TEST_P(Bodies, SmallLargeAndOverAlignedBodiesRunOnceAndAreDestroyed) {
  std::atomic<int> live{0};
  long sum = 0;
  Var v = e_->new_var();
  {
    Tracked t(live);
    // A few pointers: stored in the op.
    e_->push([t, &sum] { sum += 1; }, {}, {v});
    // 256 bytes of captured values: too large for the op, stored on the heap.
    std::array<long, 32> big{};
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<long>(i);
    e_->push([t, big, &sum] {
      for (long x : big) sum += x;
    }, {}, {v});
    // A 64-byte-aligned capture: over-aligned for the op's storage, on the heap, aligned.
    struct alignas(64) Aligned {
      long value = 1000;
    };
    Aligned a;
    e_->push([t, a, &sum] {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&a) % 64, 0u);
      sum += a.value;
    }, {}, {v});
  }
  e_->wait_all();
  EXPECT_EQ(sum, 1 + (31 * 32) / 2 + 1000);
  EXPECT_EQ(live.load(), 0) << "a body was not destroyed, or destroyed twice";
}

// The body is copied from an lvalue and moved from an rvalue, straight into its storage.
struct ThrowsOnCopyOrMove {
  ThrowsOnCopyOrMove() = default;
  ThrowsOnCopyOrMove(const ThrowsOnCopyOrMove&) { throw std::runtime_error("copy failed"); }
  ThrowsOnCopyOrMove(ThrowsOnCopyOrMove&&) { throw std::runtime_error("move failed"); }
  void operator()() const {}
};

TEST_P(Bodies, ACallableWhoseCopyOrMoveThrowsPushesNothing) {
  Var v = e_->new_var();
  ThrowsOnCopyOrMove f;
  EXPECT_THROW(e_->push(f, {v}, {v}), std::runtime_error);
  EXPECT_THROW(e_->push(ThrowsOnCopyOrMove{}, {v}, {v}), std::runtime_error);
  EXPECT_EQ(e_->pending(), 0u);
  int x = 0;
  e_->push([&x] { x = 7; }, {}, {v});  // the var is still usable
  e_->wait_to_read(v);
  EXPECT_EQ(x, 7);
}

INSTANTIATE_TEST_SUITE_P(Engines, Bodies, kAllEngines, param_name);

// The naive engine with one CPU thread is fully serial: the loops inside its ops' kernels
// (oneTBB, in the calling arena) have one slot. With more it leaves them all the cores.
TEST(NaiveEngineThreads, OneThreadRunsKernelLoopsOnThePushingThreadOnly) {
  auto serial = Engine::create("naive", {.cpu_threads = 1});
  EXPECT_EQ(serial->cpu_threads(), 1);
  int slots = 0;
  serial->push([&] { slots = oneapi::tbb::this_task_arena::max_concurrency(); }, {}, {});
  serial->wait_all();
  EXPECT_EQ(slots, 1);

  auto wide = Engine::create("naive", {.cpu_threads = 2});
  EXPECT_EQ(wide->cpu_threads(), 2);
  int outside = oneapi::tbb::this_task_arena::max_concurrency();
  wide->push([&] { slots = oneapi::tbb::this_task_arena::max_concurrency(); }, {}, {});
  wide->wait_all();
  EXPECT_EQ(slots, outside);
}

}  // namespace
}  // namespace depengine::test
