// A program that lets the Context initialise MPI (no MPI_Init of its own), with contexts that
// overlap and follow each other: MPI stays up while any context lives, and a context made
// after MPI was finalised is a depengine::Error, not an MPI abort. One test: MPI starts
// once per process, so the steps depend on their order.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "depengine/dist.h"

namespace dd = depengine::dist;

namespace {

TEST(DistLifecycle, MpiLivesAsLongAsAnyContextAndIsNotRestarted) {
  auto first = std::make_unique<dd::Context>();   // initialises MPI
  auto second = std::make_unique<dd::Context>();  // adopts it
  first.reset();                                  // second still needs MPI
  dd::DistVar v = second->new_var(8, second->size() - 1);
  second->push([](dd::Args a) { a.write<double>(0)[0] = 3; }, {}, {v}, {.name = "set"});
  double x = 0;
  std::memcpy(&x, second->get(v).data(), sizeof x);
  EXPECT_EQ(x, 3);
  second.reset();  // the last context: finalises MPI
  try {
    dd::Context again;
    ADD_FAILURE() << "a context was made after MPI was finalised";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("finalized"), std::string::npos) << e.what();
  }
}

}  // namespace
