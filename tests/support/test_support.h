// Helpers shared by the ops and frontend tests.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "depengine/engine.h"

namespace depengine::test {

// n integer values in [lo, hi] as floats: sums and products of them are exact in float.
inline std::vector<float> ints(std::size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(g));
  return v;
}

// Counts pushes, to check that a rejected call pushed nothing.
class PushCounter final : public Observer {
 public:
  void on_push(const OpInfo&) override { ++pushes; }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {}
  void on_end(std::uint64_t, bool, bool) override {}
  std::atomic<int> pushes{0};
};

// Work (on a stream, a worker) that blocks until the test opens the gate, for 10 s at most,
// so that a test that never opens it fails instead of hanging.
class Gate {
 public:
  void open() {
    std::lock_guard lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(10), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Expects `f` to throw depengine::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    for (const char* p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << e.what() << "' lacks '" << p << "'";
    }
  }
}

// Expects `f` to throw depengine::Error whose message contains `part`.
template <class F>
void expect_error(F&& f, const std::string& part) {
  expect_error(std::forward<F>(f), {part.c_str()});
}

// Expects `f` to rethrow the original std::runtime_error with message `what` (a failure
// reaching a blocker keeps its type and text).
template <class F>
void expect_runtime_error(F&& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), what);
  }
}

}  // namespace depengine::test
