// Pushes 50 ops on the process default engine and exits without waiting: with
// DEPENGINE_PROFILE / DEPENGINE_RECORD set, the files must still be written at exit.
#include <depengine/engine.h>

int main() {
  depengine::Engine& e = depengine::Engine::get();
  depengine::Var v = e.new_var();
  for (int i = 0; i < 50; ++i) e.push([] {}, {}, {v}, {.name = "step"});
  return 0;
}
