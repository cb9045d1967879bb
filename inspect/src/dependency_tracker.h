// Derives dependency edges from a stream of pushes, as the contract orders accesses. The ops
// of a run of commute (or reduce) accesses to a var get no edges among themselves: each
// depends on the accesses before the run, and the next other access depends on all of them.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "depengine/graph.h"
#include "depengine/observer.h"

namespace depengine::detail {

// One dependency of the op being added: it waits for the op with key `from`.
struct Dependency {
  std::uint64_t from = 0;
  DepKind kind = DepKind::raw;
  std::uint64_t var = 0;
  std::uint64_t version = 0;
};

// Feed ops in push order; each call returns the dependencies on earlier ops. Keys are
// whatever identifies an op to the caller (a node index, an op id). Not thread-safe.
class DependencyTracker {
 public:
  void add(std::uint64_t key, std::span<const VarAccess> accesses, std::vector<Dependency>& out);

 private:
  struct VarState {
    // The last write: one op, or the ops of a commute or reduce run once it has ended.
    std::vector<std::uint64_t> writers;
    std::uint64_t version = 0;  // the version the last writer created
    std::vector<std::uint64_t> readers;  // readers of that version, in push order
    // The commute or reduce run still open (each op depends on the state before the run).
    std::vector<std::uint64_t> run;
    AccessMode run_mode = AccessMode::commute;
  };
  std::unordered_map<std::uint64_t, VarState> vars_;
};

}  // namespace depengine::detail
