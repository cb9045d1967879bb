#include "dependency_tracker.h"

namespace depengine::detail {

namespace {
bool grouped(AccessMode m) noexcept { return m == AccessMode::commute || m == AccessMode::reduce; }
}  // namespace

void DependencyTracker::add(std::uint64_t key, std::span<const VarAccess> accesses,
                            std::vector<Dependency>& out) {
  out.clear();
  for (const VarAccess& a : accesses) {
    VarState& v = vars_[a.var];
    // A run of commute or reduce accesses ends at the first access of another mode: its ops
    // are, together, the var's last write.
    if (!v.run.empty() && a.mode != v.run_mode) {
      v.writers = std::move(v.run);
      v.run.clear();
      v.readers.clear();
    }
    const bool reads = a.mode != AccessMode::write && a.mode != AccessMode::reduce;
    const bool writes = a.mode != AccessMode::read;
    if (reads) {
      for (std::uint64_t w : v.writers) {
        if (w != key) out.push_back({w, DepKind::raw, a.var, v.version});
      }
    }
    if (!writes) {
      // Recording may start mid-program: the first access seen tells the version.
      if (v.writers.empty()) v.version = a.version;
      if (v.readers.empty() || v.readers.back() != key) v.readers.push_back(key);
      continue;
    }
    // A read_write access reads the version it overwrites, so its RAW edge from the last
    // writer already orders it after that write.
    if (!reads) {
      for (std::uint64_t w : v.writers) {
        if (w != key) out.push_back({w, DepKind::waw, a.var, v.version});
      }
    }
    for (std::uint64_t r : v.readers) {
      if (r != key) out.push_back({r, DepKind::war, a.var, v.version});
    }
    if (grouped(a.mode)) {
      // The ops of a run are not ordered among themselves: each depends on what came before
      // the run, which stays the var's state until the run ends.
      v.run_mode = a.mode;
      v.run.push_back(key);
      continue;
    }
    v.readers.clear();
    v.writers.assign(1, key);
    v.version = a.version;
  }
}

}  // namespace depengine::detail
