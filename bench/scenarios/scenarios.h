// The engine-overhead scenarios shared by the Google Benchmark suite (bench/engine) and
// `depengine bench`: DAG shapes pushed into an engine, timed from the first push until
// wait_all returns.
#pragma once

#include <cstdint>
#include <string_view>

#include <depengine/engine.h>

namespace depengine::bench {

enum class Shape {
  chain,        // every op writes the same var
  independent,  // every op writes its own var
  random_dag,   // 1000 vars; each op reads 2 random vars and writes a third
  fan,          // blocks of: one write, 1000 reads of it, one write
};

inline constexpr Shape kShapes[] = {Shape::chain, Shape::independent, Shape::random_dag,
                                    Shape::fan};

std::string_view shape_name(Shape shape) noexcept;
// Parses a name printed by shape_name; throws depengine::Error otherwise.
Shape parse_shape(std::string_view name);

// Spins for `us` microseconds (0: returns at once). Stands in for an op's work.
void busy_wait_us(double us) noexcept;

// Pushes `ops` operations of the shape, each busy for `op_us`, then waits for all of them.
// Returns the wall time in seconds from the first push to the return of wait_all. Var
// creation happens before the clock starts.
double run_scenario(Engine& engine, Shape shape, int ops, double op_us, std::uint32_t seed = 1);

// The largest speedup the shape allows on `threads` workers (its parallelism, capped).
double ideal_speedup(Shape shape, int threads) noexcept;

}  // namespace depengine::bench
