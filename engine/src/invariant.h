// Invariant checks on the engine's hot paths, as MXNet's engine has (counts never negative,
// var queue states consistent). On in debug and sanitizer builds (the debug, asan and tsan
// presets: NDEBUG unset), compiled out in release builds. A failed check prints what broke
// and where, then aborts: the engine's state is no longer trustworthy.
#pragma once

namespace depengine::detail {

[[noreturn]] void invariant_failed(const char* condition, const char* what, const char* file,
                                   int line) noexcept;

}  // namespace depengine::detail

#ifdef NDEBUG
#define DEPENGINE_INVARIANT(condition, what) static_cast<void>(0)
#else
#define DEPENGINE_INVARIANT(condition, what)                                           \
  ((condition) ? static_cast<void>(0)                                                  \
               : ::depengine::detail::invariant_failed(#condition, what, __FILE__, __LINE__))
#endif
