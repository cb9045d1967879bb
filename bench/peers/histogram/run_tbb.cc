// oneTBB's idiom for a reduction: tbb::parallel_for over the chunks, each filling and counting
// into the calling thread's histogram (enumerable_thread_specific), combined at the end. No
// task graph, so only the reduce access has a counterpart.
#include <array>

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "histogram.h"

namespace depengine::histogram {

Runtime tbb_runtime(int threads) {
  auto arena = std::make_shared<oneapi::tbb::task_arena>(threads);
  Runtime r{"tbb_ets", {Access::reduce}, "", {}};
  r.run = [arena](const Problem& p, Access, std::uint32_t* data, std::uint64_t* hist) {
    using Local = std::array<std::uint64_t, kBins>;
    oneapi::tbb::enumerable_thread_specific<Local> locals([] { return Local{}; });
    arena->execute([&] {
      oneapi::tbb::parallel_for(std::size_t{0}, p.chunks, [&](std::size_t c) {
        std::uint32_t* out = data + c * p.chunk_size();
        fill_chunk(p, c, out);
        count_chunk(p, out, locals.local().data());
      });
    });
    locals.combine_each([&](const Local& l) {
      for (std::size_t i = 0; i < kBins; ++i) hist[i] += l[i];
    });
  };
  return r;
}

}  // namespace depengine::histogram
