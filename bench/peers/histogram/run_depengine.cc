// depengine's threaded engine: a var per chunk and one for the histogram; count tasks write
// it as a plain var (rw), commute(hist) or reduce(hist) with the hooks of a histogram
// (zeros, elementwise sum, the result as the target).
#include <array>
#include <cstring>
#include <memory>

#include <depengine/engine.h>

#include "histogram.h"

namespace depengine::histogram {

Runtime depengine_runtime(int threads) {
  auto engine = std::shared_ptr<Engine>(Engine::create("threaded", {.cpu_threads = threads}));
  Runtime r{"depengine", {Access::rw, Access::commute, Access::reduce}, "", {}};
  r.run = [engine](const Problem& p, Access access, std::uint32_t* data, std::uint64_t* hist) {
    Engine& e = *engine;
    Var h = e.new_var();
    if (access == Access::reduce) {
      e.set_reduction(h, {.identity = [] { return std::make_shared<std::array<std::uint64_t, kBins>>(); },
                          .combine =
                              [](void* into, const void* from) {
                                auto* a = static_cast<std::uint64_t*>(into);
                                const auto* b = static_cast<const std::uint64_t*>(from);
                                for (std::size_t i = 0; i < kBins; ++i) a[i] += b[i];
                              },
                          .target = hist});
    }
    const Var target = access == Access::commute ? commute(h)
                       : access == Access::reduce ? reduce(h)
                                                  : h;
    for (std::size_t c = 0; c < p.chunks; ++c) {
      Var chunk = e.new_var();
      std::uint32_t* out = data + c * p.chunk_size();
      e.push([&p, c, out] { fill_chunk(p, c, out); }, {}, {chunk});
      if (access == Access::reduce) {
        e.push([&p, out, h] { count_chunk(p, out, reduction_buffer<std::uint64_t>(h)); }, {chunk},
               {target});
      } else {
        e.push([&p, out, hist] { count_chunk(p, out, hist); }, {chunk}, {target});
      }
      e.delete_var(chunk);
    }
    e.wait_to_read(h);
    e.delete_var(h);
    e.wait_all();
  };
  return r;
}

}  // namespace depengine::histogram
