// std::exit called inside an op of Engine::get(): the exit handlers destroy the default
// engine on the thread of that op. The destructor must not wait for the op that called it
// (it hung), and the ops that do not depend on it must all have run before exit goes on.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <depengine/engine.h>

namespace {
constexpr int kIndependent = 200;
std::atomic<int> ran{0};

void report() {
  std::printf("exit inside an op: %d of %d independent ops ran\n", ran.load(), kIndependent);
  std::fflush(stdout);
}
}  // namespace

int main() {
  std::atexit(report);  // before the engine is made: runs after it is destroyed
  depengine::Engine& e = depengine::Engine::get();
  depengine::Var a = e.new_var(), b = e.new_var();
  for (int i = 0; i < kIndependent; ++i) {
    e.push([] {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ran.fetch_add(1);
    }, {}, {a});
  }
  e.push([] {
    while (ran.load() == 0) std::this_thread::yield();  // exits while the others are pending
    std::exit(3);
  }, {}, {b});
  e.wait_all();
  std::printf("not reached\n");
  return 1;
}
