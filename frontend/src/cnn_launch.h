// Helpers of the CNN ops (conv.cc, softmax.cc, batch_norm.cc): they are placed by
// launch.h's launch(), like every frontend op, and check their operands with same_place().
#pragma once

#include <initializer_list>
#include <string>

#include "launch.h"

namespace depengine::detail::cnn {

// The kernel sets and launch() of launch.h, which include the CNN kernels.
using detail::launch;

inline Chunk& chunk(const NDArray& a) noexcept { return *ArrayInternals::chunk(a); }
inline Ptr ptr_of(const NDArray& a) noexcept {
  return a.defined() ? ptr(chunk(a)) : Ptr{};
}

// The chunks of `arrays`, checked to be arrays (not null) on one engine and device; returns
// the first one's. Throws Error "<op>: ..." naming both devices otherwise.
inline Chunk& same_place(const char* op, std::initializer_list<const NDArray*> arrays) {
  Chunk* first = nullptr;
  for (const NDArray* a : arrays) {
    Chunk& c = require(*a, op);
    if (!first) {
      first = &c;
      continue;
    }
    if (c.engine != first->engine) {
      throw Error(std::string(op) + ": the arrays live on different engines");
    }
    if (c.device != first->device) {
      throw Error(std::string(op) + ": the arrays are on different devices, " +
                  first->device.str() + " and " + c.device.str() + " (copy_to moves an array)");
    }
  }
  return *first;
}

}  // namespace depengine::detail::cnn
