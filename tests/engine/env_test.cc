// depengine/env.h: the one parser for integer environment variables, which the engine and
// the command line share (issue 11, item 14).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "depengine/engine.h"
#include "depengine/env.h"

namespace depengine::test {
namespace {

constexpr const char* kVar = "DEPENGINE_ENV_TEST_VALUE";

// Sets kVar for one test case and unsets it afterwards.
class EnvLong : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv(kVar); }
  static long read(const char* value) {
    ::setenv(kVar, value, 1);
    return env_long(kVar, 0, 64, 7);
  }
};

TEST_F(EnvLong, UnsetOrEmptyGivesTheFallback) {
  ::unsetenv(kVar);
  EXPECT_EQ(env_long(kVar, 0, 64, 7), 7);
  EXPECT_EQ(read(""), 7);
}

TEST_F(EnvLong, IntegersInRangeAreRead) {
  EXPECT_EQ(read("0"), 0);
  EXPECT_EQ(read("64"), 64);
  EXPECT_EQ(read("12"), 12);
}

TEST_F(EnvLong, AnythingElseNamesTheVariableTheValueAndTheRange) {
  for (const char* bad : {"1abc", "abc", " 3", "3 ", "100", "65", "-1", "2.5", "+3",
                          "99999999999999999999999"}) {
    try {
      read(bad);
      FAIL() << "'" << bad << "' accepted";
    } catch (const EnvError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string(kVar) + "='" + bad + "' is not an integer in [0, 64]");
    }
  }
}

TEST_F(EnvLong, IsAnError) {
  // Code that catches depengine::Error for bad options keeps catching it.
  ::setenv(kVar, "x", 1);
  EXPECT_THROW(env_long(kVar, 0, 1, 0), Error);
}

TEST(EnvLongEngine, TheEngineReadsItsVariablesWithIt) {
  ::setenv("DEPENGINE_SIM_GPUS", "65", 1);
  try {
    Engine::create("threaded");
    FAIL() << "DEPENGINE_SIM_GPUS=65 accepted";
  } catch (const EnvError& e) {
    EXPECT_EQ(std::string(e.what()), "DEPENGINE_SIM_GPUS='65' is not an integer in [0, 64]");
  }
  ::unsetenv("DEPENGINE_SIM_GPUS");
}

}  // namespace
}  // namespace depengine::test
