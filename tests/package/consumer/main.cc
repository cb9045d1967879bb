// Pushes a small diamond through an installed depengine and checks the result.
#include <cstdio>

#include <depengine/engine.h>

int main() {
  auto e = depengine::Engine::create("threaded", {.cpu_threads = 2});
  depengine::Var a = e->new_var(), b = e->new_var(), c = e->new_var(), d = e->new_var();
  int av = 0, bv = 0, cv = 0, dv = 0;
  e->push([&] { av = 3; }, {}, {a});
  e->push([&] { bv = av * 2; }, {a}, {b});
  e->push([&] { cv = av + 1; }, {a}, {c}, {.name = "c"});
  e->push([&] { dv = bv * cv; }, {b, c}, {d});
  e->wait_to_read(d);
  std::printf("d = %d\n", dv);
  return dv == 24 ? 0 : 1;
}
