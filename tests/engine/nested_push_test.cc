// wait_all and the ops that running ops push (issue 27, item 3): an op pushed from inside a
// running op belongs to that op's wait_all epoch, on both engines, as MXNet's WaitForAll
// waits for them. The randomized form is in oracle_test.cc (NestedPushesAreWaitedFor).
#include <atomic>
#include <chrono>
#include <thread>

#include "test_util.h"

namespace depengine::test {
namespace {

class NestedPush : public testing::TestWithParam<EngineParam> {};

// Another thread's wait_all, called while the outer op runs, waits for the ops the outer op
// pushes after the call, and for the ops those push.
TEST_P(NestedPush, WaitAllWaitsForOpsPushedByAnOpItWaitsFor) {
  auto e = make_engine(GetParam());
  Var outer = e->new_var(), a = e->new_var(), b = e->new_var();
  std::atomic<bool> started{false}, waiting{false};
  std::atomic<int> inner_done{0};
  std::thread frontend([&] {
    e->push([&] {
      started.store(true);
      // Until the other thread is (about to be) inside wait_all, and a little longer.
      eventually([&] { return waiting.load(); });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (const Var& v : {a, b}) {
        e->push([&, v] {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          e->push([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            inner_done.fetch_add(1);
          }, {v}, {});
          inner_done.fetch_add(1);
        }, {}, {v});
      }
    }, {}, {outer});
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  waiting.store(true);
  e->wait_all();
  EXPECT_EQ(inner_done.load(), 4) << "wait_all returned before the nested pushes ran";
  frontend.join();
  e->wait_all();
  EXPECT_EQ(e->pending(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, NestedPush, kAllEngines, param_name);

}  // namespace
}  // namespace depengine::test
