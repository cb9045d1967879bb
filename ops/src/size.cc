// Checked element-to-byte conversion (depengine/ops/size.h).
#include "depengine/ops/size.h"

#include <string>

#include "depengine/error.h"

namespace depengine::ops {

std::size_t float_bytes(std::size_t n, const char* op) {
  if (n > kMaxFloats) {
    throw Error(std::string(op) + ": " + std::to_string(n) +
                " float32 elements take more than the " + std::to_string(kMaxBytes) +
                " bytes (PTRDIFF_MAX) one buffer may have");
  }
  return n * sizeof(float);
}

}  // namespace depengine::ops
