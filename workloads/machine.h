// What handing work from one core to another costs on this machine, measured by the run
// that reports it (`depengine bench`'s floor, depengine_peers' hand-off line).
//
// On a machine with few cores, an empty op's cost is mostly cache lines moving between the
// pushing core and the running core. On the shared virtual machines these benchmarks run on,
// the time one line takes is not a constant of the CPU: the host places the guest's cores
// close together (about 40-60 ns one way) or far apart (about 200-270 ns), and moves them
// within seconds. Every runtime that hands tasks between threads follows it, so a report
// prints the figure beside its own.
#pragma once

#include <thread>

namespace depengine::bench {

// The CPUs this process may run on (its affinity mask; the hardware's count elsewhere).
unsigned usable_cpus() noexcept;

// Spins until `done()`. With two CPUs or more it yields only after about a millisecond: a
// thread that yields sooner keeps two threads placed on one core working there, by context
// switches, instead of the scheduler moving one of them to the idle core. On a single CPU it
// yields at once, so that the other thread runs (the figures then measure context
// switches, and say so by their size).
template <class Done>
void spin_until(Done&& done) noexcept {
  static const unsigned yield_every = usable_cpus() >= 2 ? (1u << 20) : 1u;
  for (unsigned spins = 1; !done(); ++spins) {
    if (spins % yield_every == 0) std::this_thread::yield();
  }
}

// One-way latency of a cache line passed back and forth between two threads (ping-pong),
// in ns, after warm-up rounds that give the scheduler time to place the threads apart.
double line_transfer_ns();

}  // namespace depengine::bench
