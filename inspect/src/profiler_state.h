// The Profiler's guarded state, shared by profiler.cc and trace_json.cc.
#pragma once

#include <chrono>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "dependency_tracker.h"
#include "depengine/profiler.h"

namespace depengine {

struct Profiler::State {
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  mutable std::mutex mu;
  std::vector<OpProfile> ops;
  std::unordered_map<std::uint64_t, std::size_t> index;  // op id -> position in ops
  std::vector<std::pair<std::uint64_t, std::uint64_t>> deps;
  detail::DependencyTracker tracker;
  std::vector<detail::Dependency> scratch;
  std::vector<std::uint64_t> from_scratch;

  std::int64_t now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now() - origin)
        .count();
  }
  // The record of `id`, or null for an op pushed before the profiler was attached.
  OpProfile* find(std::uint64_t id) {
    auto it = index.find(id);
    return it == index.end() ? nullptr : &ops[it->second];
  }
};

}  // namespace depengine
