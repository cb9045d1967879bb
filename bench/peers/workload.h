// The workloads of the peers benchmark: Task Bench's dependence patterns written as lists of
// tasks, each with the set of vars it reads and the set it writes. Every runtime gets the same
// list and derives its dependencies from those sets (depengine and StarPU at submission,
// OpenMP through depend clauses, the oneTBB flow graph through edges computed here), so all
// of them run the same DAG and must produce the same final values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace depengine::peers {

// One var's value, padded to a cache line so that tasks on different cores do not share one.
struct alignas(64) Slot {
  std::uint64_t value = 0;
};

// One task: its accesses are `vars[0, n_ro)` read only, `vars[n_ro, n_ro + n_rw)` read and
// written, `vars[n_ro + n_rw, n_ro + n_rw + n_wo)` written only. Each group is sorted and
// free of duplicates, and no var is in two groups.
struct Task {
  const std::uint32_t* vars = nullptr;
  std::uint32_t n_ro = 0, n_rw = 0, n_wo = 0;

  std::span<const std::uint32_t> read_only() const noexcept { return {vars, n_ro}; }
  std::span<const std::uint32_t> read_write() const noexcept { return {vars + n_ro, n_rw}; }
  std::span<const std::uint32_t> write_only() const noexcept { return {vars + n_ro + n_rw, n_wo}; }
  // Every var the task reads (read only, then read-write).
  std::span<const std::uint32_t> reads() const noexcept { return {vars, n_ro + n_rw}; }
  // Every var the task writes (read-write, then write only).
  std::span<const std::uint32_t> writes() const noexcept { return {vars + n_ro, n_rw + n_wo}; }
};

enum class Pattern {
  trivial,     // independent tasks, each writes its own var
  chain,       // `width` independent chains, each task reads and writes its column's var
  stencil_1d,  // width 2 x threads; reads i-1, i, i+1 of the previous step (double buffered)
  nearest,     // width 16; reads the 5 nearest points of the previous step
  spread,      // width 16; reads 5 points spread across the previous step
  fft,         // width 16; butterfly: reads i and i ^ 2^s of the previous step
  tree,        // rounds of a binary reduction of 16 leaves; the leaves read the last root
  random_dag,  // 1000 vars; each task reads 2 random vars and writes 1 (seeded)
  cholesky,    // tiled Cholesky (potrf, trsm, syrk, gemm) on 8 x 8 tiles, repeated
};

inline constexpr Pattern kPatterns[] = {Pattern::trivial,    Pattern::chain,   Pattern::stencil_1d,
                                        Pattern::nearest,    Pattern::spread,  Pattern::fft,
                                        Pattern::tree,       Pattern::random_dag,
                                        Pattern::cholesky};

std::string_view pattern_name(Pattern p) noexcept;
// Throws std::invalid_argument for a name pattern_name does not print.
Pattern parse_pattern(std::string_view name);

// A pattern instance: the tasks in submission order (the serial order is the reference).
class Graph {
 public:
  // Builds about `tasks` tasks (at least one step, round or factorization) of `pattern`
  // for `threads` workers.
  Graph(Pattern pattern, std::size_t tasks, int threads);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Pattern pattern() const noexcept { return pattern_; }
  std::size_t num_vars() const noexcept { return num_vars_; }
  const std::vector<Task>& tasks() const noexcept { return tasks_; }
  // The flat access array the tasks point into (task k's accesses start at offset(k)).
  std::span<const std::uint32_t> flat() const noexcept { return flat_; }
  std::size_t offset(std::size_t task) const noexcept { return starts_[task]; }
  // The predecessors of each task implied by the access sets in submission order (RAW, WAR,
  // WAW, duplicates removed): the edges of the oneTBB flow graph.
  const std::vector<std::vector<std::uint32_t>>& predecessors() const;
  // The longest path in tasks, for the parallelism bound tasks / span.
  std::size_t span() const;

  // The vars' initial values (the same for every runtime).
  std::vector<Slot> initial_values() const;

 private:
  // Appends a task; `reads` and `writes` may overlap and hold duplicates.
  void add(std::vector<std::uint32_t> reads, std::vector<std::uint32_t> writes);
  // Points the tasks into flat_ once it has stopped growing.
  void finalize();

  Pattern pattern_;
  std::size_t num_vars_ = 0;
  std::vector<Task> tasks_;
  std::vector<std::uint32_t> flat_;
  std::vector<std::size_t> starts_;  // task k's accesses start at flat_[starts_[k]]
  mutable std::vector<std::vector<std::uint32_t>> preds_;
};

// The task body every runtime calls: mixes the task's index and the values it reads, spins
// `iters` rounds of a dependent hash chain (the task size), then stores a mix of the result
// into every var it writes. Deterministic, so final values do not depend on the schedule.
void run_task(const Task& task, std::uint64_t index, Slot* values, std::uint64_t iters) noexcept;

// Spins `iters` rounds of a dependent multiply-xorshift chain on `h`.
std::uint64_t busy(std::uint64_t h, std::uint64_t iters) noexcept;

// Rounds of `busy` per nanosecond on this machine (measured once, single thread).
double busy_rounds_per_ns();

}  // namespace depengine::peers
