// Misuse gets a depengine::Error naming the problem at the call, never a hang or a crash
// (design point 8), and nothing is pushed.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

class Misuse : public testing::TestWithParam<EngineParam> {
 protected:
  std::unique_ptr<Engine> e_ = make_engine(GetParam());
};

TEST_P(Misuse, PushOnDeletedVar) {
  Var v = e_->new_var();
  e_->delete_var(v);
  expect_error([&] { e_->push([] {}, {v}, {}); }, "was deleted");
  expect_error([&] { e_->push([] {}, {}, {v}); }, "was deleted");
  expect_error([&] { e_->wait_to_read(v); }, "was deleted");
  expect_error([&] { e_->delete_var(v); }, "was already deleted");
  EXPECT_NO_THROW(e_->wait_all());
  EXPECT_EQ(e_->pending(), 0u);
}

// Errors raised while a push is checked name the call the user made. An unnamed op has no
// number before it is pushed, so none is shown (every such error used to say "push #0",
// whichever op it was).
TEST_P(Misuse, CheckErrorsNameTheCall) {
  Var v = e_->new_var(), r = e_->new_var();
  for (int i = 0; i < 3; ++i) e_->push([] {}, {}, {v});
  e_->delete_var(v);
  const std::string id = std::to_string(v.id());
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message([&] { e_->push([] {}, {v}, {}); }), "push: var #" + id + " was deleted");
  EXPECT_EQ(message([&] { e_->push([] {}, {}, {v}, {.name = "gemm"}); }),
            "push 'gemm': var #" + id + " was deleted");
  EXPECT_EQ(message([&] { e_->push_async([](Completion done) { done(); }, {v}, {}); }),
            "push_async: var #" + id + " was deleted");
  EXPECT_EQ(message([&] { e_->wait_to_read(v); }), "wait_to_read: var #" + id + " was deleted");
  EXPECT_EQ(message([&] { e_->delete_var(v); }),
            "delete_var: var #" + id + " was already deleted");
  EXPECT_EQ(message([&] { e_->push([] {}, {}, {reduce(r)}); }),
            "push: reduce(var #" + std::to_string(r.id()) +
                ") has no reduction hooks; call Engine::set_reduction first");
  EXPECT_NO_THROW(e_->wait_all());
}

TEST_P(Misuse, EmptyFunction) {
  Var v = e_->new_var();
  std::function<void()> empty;
  expect_error([&] { e_->push(empty, {}, {v}); }, "function is empty");
  void (*null_fn)() = nullptr;
  expect_error([&] { e_->push(null_fn, {}, {v}); }, "function is empty");
  std::function<void(Completion)> empty_async;
  expect_error([&] { e_->push_async(empty_async, {}, {v}); }, "function is empty");
}

TEST_P(Misuse, NullVar) {
  Var null;
  expect_error([&] { e_->push([] {}, {null}, {}); }, "null Var");
  expect_error([&] { e_->wait_to_read(null); }, "null Var");
}

TEST_P(Misuse, VarOfAnotherEngine) {
  auto other = Engine::create("naive");
  Var foreign = other->new_var();
  expect_error([&] { e_->push([] {}, {foreign}, {}); }, "another engine");
}

// Lists longer than the linear merge handles (16 vars) are checked in full before they are
// merged through a sort: a bad var anywhere is refused by name and nothing is pushed.
TEST_P(Misuse, BadVarInALongListIsRefusedAndNothingIsPushed) {
  std::vector<Var> vars;
  for (int i = 0; i < 20; ++i) vars.push_back(e_->new_var());
  std::atomic<int> ran{0};
  auto with = [&](std::size_t at, Var bad) {
    std::vector<Var> list = vars;
    list[at] = bad;
    return list;
  };
  auto other = Engine::create("naive");
  expect_error([&] { e_->push([&] { ++ran; }, with(18, Var{}), {vars[0]}); }, "null Var");
  expect_error([&] { e_->push([&] { ++ran; }, {vars[1]}, with(19, other->new_var())); },
               "another engine");
  expect_error([&] { e_->push([&] { ++ran; }, with(17, commute(vars[3])), {vars[0]}); },
               "in the reads list");
  // reduce(v) beside another access to v, found only by the merge.
  expect_error([&] { e_->push([&] { ++ran; }, vars, {reduce(vars[5])}); }, "listed as reduce()");
  e_->wait_all();
  EXPECT_EQ(ran.load(), 0);
  // The vars were left as they were: an op on all of them runs.
  e_->push([&] { ++ran; }, vars, {vars[0], vars[19]});
  e_->wait_all();
  EXPECT_EQ(ran.load(), 1);
}

TEST_P(Misuse, UnknownGpuDevice) {
  Var v = e_->new_var();
  expect_error([&] { e_->push([] {}, {}, {v}, {.device = Device::gpu(0)}); }, "gpu(0)");
  auto sim = make_engine(GetParam(), {.sim_gpus = 1});
  Var s = sim->new_var();
  expect_error([&] { sim->push([] {}, {}, {s}, {.device = Device::gpu(3)}); }, "gpu(3)");
  expect_error([&] { sim->push([] {}, {}, {s}, {.device = Device::gpu(-1)}); }, "gpu(-1)");
}

TEST_P(Misuse, WaitFromInsideARunningOperation) {
  Var a = e_->new_var(), b = e_->new_var();
  std::atomic<int> errors{0};
  e_->push([&] {
    try {
      e_->wait_to_read(b);
    } catch (const Error& err) {
      if (std::string(err.what()).find("inside running operation") != std::string::npos) ++errors;
    }
    try {
      e_->wait_all();
    } catch (const Error&) {
      ++errors;
    }
  }, {}, {a});
  e_->wait_all();
  EXPECT_EQ(errors.load(), 2);
}

TEST_P(Misuse, PushIntoAnEngineThatIsShuttingDown) {
  if (GetParam().kind == "naive") GTEST_SKIP() << "naive push_async waits for done()";
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  std::thread helper;
  std::mutex mu;
  std::atomic<bool> refused{false};
  std::atomic<int> accepted{0}, ran{0};
  Engine* raw = e.get();
  e->push_async([&](Completion done) {
    std::lock_guard lk(mu);
    helper = std::thread([&, done] {
      // The destructor waits for this op, so the engine stays alive while this thread pushes
      // until a push is refused; no sleep stands in for "the destructor has started".
      for (;;) {
        try {
          raw->push([&] { ++ran; }, {}, {v});
          ++accepted;
        } catch (const Error& err) {
          refused = std::string(err.what()).find("shutting down") != std::string::npos;
          break;
        }
        std::this_thread::yield();
      }
      done();
    });
  }, {}, {v});
  e.reset();
  std::lock_guard lk(mu);
  helper.join();
  EXPECT_TRUE(refused.load());
  EXPECT_EQ(ran.load(), accepted.load());
}

INSTANTIATE_TEST_SUITE_P(Engines, Misuse, kAllEngines, param_name);

TEST(MisuseCreate, UnknownEngineKind) {
  expect_error([] { Engine::create("turbo"); }, "unknown engine kind 'turbo'");
}

TEST(MisuseCreate, BadOptions) {
  expect_error([] { Engine::create("threaded", {.cpu_threads = -2}); }, "cpu_threads");
  expect_error([] { Engine::create("threaded", {.max_inflight = -7}); }, "max_inflight");
  expect_error([] { Engine::create("threaded", {.sim_gpus = -1}); }, "sim_gpus");
  expect_error([] { Engine::create("threaded", {.inline_small_ops = 2}); }, "inline_small_ops");
}

TEST(MisuseCreate, BadEnvironmentValues) {
  struct Case {
    const char* name;
    const char* value;
  };
  for (Case c : {Case{"DEPENGINE_CPU_THREADS", "abc"}, Case{"DEPENGINE_CPU_THREADS", "0"},
                 Case{"DEPENGINE_CPU_THREADS", "4x"}, Case{"DEPENGINE_MAX_INFLIGHT", "-1"},
                 Case{"DEPENGINE_SIM_GPUS", "many"}, Case{"DEPENGINE_INLINE_SMALL_OPS", "yes"},
                 Case{"DEPENGINE_INLINE_SMALL_OPS", "2"}}) {
    ::setenv(c.name, c.value, 1);
    expect_error([] { Engine::create("threaded"); }, c.name);
    ::unsetenv(c.name);
  }
}

TEST(MisuseCreate, EnvironmentValuesAreUsed) {
  ::setenv("DEPENGINE_CPU_THREADS", "3", 1);
  ::setenv("DEPENGINE_MAX_INFLIGHT", "64", 1);
  auto e = Engine::create("threaded");
  EXPECT_EQ(e->cpu_threads(), 3);
  EXPECT_EQ(e->max_inflight(), 64u);
  ::unsetenv("DEPENGINE_CPU_THREADS");
  ::unsetenv("DEPENGINE_MAX_INFLIGHT");
}

}  // namespace
}  // namespace depengine::test
