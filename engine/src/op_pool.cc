#include "op_pool.h"

#include <pthread.h>

#include <mutex>
#include <new>

#include <oneapi/tbb/scalable_allocator.h>

#include "op.h"
#include "spin_lock.h"

namespace depengine::detail::op_pool {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)

void* allocate(std::size_t size) { return ::operator new(size); }
void release(void* p, std::size_t) noexcept { ::operator delete(p); }

#else

namespace {

// A free record: the link in its thread's list, and in the shared list the link from the
// first record of a batch to the next batch.
struct Block {
  Block* next;
  Block* next_batch;
};

// Trivially destructible, so that the fast paths read it without a guard; the flush at
// thread exit is registered separately (register_flush).
struct Cache {
  Block* head;
  std::size_t count;
  bool flush_registered;
};
DEPENGINE_HOT_TLS thread_local Cache t_cache{};

// Full batches given back by threads. Never destroyed: threads may exit, and give their
// records back, after static destructors have run.
struct Shared {
  SpinLock mu;  // held for a few pointer moves
  Block* batches = nullptr;
  std::size_t n = 0;
};
Shared* g_shared = nullptr;

// fork(): the child has only the forking thread, and another thread of the parent may have
// held the lock or been moving a batch. The child starts from an empty list and a free lock
// (the parent's batches are left as they are: leaked in the child).
void reset_in_child() noexcept { ::new (g_shared) Shared; }

Shared& shared() {
  static Shared* const s = [] {
    g_shared = new Shared;
    ::pthread_atfork(nullptr, nullptr, reset_in_child);
    return g_shared;
  }();
  return *s;
}

void free_batch(Block* b) noexcept {
  while (b) {
    Block* next = b->next;
    scalable_free(b);
    b = next;
  }
}

// Gives `batch` (kBatch records linked through `next`) to the shared list, or back to the
// allocator when the list is full.
void give(Block* batch) noexcept {
  Shared& s = shared();
  {
    std::lock_guard lk(s.mu);
    if (s.n < kMaxShared) {
      batch->next_batch = s.batches;
      s.batches = batch;
      ++s.n;
      return;
    }
  }
  free_batch(batch);
}

// The calling thread's records when it exits: whole batches to the shared list, the rest to
// the allocator.
void flush(Cache& c) noexcept {
  while (c.count >= kBatch) {
    Block* batch = c.head;
    Block* last = batch;
    for (std::size_t i = 1; i < kBatch; ++i) last = last->next;
    c.head = last->next;
    last->next = nullptr;
    c.count -= kBatch;
    give(batch);
  }
  free_batch(c.head);
  c.head = nullptr;
  c.count = 0;
}

struct FlushAtExit {
  FlushAtExit() = default;
  FlushAtExit(const FlushAtExit&) = delete;
  FlushAtExit& operator=(const FlushAtExit&) = delete;
  ~FlushAtExit() {
    flush(t_cache);
    // A record freed later in this thread's exit registers a new flush.
    t_cache.flush_registered = false;
  }
};

void register_flush(Cache& c) {
  thread_local FlushAtExit at_exit;
  static_cast<void>(&at_exit);
  c.flush_registered = true;
}

[[gnu::noinline]] void* refill(Cache& c, std::size_t size) {
  if (!c.flush_registered) register_flush(c);
  Shared& s = shared();
  {
    std::lock_guard lk(s.mu);
    if (Block* batch = s.batches) {
      s.batches = batch->next_batch;
      --s.n;
      c.head = batch->next;
      c.count = kBatch - 1;
      return batch;
    }
  }
  if (void* p = scalable_malloc(size)) return p;
  throw std::bad_alloc();
}

[[gnu::noinline]] void spill(Cache& c) noexcept {
  // The newest records stay (most likely still in this core's cache); the oldest kBatch go.
  Block* last_kept = c.head;
  for (std::size_t i = 1; i < c.count - kBatch; ++i) last_kept = last_kept->next;
  Block* batch = last_kept->next;
  last_kept->next = nullptr;
  c.count -= kBatch;
  give(batch);
}

}  // namespace

void* allocate(std::size_t size) {
  Cache& c = t_cache;
  if (Block* b = c.head) {
    c.head = b->next;
    --c.count;
    return b;
  }
  return refill(c, size);
}

void release(void* p, std::size_t) noexcept {
  Cache& c = t_cache;
  if (!c.flush_registered) register_flush(c);
  auto* b = static_cast<Block*>(p);
  b->next = c.head;
  c.head = b;
  if (++c.count >= 2 * kBatch) spill(c);
}

#endif

}  // namespace depengine::detail::op_pool
