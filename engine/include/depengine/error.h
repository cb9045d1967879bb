// depengine/error.h — the one exception type the engine throws for misuse.
#pragma once

#include <stdexcept>
#include <string>

namespace depengine {

// Thrown for misuse that the engine detects at the call site: a deleted or foreign var,
// an empty function, an unknown engine kind or device, a bad environment value, a push
// into an engine that is shutting down, a wait from inside a running operation, a
// completion called twice. The message names the problem.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace depengine
