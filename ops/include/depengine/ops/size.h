// depengine/ops/size.h — the byte limit of a float32 buffer, and checked element-to-byte
// conversion for everything that allocates or copies one (the frontend's host storage, the
// GPU kernels' device and pinned memory, their copies).
//
//   float* p = static_cast<float*>(::operator new(depengine::ops::float_bytes(n, "zeros")));
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace depengine::ops {

// The most bytes one buffer may have: PTRDIFF_MAX, numpy's limit, so that every pointer
// difference inside a buffer is defined (no allocator gives more anyway).
inline constexpr std::size_t kMaxBytes = static_cast<std::size_t>(PTRDIFF_MAX);
// The most float32 elements one buffer may have.
inline constexpr std::size_t kMaxFloats = kMaxBytes / sizeof(float);

// n · sizeof(float). Throws depengine::Error "<op>: n float32 elements take more than the
// kMaxBytes bytes (PTRDIFF_MAX) one buffer may have" when n > kMaxFloats.
std::size_t float_bytes(std::size_t n, const char* op);

}  // namespace depengine::ops
