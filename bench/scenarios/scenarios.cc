#include "scenarios.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

namespace depengine::bench {

using Clock = std::chrono::steady_clock;

std::string_view shape_name(Shape shape) noexcept {
  switch (shape) {
    case Shape::chain:
      return "chain";
    case Shape::independent:
      return "independent";
    case Shape::random_dag:
      return "random_dag";
    case Shape::fan:
      return "fan";
  }
  return "unknown";
}

Shape parse_shape(std::string_view name) {
  for (Shape s : kShapes) {
    if (shape_name(s) == name) return s;
  }
  throw Error("unknown scenario '" + std::string(name) +
              "' (expected chain, independent, random_dag or fan)");
}

void busy_wait_us(double us) noexcept {
  if (us <= 0) return;
  const auto end = Clock::now() + std::chrono::nanoseconds(static_cast<long>(us * 1000));
  while (Clock::now() < end) {
  }
}

double ideal_speedup(Shape shape, int threads) noexcept {
  return shape == Shape::chain ? 1.0 : static_cast<double>(threads);
}

double run_scenario(Engine& e, Shape shape, int ops, double op_us, std::uint32_t seed) {
  auto work = [op_us] { busy_wait_us(op_us); };
  std::vector<Var> vars;
  std::mt19937 rng(seed);
  switch (shape) {
    case Shape::chain:
      vars.push_back(e.new_var());
      break;
    case Shape::independent:
      for (int i = 0; i < ops; ++i) vars.push_back(e.new_var());
      break;
    case Shape::random_dag:
    case Shape::fan:
      for (int i = 0; i < 1000; ++i) vars.push_back(e.new_var());
      break;
  }
  std::vector<std::uint32_t> picks;
  if (shape == Shape::random_dag) {
    picks.resize(static_cast<std::size_t>(ops) * 3);
    for (auto& p : picks) p = rng() % 1000;
  }
  const Var hub = shape == Shape::fan ? e.new_var() : Var();

  const auto start = Clock::now();
  for (int i = 0; i < ops; ++i) {
    switch (shape) {
      case Shape::chain:
        e.push(work, {}, {vars[0]});
        break;
      case Shape::independent:
        e.push(work, {}, {vars[static_cast<std::size_t>(i)]});
        break;
      case Shape::random_dag: {
        const std::uint32_t* p = &picks[static_cast<std::size_t>(i) * 3];
        e.push(work, {vars[p[0]], vars[p[1]]}, {vars[p[2]]});
        break;
      }
      case Shape::fan:
        if (i % 1002 == 0 || i % 1002 == 1001) {
          e.push(work, {}, {hub});
        } else {
          e.push(work, {hub}, {vars[static_cast<std::size_t>(i % 1002) - 1]});
        }
        break;
    }
  }
  e.wait_all();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace depengine::bench
