// What `depengine demo` concludes from its figures. Each function takes the figures one
// experiment printed and returns the paragraph printed beside them, so that every claim is
// computed from the figures (a comparison with a threshold or a ratio choosing among
// phrasings) rather than written in advance. Pure functions: no clocks, no engine, no I/O;
// tests/tools/demo_conclusions_test.cc pins the rules down.
//
//   using namespace depengine::cli::conclusions;
//   ImprovingFigures f{.ops = 10000, .runs = 5, .sync = 0.09, .pushed = 0.017, .async = 0.018};
//   std::string text = explain_improving(f);  // "... So the frontend is the bottleneck ..."
//
// Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace depengine::cli::conclusions {

// How a figure is printed: "12.3 ms", "4.56 us", "1.5 MiB", "1.4 x", "0.22 %".
std::string ms(double seconds);
std::string us(double seconds);
std::string mib(std::size_t bytes);
std::string times(double ratio);
std::string percent(double fraction);

// The median of `samples` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> samples);

// Two durations are "about the same" when the longer is within this factor of the shorter.
// Single runs of the demo's 10-1000 ms loops spread by about ±10% on a shared 2-core machine.
inline constexpr double kSameTime = 1.15;

// 1. `ops` pushed ops (random matrices and products): on the naive engine (total), and on
// the threaded one (when the pushes returned, when waitall returned). Seconds.
struct AsynchronyFigures {
  int ops = 0;
  double naive_total = 0;
  double push = 0;
  double threaded_total = 0;
};
std::string explain_asynchrony(const AsynchronyFigures& f);

// 2. One product, then one way of waiting for it. `extra` names the work the blocker does
// besides waiting (empty if none), which explains a cost above the product's; a blocker
// without any that costs more is said to do no work besides waiting, so the reader sees
// the difference is the spread between runs, not the barrier.
struct Blocker {
  std::string name;
  double seconds = 0;
  std::string extra;
};
std::string explain_barriers(const std::vector<Blocker>& blockers);

// 3. `ops` times y = x + 1: the medians over `runs` runs of the loop that waits after each
// op (sync), of the pushes of the loop that does not (pushed), and of that loop up to its
// waitall (async). Seconds.
struct ImprovingFigures {
  int ops = 0;
  int runs = 0;
  double sync = 0;
  double pushed = 0;
  double async = 0;
};
// The pipelined loop is frontend-bound when it costs about t1 per op (within kSameTime);
// above that the frontend ran ahead and waitall waited for the backend.
inline constexpr double kFrontendBound = kSameTime;
std::string explain_improving(const ImprovingFigures& f);
// The same loops on the default engine (`small`), which runs an op this small on the calling
// thread while nothing else runs, beside `handed`, where every op goes to a worker.
std::string explain_small_ops(const ImprovingFigures& handed, const ImprovingFigures& small);

// 4. `dots` products, then host work on the frontend: on the naive engine (the products
// computed inline, then the host work, the total) and on a one-worker threaded engine (one
// push of a product, the total). Seconds.
struct OverlapFigures {
  int dots = 0;
  unsigned cores = 0;
  double naive_dots = 0;
  double naive_host = 0;
  double naive_total = 0;
  double push = 0;
  double threaded_total = 0;
};
// "Yes" when the overlap saved at least kOverlapYes of the serial total, "Barely" when at
// least kOverlapBarely, else "No": below that it is within the spread of single runs.
inline constexpr double kOverlapYes = 0.10;
inline constexpr double kOverlapBarely = 0.05;
std::string overlap_answer(const OverlapFigures& f);
std::string explain_overlap(const OverlapFigures& f);

// 5. One run of the batch loop. rss_gain and page_faults are only known when the run had a
// process to itself (see demo.cc); otherwise they carry another run's memory and are unset.
struct MemoryRun {
  std::size_t peak_pending = 0;
  std::size_t peak_storage = 0;
  std::optional<std::size_t> rss_gain;
  std::optional<long> page_faults;
  double seconds = 0;
};
// `batches` batches of the loop, each holding `batch_bytes` of array storage until its ops
// have run; the bounded run had max_inflight = `bound`.
struct MemoryFigures {
  int batches = 0;
  std::size_t batch_bytes = 0;
  long bound = 0;
  MemoryRun unbounded;
  MemoryRun bounded;
};
std::string explain_memory(const MemoryFigures& f);

}  // namespace depengine::cli::conclusions
