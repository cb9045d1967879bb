// Happens-before annotations for ThreadSanitizer. oneTBB's library is not built with TSan,
// so the hand-off of an enqueued task from the pushing thread to a worker goes through
// synchronization TSan cannot see. The task functor announces it: release when it is
// copied into oneTBB's task (on the pushing thread), acquire when it runs (on the worker).
// Without TSan these compile to nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace depengine::detail {

inline void tsan_release(void* addr) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(addr);
#else
  (void)addr;
#endif
}

inline void tsan_acquire(void* addr) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(addr);
#else
  (void)addr;
#endif
}

}  // namespace depengine::detail
