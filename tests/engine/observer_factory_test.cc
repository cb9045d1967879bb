// add_engine_observer_factory (depengine/observer.h): the hook through which libraries such as
// depengine::inspect attach an observer to every engine Engine::create makes. Registrations
// are process-wide, so this binary links nothing else that registers one.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

#include "depengine/engine.h"
#include "depengine/error.h"
#include "depengine/observer.h"

namespace {

using depengine::Engine;
using depengine::Observer;

struct CountingObserver final : Observer {
  std::atomic<int> pushes{0};
  std::atomic<int> ends{0};
  void on_push(const depengine::OpInfo&) override { ++pushes; }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {}
  void on_end(std::uint64_t, bool, bool) override { ++ends; }
};

std::vector<std::shared_ptr<CountingObserver>> g_made_by_a, g_made_by_b;
std::atomic<bool> g_throw{false};

std::shared_ptr<Observer> factory_a() {
  g_made_by_a.push_back(std::make_shared<CountingObserver>());
  return g_made_by_a.back();
}
std::shared_ptr<Observer> factory_b() {
  g_made_by_b.push_back(std::make_shared<CountingObserver>());
  return g_made_by_b.back();
}
std::shared_ptr<Observer> factory_none() { return nullptr; }
std::shared_ptr<Observer> factory_throwing() {
  if (g_throw) throw depengine::Error("factory_throwing: asked to throw");
  return nullptr;
}

void push_three(Engine& e) {
  depengine::Var v = e.new_var();
  for (int i = 0; i < 3; ++i) e.push([] {}, {}, {v});
  e.wait_all();
}

TEST(EngineObserverFactory, ANullFactoryIsRefused) {
  EXPECT_THROW(depengine::add_engine_observer_factory(nullptr), depengine::Error);
}

TEST(EngineObserverFactory, EveryNewEngineGetsEachRegisteredFactorysObserver) {
  depengine::add_engine_observer_factory(&factory_a);
  depengine::add_engine_observer_factory(&factory_none);
  depengine::add_engine_observer_factory(&factory_b);
  depengine::add_engine_observer_factory(&factory_a);  // again: counts once
  for (const char* kind : {"naive", "threaded"}) {
    g_made_by_a.clear();
    g_made_by_b.clear();
    {
      auto e = Engine::create(kind, {.cpu_threads = 2});
      push_three(*e);
    }
    ASSERT_EQ(g_made_by_a.size(), 1u) << kind;
    ASSERT_EQ(g_made_by_b.size(), 1u) << kind;
    EXPECT_EQ(g_made_by_a[0]->pushes, 3) << kind;
    EXPECT_EQ(g_made_by_a[0]->ends, 3) << kind;
    EXPECT_EQ(g_made_by_b[0]->pushes, 3) << kind;
    // The engine held the only other reference, and let it go when destroyed.
    EXPECT_EQ(g_made_by_a[0].use_count(), 1) << kind;
  }
}

TEST(EngineObserverFactory, AThrowingFactoryMakesCreateThrow) {
  depengine::add_engine_observer_factory(&factory_throwing);
  g_throw = true;
  EXPECT_THROW(Engine::create("threaded", {.cpu_threads = 2}), depengine::Error);
  g_throw = false;
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  push_three(*e);
}

}  // namespace
