// The histogram benchmark (issue 14): 2^26 values into 1,024 bins from 256 chunks, one
// histogram. Per chunk, a fill task makes the chunk's values (its own var) and a count task
// reads them and adds them into the histogram with one of three accesses:
//   rw       the histogram is read-written: count tasks run one at a time, in push order;
//   commute  one at a time, in any order (StarPU STARPU_COMMUTE, OpenMP mutexinoutset);
//   reduce   concurrently, into private histograms summed at the end (StarPU STARPU_REDUX,
//            OpenMP task reductions, oneTBB enumerable_thread_specific).
// The irregular variant makes fill tasks cost 1 to 8 times the base, at random, so chunks
// become ready out of push order. One file per runtime, behind driver.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace depengine::histogram {

constexpr std::size_t kBins = 1024;

enum class Access { rw, commute, reduce };
const char* access_name(Access a);

struct Problem {
  std::size_t values = std::size_t{1} << 26;
  std::size_t chunks = 256;
  bool irregular = false;
  std::size_t chunk_size() const { return values / chunks; }
  // How many hash rounds chunk `c`'s fill costs (1 when regular; 1..8 when irregular).
  unsigned rounds(std::size_t c) const;
};

// Writes chunk `c`'s values (chunk_size() of them) to `out`.
void fill_chunk(const Problem& p, std::size_t c, std::uint32_t* out);
// Adds chunk `c`'s values (`in`) into `hist` (kBins counters).
void count_chunk(const Problem& p, const std::uint32_t* in, std::uint64_t* hist);

// A runtime: runs the whole program (every fill and count task) and returns when the
// histogram is complete. `data` holds values() values, `hist` kBins zeroed counters.
struct Runtime {
  std::string name;
  // Accesses it has a way to express (empty: missing, with `missing` saying why).
  std::vector<Access> accesses;
  std::string missing;
  std::function<void(const Problem&, Access, std::uint32_t* data, std::uint64_t* hist)> run;
};

// One factory per runtime file; `threads` workers.
Runtime serial_runtime();
Runtime depengine_runtime(int threads);
Runtime openmp_runtime(int threads);
Runtime starpu_runtime(int threads);
Runtime tbb_runtime(int threads);

}  // namespace depengine::histogram
