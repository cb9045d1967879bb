// Built when CMake finds no OpenMP for the compiler: the runtime is reported as missing.
#include "runtime.h"

namespace depengine::peers {

std::vector<RuntimeEntry> openmp_runtimes() {
  return {{.name = "openmp", .missing = "the compiler has no OpenMP (find_package(OpenMP) failed)"}};
}

}  // namespace depengine::peers
