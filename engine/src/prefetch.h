// Prefetching a line the caller is about to write.
//
// GCC and Clang compile __builtin_prefetch(p, 1, ...) to PREFETCHW only when the target
// names the instruction (-mprfchw, or an -march that has it); for plain x86-64 they emit
// PREFETCHT0, a read prefetch. For a line another core wrote last, that is two transfers: a
// shared copy now, and at the first store the invalidation of the other core's copy, which a
// locked instruction after the store (a spin lock, a counter) then waits for. PREFETCHW
// asks for the line exclusive in one transfer. x86 processors since 2014 have it (CPUID
// 0x80000001, ECX bit 8), and it is used only where the CPU says so.
//
// Only for lines no other thread is using: a PREFETCHW takes the line away from a core
// that is still reading or writing it. The engine uses it for free records (record_pool.h),
// which no thread touches until the pool hands them out.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace depengine::detail {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
inline bool cpu_has_prefetchw() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 8)) != 0;
}
// Read before it is initialized (a prefetch during static initialization), it is false.
inline const bool g_has_prefetchw = cpu_has_prefetchw();
#endif

inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (g_has_prefetchw) {
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
    return;
  }
#endif
  __builtin_prefetch(p, 1, 3);
}

}  // namespace depengine::detail
