// Built when CMake finds no StarPU (pkg-config starpu-1.3): both schedulers are reported as
// missing rather than left out of the table.
#include "runtime.h"

namespace depengine::peers {

std::vector<RuntimeEntry> starpu_runtimes() {
  const char* why = "StarPU 1.3 not found at configure time (install libstarpu-dev)";
  return {{.name = "starpu-lws", .exclusive = true, .missing = why},
          {.name = "starpu-dmda", .exclusive = true, .missing = why}};
}

}  // namespace depengine::peers
