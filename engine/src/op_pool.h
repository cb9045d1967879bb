// Memory for op records (op.h). An op is made on the pushing thread and freed on the worker
// that finishes it, so a general-purpose allocator pays a cross-thread free per op (oneTBB's
// scalable allocator: an atomic on the owning thread's block, which the pushing core then
// takes back) besides its own bookkeeping. Here each thread keeps a list of free records and
// threads trade them in batches of kBatch through one shared list under a spin lock: a
// frontend that only pushes takes a batch the workers gave back, the workers give back every
// kBatch frees, and neither side touches a shared line per op.
//
// Records go back to oneTBB's allocator only when the shared list is full (kMaxShared
// batches: the peak of ops in flight is what stays pooled, up to that cap). Under ASan and
// TSan the pool is bypassed, so that the sanitizers see every op's lifetime.
#pragma once

#include <cstddef>

namespace depengine::detail::op_pool {

// A block of `size` bytes (always sizeof(Op): one size class), aligned for any scalar type.
// Throws std::bad_alloc.
void* allocate(std::size_t size);
// Returns a block from allocate(), from any thread.
void release(void* p, std::size_t size) noexcept;

constexpr std::size_t kBatch = 64;
constexpr std::size_t kMaxShared = 256;

}  // namespace depengine::detail::op_pool
