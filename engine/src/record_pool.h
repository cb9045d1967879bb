// Memory for the engine's records: ops (op.h) and var states (var_state.h). Both are made on
// one thread and mostly freed on another: an op on the pushing thread and freed by the worker
// that finishes it; a var state by the frontend and freed by whoever releases its last access.
// A general-purpose allocator pays for that per record (oneTBB's scalable allocator: an
// atomic on the owning thread's block, which the making core then takes back; glibc's
// aligned allocation, for the cache-line-aligned var state, several hundred instructions).
// Here each thread keeps a list of free records of each kind, and threads trade them in
// batches of kBatch through one shared list per kind under a spin lock: a frontend that only
// makes records takes a batch the workers gave back, the workers give back every kBatch
// frees, and neither side touches a shared line per record.
//
// Records go back to oneTBB's allocator only when a shared list is full (kMaxSharedBytes of
// records of its kind: the peak in flight is what stays pooled, up to that cap, as MXNet's
// object pools keep theirs). A frontend runs far ahead of the workers (all 100,000 ops of a
// benchmark pushed before the first wait: 54 MB of op records), and a record from oneTBB
// costs the pusher an allocation and the worker a free to another thread's heap. Under ASan
// and TSan the pool is bypassed, so that the sanitizers see every record's lifetime.
#pragma once

#include <cstddef>

namespace depengine::detail::record_pool {

// The kinds of record, each with its own size class and alignment (record_pool.cc).
enum class Record : unsigned { op, var_state };

// A block for one record of kind `r`, aligned for it. Throws std::bad_alloc.
void* allocate(Record r);
// Returns a block from allocate(r), from any thread.
void release(Record r, void* p) noexcept;

constexpr std::size_t kBatch = 64;
constexpr std::size_t kMaxSharedBytes = std::size_t{64} << 20;

}  // namespace depengine::detail::record_pool
