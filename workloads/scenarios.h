// The engine-overhead scenarios of `depengine bench` and the Google Benchmark suite
// (bench/engine): DAG shapes from the workload generator (graphfile.h), pushed into an engine
// and timed from the first push until wait_all returns.
#pragma once

#include <cstdint>
#include <string_view>

#include <depengine/engine.h>

#include "graphfile.h"

namespace depengine::bench {

enum class Shape {
  chain,        // every op reads and writes the same var (generate_chain, width 1)
  independent,  // every op writes its own var (generate_independent)
  random_dag,   // 1000 vars; each op reads 2 random vars and writes 1 (generate_random)
  fan,          // blocks of: one write, 1000 reads of it, one write (generate_fan)
};

inline constexpr Shape kShapes[] = {Shape::chain, Shape::independent, Shape::random_dag,
                                    Shape::fan};

std::string_view shape_name(Shape shape) noexcept;
// Parses a name printed by shape_name; throws depengine::Error otherwise.
Shape parse_shape(std::string_view name);

// `ops` operations of the shape, each busy for `op_us`; `seed` picks the random DAG.
graphfile::Program scenario_program(Shape shape, int ops, double op_us, std::uint32_t seed = 1);

// Pushes scenario_program(shape, ops, op_us, seed) as plain ops (graphfile::run_plain), then
// waits for all of them. Returns the wall time in seconds from the first push to the return
// of wait_all; generating the program and creating its vars happen before the clock starts.
double run_scenario(Engine& engine, Shape shape, int ops, double op_us, std::uint32_t seed = 1);

// The largest speedup the shape allows on `threads` workers (its parallelism, capped).
double ideal_speedup(Shape shape, int threads) noexcept;

}  // namespace depengine::bench
