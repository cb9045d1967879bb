// fork() with the default engine busy: the child has only the thread that called fork, so
// the engine the parent made has no workers there. In the child that engine must refuse
// every call with an Error naming fork, drop its handles and be left at exit without
// waiting (its pending ops belong to the parent). A new threaded engine is refused (oneTBB's
// workers do not survive fork); a naive one works. The parent's engine goes on unaffected.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <depengine/engine.h>

namespace {

using depengine::Engine;
using depengine::Error;
using depengine::Var;

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

// True when `call` throws depengine::Error mentioning fork().
bool refused(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return std::string(e.what()).find("fork()") != std::string::npos;
  }
  return false;
}

// The child: the parent's engine refuses, a naive one works; returns from main (exit runs
// the static destructors, the default engine's included).
int child(Engine& parent_engine, const Var& parent_var) {
  check(refused([&] { parent_engine.push([] {}, {}, {parent_var}); }), "push refused");
  check(refused([&] { parent_engine.wait_to_read(parent_var); }), "wait_to_read refused");
  check(refused([&] { parent_engine.wait_all(); }), "wait_all refused");
  check(refused([&] { parent_engine.new_var(); }), "new_var refused");
  check(refused([&] { parent_engine.delete_var(parent_var); }), "delete_var refused");
  // oneTBB's workers do not survive fork: no threaded engine can run here.
  check(refused([] { Engine::create("threaded"); }), "a threaded engine refused");
  auto e = Engine::create("naive");
  Var v = e->new_var();
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) e->push([&] { ran.fetch_add(1); }, {}, {v});
  e->wait_all();
  check(ran.load() == 100, "a naive engine in the child runs its ops");
  std::printf("child: %s\n", failures ? "failed" : "ok");
  std::fflush(stdout);
  return failures ? 1 : 0;
}

}  // namespace

int main() {
  Engine& e = Engine::get();
  Var v = e.new_var();
  std::atomic<int> ran{0};
  // Ops in flight when fork() is called.
  for (int i = 0; i < 2000; ++i) e.push([&] { ran.fetch_add(1); }, {}, {v});
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return 2;
  }
  if (pid == 0) return child(e, v);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) {
    std::perror("waitpid");
    return 2;
  }
  e.wait_all();
  check(ran.load() == 2000, "the parent's ops all ran");
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with status 0");
  std::printf("parent: %s\n", failures ? "failed" : "ok");
  return failures ? 1 : 0;
}
