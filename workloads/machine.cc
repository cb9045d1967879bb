#include "machine.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#ifdef __linux__
#include <sched.h>
#endif

namespace depengine::bench {

unsigned usable_cpus() noexcept {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<unsigned>(CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

double line_transfer_ns() {
  // The first rounds are not timed: they give the scheduler time to place the two threads.
  constexpr long kWarmup = 100000, kRounds = 400000;
  struct alignas(64) Line {
    std::atomic<long> turn{0};
  } line;
  constexpr long kTurns = 2 * (kWarmup + kRounds);
  std::thread other([&] {
    for (long i = 1; i < kTurns; i += 2) {
      spin_until([&] { return line.turn.load(std::memory_order_acquire) == i; });
      line.turn.store(i + 1, std::memory_order_release);
    }
  });
  std::chrono::steady_clock::time_point t0;
  for (long i = 0; i < kTurns; i += 2) {
    if (i == 2 * kWarmup) t0 = std::chrono::steady_clock::now();
    spin_until([&] { return line.turn.load(std::memory_order_acquire) == i; });
    line.turn.store(i + 1, std::memory_order_release);
  }
  const auto t1 = std::chrono::steady_clock::now();
  other.join();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * kRounds);
}

}  // namespace depengine::bench
