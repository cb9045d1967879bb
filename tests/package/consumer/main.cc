// Pushes a small diamond through an installed depengine's engine, then a product through its
// frontend (which runs an ops kernel, OpenBLAS's sgemm), and checks both results: a link
// that left out one of the libraries or their dependencies fails here.
#include <cstdio>

#include <depengine/engine.h>
#include <depengine/ndarray.h>

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

  namespace nd = depengine::nd;
  const depengine::NDArray m = nd::full({2, 2}, 2.0f);
  const float s = nd::sum(nd::dot(m, m)).item();
  std::printf("sum(dot(m, m)) = %g\n", s);
  return dv == 24 && s == 32.0f ? 0 : 1;
}
