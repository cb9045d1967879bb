#include "scenarios.h"

#include <string>

#include "depengine/error.h"

namespace depengine::bench {

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

double ideal_speedup(Shape shape, int threads) noexcept {
  return shape == Shape::chain ? 1.0 : static_cast<double>(threads);
}

graphfile::Program scenario_program(Shape shape, int ops, double op_us, std::uint32_t seed) {
  switch (shape) {
    case Shape::chain:
      return graphfile::generate_chain(1, ops, op_us);
    case Shape::independent:
      return graphfile::generate_independent(ops, op_us);
    case Shape::random_dag:
      return graphfile::generate_random(ops, 1000, 2, 1, seed, op_us);
    case Shape::fan:
      return graphfile::generate_fan(ops, op_us);
  }
  throw Error("unknown scenario");
}

double run_scenario(Engine& e, Shape shape, int ops, double op_us, std::uint32_t seed) {
  return graphfile::run_plain(e, scenario_program(shape, ops, op_us, seed));
}

}  // namespace depengine::bench
