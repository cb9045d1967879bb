// npx.memory_stats / reset_memory_peak / pool_cap / set_pool_cap: array storage and the pool that keeps
// freed host blocks for reuse (frontend nd::memory_stats, nd::set_pool_cap).
#include <climits>

#include "binding.h"

namespace depengine::python {

void bind_memory(nb::module_& npx) {
  npx.def("memory_stats",
          [] {
            const nd::MemoryStats s = nd::memory_stats();
            nb::dict d;
            d["in_use"] = s.in_use;
            d["peak"] = s.peak;
            d["cached"] = s.cached;
            d["pool_cap"] = nd::pool_cap();
            return d;
          },
          "Bytes of array storage in use, the most at once, the freed host storage the pool "
          "keeps for reuse (cached, at most pool_cap) and the pool's cap. Process-wide.");
  npx.def("reset_memory_peak", &nd::reset_memory_peak,
          "Starts memory_stats()['peak'] again from what is in use now.");
  npx.def("pool_cap", [] { return nd::pool_cap(); },
          "The most bytes of freed host storage kept for reuse (DEPENGINE_POOL_CAP_MB, "
          "default 64 MiB).");
  npx.def("set_pool_cap",
          [](nb::handle bytes) {
            nd::set_pool_cap(static_cast<std::size_t>(
                int_arg(bytes, "set_pool_cap", "bytes", 0, LLONG_MAX)));
          },
          nb::arg("bytes").none(),
          "Sets the pool's cap in bytes and gives back at once what it holds beyond it (0: "
          "keep nothing).");
}

}  // namespace depengine::python
