#include "dependency_tracker.h"

namespace depengine::detail {

void DependencyTracker::add(std::uint64_t key, std::span<const VarAccess> accesses,
                            std::vector<Dependency>& out) {
  out.clear();
  for (const VarAccess& a : accesses) {
    VarState& v = vars_[a.var];
    const bool reads = a.mode != AccessMode::write;
    const bool writes = a.mode != AccessMode::read;
    if (reads && v.has_writer && v.writer != key) {
      out.push_back({v.writer, DepKind::raw, a.var, v.version});
    }
    if (!writes) {
      // Recording may start mid-program: the first access seen tells the version.
      if (!v.has_writer) v.version = a.version;
      if (v.readers.empty() || v.readers.back() != key) v.readers.push_back(key);
      continue;
    }
    // A read_write access reads the version it overwrites, so its RAW edge from the last
    // writer already orders it after that write.
    if (!reads && v.has_writer && v.writer != key) {
      out.push_back({v.writer, DepKind::waw, a.var, v.version});
    }
    for (std::uint64_t r : v.readers) {
      if (r != key) out.push_back({r, DepKind::war, a.var, v.version});
    }
    v.readers.clear();
    v.has_writer = true;
    v.writer = key;
    v.version = a.version;
  }
}

}  // namespace depengine::detail
