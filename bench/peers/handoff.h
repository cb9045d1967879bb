// How long one cache line takes to go from one core to another on this machine right now:
// two threads, pinned to two of the process's CPUs, pass a counter back and forth.
//
// On the shared virtual machines these benchmarks run on, the figure is not a constant of
// the CPU: the host places the guest's two cores close together (about 40-60 ns one way) or
// far apart (about 200-270 ns), and the placement changes within seconds. Every runtime
// that hands tasks between threads slows down with it (depengine's and Taskflow's
// ns per task moved 1.6-3x between fresh processes in stop 38), so the driver prints the
// figure before and after its runs, to tell a slow run from a slow placement.
#pragma once

#include <optional>

namespace depengine::peers {

// The median one-way hand-off over a few short rounds, in ns; nothing when the process may
// run on fewer than two CPUs, or the threads cannot be pinned.
std::optional<double> handoff_ns();

}  // namespace depengine::peers
