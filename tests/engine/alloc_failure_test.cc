// The threaded engine when memory runs out. An op's finish runs on a worker, where an
// allocation that fails can be neither reported nor undone: the release, the list of ops it
// makes ready and the ready queue take no memory they cannot do without (a fan's write
// releasing a thousand readers used to abort the process: oneTBB's "unhandled exception from
// enqueue task"). A push that needs memory and cannot have it throws std::bad_alloc and
// changes nothing.
//
// This executable replaces the global operator new (all unaligned forms) so that a test can
// make every such allocation fail for a while; hence a test binary of its own.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <depengine/engine.h>

namespace {

std::atomic<bool> g_fail{false};     // every operator new fails while set
std::atomic<long> g_failed{0};       // the allocations refused so far

void* allocate(std::size_t n) noexcept {
  if (g_fail.load(std::memory_order_relaxed)) {
    g_failed.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  return std::malloc(n != 0 ? n : 1);
}

}  // namespace

// The replacements allocate with malloc and free with free, as a pair; GCC cannot see that
// they pair with each other.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

// Allocations fail from construction to destruction; the thread that made it must allocate
// nothing meanwhile (it only waits and polls).
class NoMemory {
 public:
  NoMemory() { g_fail.store(true); }
  ~NoMemory() { g_fail.store(false); }
  NoMemory(const NoMemory&) = delete;
  NoMemory& operator=(const NoMemory&) = delete;
};

void spin_until(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::yield();
}

// Polls `done` for up to 20 s without allocating; false if it never held.
template <class F>
bool eventually(F&& done) {
  for (int i = 0; i < 20000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

// A write that releases 3,000 reads at once, with no memory to be had: more than a release
// grants in one part (Granted), a ready list holds (ReadyList) and the ready queue's first
// ring holds (ReadyFifo). Two workers hold a read each, so the rest stay queued.
TEST(AllocationFailure, AWriteReleasingThousandsOfReadsFinishesWithoutMemory) {
  constexpr int kReads = 3000;
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  Var v = engine->new_var();
  std::atomic<bool> write_running{false}, finish_write{false}, finish_reads{false};
  std::atomic<int> started{0}, done{0};
  std::vector<int> order(kReads, -1);
  engine->push(
      [&] {
        write_running = true;
        spin_until(finish_write);
      },
      {}, {v});
  for (int i = 0; i < kReads; ++i) {
    engine->push(
        [&, i] {
          started.fetch_add(1);
          spin_until(finish_reads);
          order[i] = done.fetch_add(1);
        },
        {v}, {});
  }
  spin_until(write_running);
  const long failed_before = g_failed.load();
  bool released;
  {
    NoMemory no_memory;
    finish_write = true;
    // The write has finished once it no longer counts in flight, and both workers have
    // taken a read; the rest of its release (the last ready ops queued) follows at once.
    released = eventually([&] {
      return engine->pending() == static_cast<std::size_t>(kReads) && started.load() >= 2;
    });
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(released) << "the write's release did not finish";
  // Something did ask for memory meanwhile: the ready queue, to grow its ring past 1,024.
  EXPECT_GT(g_failed.load(), failed_before);
  finish_reads = true;
  engine->wait_all();
  EXPECT_EQ(done.load(), kReads);
  for (int i = 0; i < kReads; ++i) EXPECT_GE(order[i], 0) << "read " << i << " never ran";
  // The engine goes on: a write after them, then a read of its version.
  int value = 0;
  engine->push([&] { value = 42; }, {}, {v});
  int seen = -1;
  engine->push([&] { seen = value; }, {v}, {});
  engine->wait_all();
  EXPECT_EQ(seen, 42);
}

// A push whose var queue must grow for it, with no memory to be had, throws and leaves
// everything as it was: the op never runs, the ops before and after it do, in order.
TEST(AllocationFailure, APushThatCannotGrowItsVarsQueueThrowsAndChangesNothing) {
  auto engine = Engine::create("threaded", {.cpu_threads = 2});
  Var v = engine->new_var();
  std::atomic<bool> release{false};
  std::vector<int> ran;
  ran.reserve(1000);
  engine->push([&] { spin_until(release); }, {}, {v});
  int pushed = 0;
  bool threw = false;
  {
    NoMemory no_memory;
    // Writes of v queue behind the first; the var's ring doubles as it fills, and the push
    // that needs it larger finds no memory.
    for (; pushed < 1000 && !threw; ++pushed) {
      try {
        engine->push([&ran, pushed] { ran.push_back(pushed); }, {}, {v});
      } catch (const std::bad_alloc&) {
        threw = true;
      }
    }
  }
  ASSERT_TRUE(threw) << "no push needed memory in " << pushed << " pushes";
  const int refused = pushed - 1;
  // The var's first ring holds two waiting accesses: the third write waiting needed more.
  EXPECT_EQ(refused, 2);
  EXPECT_EQ(engine->pending(), static_cast<std::size_t>(refused) + 1);
  engine->push([&ran, refused] { ran.push_back(refused + 1000); }, {}, {v});
  release = true;
  engine->wait_all();
  ASSERT_EQ(ran.size(), static_cast<std::size_t>(refused) + 1);
  for (int i = 0; i < refused; ++i) EXPECT_EQ(ran[i], i);
  EXPECT_EQ(ran.back(), refused + 1000);
  EXPECT_EQ(engine->pending(), 0u);
}

}  // namespace
}  // namespace depengine::test
