// Scratch file names for tests that write files. ctest runs each test case in its own
// process, several at once, so names carry the process id to keep them apart.
#pragma once

#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace depengine::test {

// A prefix for this process's scratch files: TempDir()/depengine_<pid>_
inline std::string scratch_prefix() {
  return ::testing::TempDir() + "depengine_" + std::to_string(::getpid()) + "_";
}

}  // namespace depengine::test
