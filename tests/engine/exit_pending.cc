// Exits from main with thousands of ops still pending on Engine::get(); the default
// engine's destruction at exit must run every one of them, without hanging or crashing.
// The check runs in an atexit handler registered before the engine is made, so it runs
// after the engine has been destroyed.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <depengine/engine.h>

namespace {
constexpr int kOps = 2000;
std::atomic<int> ran{0};

void check_all_ran() {
  if (ran.load() != kOps) {
    std::printf("only %d of %d pending ops ran\n", ran.load(), kOps);
    std::fflush(stdout);
    std::_Exit(1);
  }
  std::printf("all %d pending ops ran\n", kOps);
}
}  // namespace

int main() {
  std::atexit(check_all_ran);
  depengine::Engine& e = depengine::Engine::get();
  depengine::Var v = e.new_var();
  for (int i = 0; i < kOps; ++i) {
    e.push([] {
      std::this_thread::sleep_for(std::chrono::microseconds(5));
      ran.fetch_add(1);
    }, {}, {v});
  }
  std::printf("pushed %d ops\n", kOps);
  return 0;
}
