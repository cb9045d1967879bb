// OpenMP tasks (libgomp): depend(inout: hist) for rw, depend(mutexinoutset: hist) for
// commute, and for reduce a taskgroup task_reduction(+: hist[:kBins]) with in_reduction
// count tasks (OpenMP 5.0).
#include <omp.h>

#include "histogram.h"

namespace depengine::histogram {

namespace {
void run_omp(const Problem& p, Access access, int threads, std::uint32_t* data,
             std::uint64_t* hist) {
  const std::size_t n = p.chunk_size();
#pragma omp parallel num_threads(threads)
#pragma omp single
  {
    if (access == Access::reduce) {
#pragma omp taskgroup task_reduction(+ : hist[:kBins])
      for (std::size_t c = 0; c < p.chunks; ++c) {
        std::uint32_t* out = data + c * n;
#pragma omp task firstprivate(c, out) depend(out : out[0])
        fill_chunk(p, c, out);
#pragma omp task firstprivate(out) depend(in : out[0]) in_reduction(+ : hist[:kBins])
        count_chunk(p, out, hist);
      }
    } else {
      for (std::size_t c = 0; c < p.chunks; ++c) {
        std::uint32_t* out = data + c * n;
#pragma omp task firstprivate(c, out) depend(out : out[0])
        fill_chunk(p, c, out);
        if (access == Access::commute) {
#pragma omp task firstprivate(out) depend(in : out[0]) depend(mutexinoutset : hist[0])
          count_chunk(p, out, hist);
        } else {
#pragma omp task firstprivate(out) depend(in : out[0]) depend(inout : hist[0])
          count_chunk(p, out, hist);
        }
      }
    }
#pragma omp taskwait
  }
}
}  // namespace

Runtime openmp_runtime(int threads) {
  Runtime r{"openmp", {Access::rw, Access::commute, Access::reduce}, "", {}};
  r.run = [threads](const Problem& p, Access a, std::uint32_t* data, std::uint64_t* hist) {
    run_omp(p, a, threads, data, hist);
  };
  return r;
}

}  // namespace depengine::histogram
