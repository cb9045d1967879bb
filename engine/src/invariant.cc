#include "invariant.h"

#include <cstdio>
#include <cstdlib>

namespace depengine::detail {

void invariant_failed(const char* condition, const char* what, const char* file,
                      int line) noexcept {
  std::fprintf(stderr, "depengine: engine invariant broken at %s:%d: %s (%s)\n", file, line, what,
               condition);
  std::abort();
}

}  // namespace depengine::detail
