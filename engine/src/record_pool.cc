#include "record_pool.h"

#include <pthread.h>

#include <mutex>
#include <new>

#include <oneapi/tbb/scalable_allocator.h>

#include "op.h"
#include "prefetch.h"
#include "spin_lock.h"
#include "var_state.h"

namespace depengine::detail::record_pool {
namespace {

struct Layout {
  std::size_t size;
  std::size_t align;
  // Asks for the lines of a free record that making one writes (see allocate).
  void (*prefetch)(const void* record) noexcept;
};
// Ops on cache-line boundaries: their fields are laid out by line (op.h).
constexpr std::size_t kOpAlign = 64;
static_assert(kOpAlign >= alignof(Op));
void prefetch_var_state(const void* record) noexcept { prefetch_for_write(record); }
constexpr Layout kLayouts[] = {{sizeof(Op), kOpAlign, Op::prefetch_free_record},
                               {sizeof(VarState), alignof(VarState), prefetch_var_state}};
constexpr std::size_t kKinds = std::size(kLayouts);

constexpr const Layout& layout(Record r) noexcept { return kLayouts[static_cast<unsigned>(r)]; }
// The batches a shared list keeps (kMaxSharedBytes): about 1,900 of ops and 5,400 of var
// states with the records of today (544 and 192 bytes on x86-64).
constexpr std::size_t max_shared_batches(Record r) noexcept {
  return kMaxSharedBytes / (kBatch * layout(r).size);
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)

void* allocate(Record r) {
  return ::operator new(layout(r).size, std::align_val_t(layout(r).align));
}
void release(Record r, void* p) noexcept { ::operator delete(p, std::align_val_t(layout(r).align)); }

#else

namespace {

// scalable_malloc's blocks are aligned to 16 bytes; larger alignments take the aligned
// entry points.
constexpr std::size_t kMallocAlign = 16;

// A free record: the link in its thread's list, and in the shared list the link from the
// first record of a batch to the next batch.
struct Block {
  Block* next;
  Block* next_batch;
};
static_assert(sizeof(Op) >= sizeof(Block) && sizeof(VarState) >= sizeof(Block));

// Trivially destructible, so that the fast paths read it without a guard; the flush at
// thread exit is registered separately (register_flush).
struct Cache {
  Block* head;
  std::size_t count;
};
struct Caches {
  Cache of[kKinds];
  bool flush_registered;
};
DEPENGINE_HOT_TLS thread_local Caches t_caches{};

// Full batches given back by threads. Never destroyed: threads may exit, and give their
// records back, after static destructors have run.
struct Shared {
  SpinLock mu;  // held for a few pointer moves
  Block* batches = nullptr;
  std::size_t n = 0;
};
Shared* g_shared = nullptr;  // one per kind

// fork(): the child has only the forking thread, and another thread of the parent may have
// held a lock or been moving a batch. The child starts from empty lists and free locks (the
// parent's batches are left as they are: leaked in the child).
void reset_in_child() noexcept {
  for (std::size_t k = 0; k < kKinds; ++k) ::new (&g_shared[k]) Shared;
}

Shared& shared(Record r) {
  static Shared* const s = [] {
    g_shared = new Shared[kKinds];
    ::pthread_atfork(nullptr, nullptr, reset_in_child);
    return g_shared;
  }();
  return s[static_cast<unsigned>(r)];
}

void* system_allocate(Record r) {
  const Layout& l = layout(r);
  return l.align <= kMallocAlign ? scalable_malloc(l.size)
                                 : scalable_aligned_malloc(l.size, l.align);
}

void free_batch(Record r, Block* b) noexcept {
  const bool aligned = layout(r).align > kMallocAlign;
  while (b) {
    Block* next = b->next;
    if (aligned) {
      scalable_aligned_free(b);
    } else {
      scalable_free(b);
    }
    b = next;
  }
}

// Gives `batch` (kBatch records linked through `next`) to the shared list, or back to the
// allocator when the list is full.
void give(Record r, Block* batch) noexcept {
  Shared& s = shared(r);
  {
    std::lock_guard lk(s.mu);
    if (s.n < max_shared_batches(r)) {
      batch->next_batch = s.batches;
      s.batches = batch;
      ++s.n;
      return;
    }
  }
  free_batch(r, batch);
}

// The calling thread's records of kind `r` when it exits: whole batches to the shared list,
// the rest to the allocator.
void flush(Record r, Cache& c) noexcept {
  while (c.count >= kBatch) {
    Block* batch = c.head;
    Block* last = batch;
    for (std::size_t i = 1; i < kBatch; ++i) last = last->next;
    c.head = last->next;
    last->next = nullptr;
    c.count -= kBatch;
    give(r, batch);
  }
  free_batch(r, c.head);
  c.head = nullptr;
  c.count = 0;
}

struct FlushAtExit {
  FlushAtExit() = default;
  FlushAtExit(const FlushAtExit&) = delete;
  FlushAtExit& operator=(const FlushAtExit&) = delete;
  ~FlushAtExit() {
    for (std::size_t k = 0; k < kKinds; ++k) flush(static_cast<Record>(k), t_caches.of[k]);
    // A record freed later in this thread's exit registers a new flush.
    t_caches.flush_registered = false;
  }
};

void register_flush() {
  thread_local FlushAtExit at_exit;
  static_cast<void>(&at_exit);
  t_caches.flush_registered = true;
}

[[gnu::noinline]] void* refill(Record r, Cache& c) {
  if (!t_caches.flush_registered) register_flush();
  Shared& s = shared(r);
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
  if (void* p = system_allocate(r)) return p;
  throw std::bad_alloc();
}

[[gnu::noinline]] void spill(Record r, Cache& c) noexcept {
  // The newest records stay (most likely still in this core's cache); the oldest kBatch go.
  Block* last_kept = c.head;
  for (std::size_t i = 1; i < c.count - kBatch; ++i) last_kept = last_kept->next;
  Block* batch = last_kept->next;
  last_kept->next = nullptr;
  c.count -= kBatch;
  give(r, batch);
}

}  // namespace

// The next record this thread will make is asked for now, for writing: the frontend's
// records come back from the workers that finished them, so each is in another core's cache,
// and a push that finds it there waits for its lines at the first locked instruction after
// the constructor's stores (the push lock, a var's lock). Fetched during the rest of this
// push, it is in this core's cache by the next.
void* allocate(Record r) {
  Cache& c = t_caches.of[static_cast<unsigned>(r)];
  if (Block* b = c.head) {
    c.head = b->next;
    --c.count;
    if (c.head) layout(r).prefetch(c.head);
    return b;
  }
  return refill(r, c);
}

void release(Record r, void* p) noexcept {
  Caches& cs = t_caches;
  if (!cs.flush_registered) register_flush();
  Cache& c = cs.of[static_cast<unsigned>(r)];
  auto* b = static_cast<Block*>(p);
  b->next = c.head;
  c.head = b;
  if (++c.count >= 2 * kBatch) spill(r, c);
}

#endif

}  // namespace depengine::detail::record_pool
