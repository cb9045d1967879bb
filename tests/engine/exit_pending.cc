// Exits from main with thousands of ops still pending on Engine::get(); the default
// engine's destruction at exit must finish them without hanging or crashing.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <depengine/engine.h>

int main() {
  static std::atomic<int> ran{0};
  depengine::Engine& e = depengine::Engine::get();
  depengine::Var v = e.new_var();
  for (int i = 0; i < 2000; ++i) {
    e.push([] {
      std::this_thread::sleep_for(std::chrono::microseconds(5));
      ran.fetch_add(1);
    }, {}, {v});
  }
  std::printf("pushed 2000 ops\n");
  return 0;
}
