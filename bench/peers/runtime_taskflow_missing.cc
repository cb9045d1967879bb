// Built when DEPENGINE_TASKFLOW_DIR is not given: Taskflow is in no package registry, so it
// is used only where its headers are pointed at, and otherwise reported as missing.
#include "runtime.h"

namespace depengine::peers {

std::vector<RuntimeEntry> taskflow_runtimes() {
  const char* why =
      "Taskflow not configured (fetch github.com/taskflow/taskflow and pass "
      "-DDEPENGINE_TASKFLOW_DIR=<the folder holding taskflow/taskflow.hpp>)";
  return {{.name = "taskflow-async", .missing = why}, {.name = "taskflow-graph", .missing = why}};
}

}  // namespace depengine::peers
