// A program that initialises MPI itself and calls MPI_Finalize while a Context is still alive
// (a Context in main's scope): MPI_Finalize closes the context as its destructor would
// (every op pushed finishes, transfers included), later calls are a depengine::Error, and
// the destructor makes no MPI call after MPI_Finalize (which would abort the job).
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "depengine/dist.h"

namespace dd = depengine::dist;

namespace {

TEST(DistFinalize, ProgramFinalizesMpiWhileAContextLives) {
  auto ctx = std::make_unique<dd::Context>();
  const int last = ctx->size() - 1;
  dd::DistVar a = ctx->new_var(8, 0);
  dd::DistVar b = ctx->new_var(8, last);
  auto seen = std::make_shared<std::atomic<double>>(0);
  ctx->push([](dd::Args x) { x.write<double>(0)[0] = 5; }, {}, {a}, {.name = "make"});
  // Runs on the last rank, with a's value from rank 0; nobody waits for it before
  // MPI_Finalize.
  ctx->push(
      [seen](dd::Args x) {
        x.write<double>(0)[0] = x.read<double>(0)[0];
        seen->store(x.read<double>(0)[0]);
      },
      {a}, {b}, {.name = "use"});
  MPI_Finalize();
  if (ctx->rank() == last) {
    EXPECT_EQ(seen->load(), 5);
  }
  try {
    ctx->push([](dd::Args) {}, {}, {a}, {.name = "late"});
    ADD_FAILURE() << "a push after MPI_Finalize was accepted";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Finalize"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ctx->wait_all(), depengine::Error);
  EXPECT_THROW(ctx->get(b), depengine::Error);
  EXPECT_THROW(ctx->new_var(8, 0), depengine::Error);
  EXPECT_THROW(ctx->set_observer(nullptr), depengine::Error);
  ctx.reset();
}

}  // namespace

// MPI is initialised here and finalised by the test.
int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
