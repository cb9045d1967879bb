#include "handoff.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace depengine::peers {

#ifdef __linux__
namespace {

bool pin(pthread_t thread, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(thread, sizeof set, &set) == 0;
}

// One round: `kPasses` one-way passes of the line between the two CPUs; ns per pass, or
// nothing when a thread could not be pinned.
std::optional<double> one_round(int cpu_a, int cpu_b) {
  constexpr long kPasses = 100000;
  alignas(64) std::atomic<long> turn{0};
  std::atomic<bool> pinned_b{false}, failed{false};
  std::thread b([&] {
    if (!pin(pthread_self(), cpu_b)) {
      failed = true;
      return;
    }
    pinned_b = true;
    for (long i = 1; i < kPasses; i += 2) {
      while (turn.load(std::memory_order_acquire) != i) {
        if (failed.load(std::memory_order_relaxed)) return;
      }
      turn.store(i + 1, std::memory_order_release);
    }
  });
  cpu_set_t before;
  const bool saved = pthread_getaffinity_np(pthread_self(), sizeof before, &before) == 0;
  std::optional<double> ns;
  if (saved && pin(pthread_self(), cpu_a)) {
    while (!pinned_b.load() && !failed.load()) std::this_thread::yield();
    if (!failed.load()) {
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < kPasses; i += 2) {
        while (turn.load(std::memory_order_acquire) != i) {
        }
        turn.store(i + 1, std::memory_order_release);
      }
      ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
               .count() /
           kPasses;
    }
  } else {
    failed = true;
  }
  b.join();
  if (saved) pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  return ns;
}

}  // namespace

std::optional<double> handoff_ns() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return std::nullopt;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.size() < 2) return std::nullopt;
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    std::optional<double> ns = one_round(cpus[0], cpus[1]);
    if (!ns) return std::nullopt;
    rounds.push_back(*ns);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

#else

std::optional<double> handoff_ns() { return std::nullopt; }

#endif

}  // namespace depengine::peers
