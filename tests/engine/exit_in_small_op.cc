// std::exit called by a small op (PushOptions::small) that an idle engine runs inside its
// push, on the frontend's thread: the exit handlers destroy the default engine on the thread
// that is pushing, inside the op. Nothing may hang, and the ops pushed before have run.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <depengine/engine.h>

namespace {
constexpr int kEarlier = 100;
std::atomic<int> ran{0};
std::thread::id main_thread;
std::atomic<bool> exited_in_push{false};

void report() {
  std::printf("exit inside a small op: %d of %d earlier ops ran, %s\n", ran.load(), kEarlier,
              exited_in_push.load() ? "inside its push" : "on a worker");
  std::fflush(stdout);
}
}  // namespace

int main() {
  std::atexit(report);  // before the engine is made: runs after it is destroyed
  main_thread = std::this_thread::get_id();
  depengine::Engine& e = depengine::Engine::get();
  depengine::Var a = e.new_var(), b = e.new_var();
  for (int i = 0; i < kEarlier; ++i) e.push([] { ran.fetch_add(1); }, {}, {a});
  e.wait_all();
  e.push([] {
    exited_in_push = std::this_thread::get_id() == main_thread;
    std::exit(5);
  }, {a}, {b}, {.small = true});
  std::printf("not reached\n");
  return 1;
}
