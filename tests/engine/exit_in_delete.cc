// std::exit called by the on_deleted of a var nothing pending uses: the threaded engine runs
// it at once on the calling thread (no op), so the exit handlers destroy the default engine
// from inside delete_var. The destructor must not wait for that call (it would never
// return), and the pending ops on other vars must all have run before exit goes on.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <depengine/engine.h>

namespace {
constexpr int kPending = 200;
std::atomic<int> ran{0};

void report() {
  std::printf("exit inside on_deleted: %d of %d pending ops ran\n", ran.load(), kPending);
  std::fflush(stdout);
}
}  // namespace

int main() {
  std::atexit(report);  // before the engine is made: runs after it is destroyed
  depengine::Engine& e = depengine::Engine::get();
  depengine::Var idle = e.new_var(), busy = e.new_var();
  e.push([] {}, {}, {idle});
  e.wait_to_read(idle);
  for (int i = 0; i < kPending; ++i) {
    e.push([] {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ran.fetch_add(1);
    }, {}, {busy});
  }
  e.delete_var(idle, [] { std::exit(4); });
  std::printf("not reached\n");
  return 1;
}
