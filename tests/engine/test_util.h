// Helpers shared by the engine tests.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <depengine/engine.h>

#include "support/test_support.h"

namespace depengine::test {

// The record pool hands out plain heap blocks under ASan and TSan (record_pool.cc), so that
// the sanitizers see each record's lifetime: tests of which block comes back skip there.
constexpr bool kRecordPoolBypassed =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

// Engine kinds with worker counts, for parameterised tests.
struct EngineParam {
  std::string kind;
  int threads;
  friend void PrintTo(const EngineParam& p, std::ostream* os) { *os << p.kind << "/" << p.threads; }
};

inline std::string param_name(const testing::TestParamInfo<EngineParam>& info) {
  return info.param.kind + "_" + std::to_string(info.param.threads);
}

// Polls (yielding) until `reached` holds, for 10 s at most; false if it never did. Tests wait
// for another thread to reach a point with it instead of sleeping a fixed time, and a
// missing behaviour fails the test instead of hanging it.
template <class Pred>
bool eventually(Pred&& reached) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!reached()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

inline std::unique_ptr<Engine> make_engine(const EngineParam& p, EngineOptions o = {}) {
  o.cpu_threads = p.threads;
  return Engine::create(p.kind, o);
}

inline const auto kAllEngines =
    testing::Values(EngineParam{"naive", 1}, EngineParam{"threaded", 1},
                    EngineParam{"threaded", 2}, EngineParam{"threaded", 4});

}  // namespace depengine::test
