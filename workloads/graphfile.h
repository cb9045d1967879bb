// Graph files: a program described in JSON instead of C++, so that DAGs can be generated,
// analyzed and run from the command line.
//
//   { "ops": [ {"name": "potrf_0", "reads": [], "writes": ["A00"], "cost_us": 40},
//              {"name": "trsm_1_0", "reads": ["A00"], "writes": ["A10"], "cost_us": 60,
//               "device": "cpu", "lane": "compute", "priority": 1} ] }
//
// Vars are named by strings and created on first use; an op that lists a var in both
// "reads" and "writes" reads and writes it. "commute": [...] and "reduce": [...] list vars
// the op updates as depengine::commute(v) and depengine::reduce(v) do (a run of such ops
// runs in any order; a var listed there may not be in another list of the same op, and an
// op that reduces must be on the CPU); the
// ops a graph file runs only spin, so their reductions combine nothing. `cost_us` (default 0) is busy work of that
// length; `device` ("cpu", "gpu(N)"), `lane` and `priority` are optional. An object that
// repeats a key is malformed (JSON parsers disagree on which one counts). A graph JSON
// dump (Graph::to_json) is accepted as well: its nodes become the ops, in dump order, and
// its vars are told apart by id — their names are only labels, so two vars that share a
// name stay two vars.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "depengine/device.h"
#include "depengine/engine.h"
#include "depengine/graph.h"

namespace depengine::graphfile {

struct OpSpec {
  std::string name;
  std::vector<std::size_t> reads;   // indices into Program::vars, each once
  std::vector<std::size_t> writes;  // likewise; a var in both lists is read and written
  std::vector<std::size_t> commutes;  // commute(v) accesses: in no other list
  std::vector<std::size_t> reduces;   // reduce(v) accesses: in no other list
  double cost_us = 0;
  Device device;
  Lane lane = Lane::compute;
  int priority = 0;
};

struct Program {
  // Var names in order of first use. Unique in a graph file; a program read from a dump may
  // repeat a name (its vars are told apart by id).
  std::vector<std::string> vars;
  std::vector<OpSpec> ops;        // in push order
};

// A malformed graph file. The message names the op index and the field.
class FileError : public std::runtime_error {
 public:
  // `op` is the index of the offending op, or -1 when the problem is not inside one.
  FileError(const std::string& message, long op, std::string field)
      : std::runtime_error(message), op_(op), field_(std::move(field)) {}
  long op() const noexcept { return op_; }
  const std::string& field() const noexcept { return field_; }

 private:
  long op_;
  std::string field_;
};

// A graph file that cannot be read: missing, unreadable, a directory, a device. Not a
// FileError: nothing is wrong with its contents (the command line exits 1, not 2).
class ReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The largest cost_us a file may give (1000 s), so a typo cannot start a day-long run.
inline constexpr double kMaxCostUs = 1e9;
// The most var accesses (reads + writes over all ops) a generator writes: ~100 MB of JSON.
inline constexpr long kMaxGeneratedAccesses = 10'000'000;

// Parses a graph file or a graph JSON dump. Throws FileError; never a partial program.
Program parse_program(std::string_view text);
// Throws FileError, naming the place as parse_program does, when an object in the JSON
// `text` repeats a key or the text holds a NUL byte; nothing else is checked. For callers
// that take keys out of a file before parse_program sees it (re-serializing would keep only
// the last of two keys, and drop what follows a NUL, which nlohmann takes for the end).
void check_unique_keys(std::string_view text);
// Reads `path` ("-": standard input) and parses it. A regular file, or a pipe (so that
// `depengine run <(depengine generate ...)` works). Throws ReadError when it cannot be
// read ("'x' is a directory", "'x' is not a regular file or a pipe"), FileError when it
// is malformed.
Program load_program(const std::string& path);

// The program as a graph file (what `depengine generate` writes), one op per line. Vars
// that share a name (from a dump) get distinct ones, "name#2", "name#3", ..., since a
// graph file tells vars apart by name.
std::string to_json(const Program& program);

// The program's dependency graph as the engine would record it (node ids are op indices,
// costs are cost_us, var ids are var indices + 1 and carry their names).
Graph to_graph(const Program& program);

// Throws FileError (field "device") for the first op on a GPU that is not there:
// `gpus` is how many GPUs (real or host-simulated) the engine that will run it has.
void check_devices(const Program& program, int gpus);

// Runs the program on `engine`: one var per program var, one push per op busy-spinning for
// its cost, then wait_all. When `recorder` is given, the vars get their names in it.
// Returns the wall time in seconds from the first push to the end of wait_all.
double run(Engine& engine, const Program& program, GraphRecorder* recorder = nullptr);
// For overhead benchmarks: runs the program as plain CPU ops without names, placements or
// priorities (the engine's cheapest push), every access resolved before the clock starts.
// Returns the wall time in seconds from the first push to the end of wait_all.
double run_plain(Engine& engine, const Program& program);

// Well-known DAG shapes: the one workload generator of `depengine generate`, `depengine
// bench`, the engine benchmarks and the peers benchmark. Every op costs `cost_us`. Throw
// std::invalid_argument for sizes out of range, checked before anything is built (a program
// of more than kMaxGeneratedAccesses accesses, or of more than 10^6 ops, is out of range).
//
// Tiled Cholesky, T(T+1)(T+2)/6 ops; `repeats` factorizations of the same tiles in a row.
Program generate_cholesky(int tiles, double cost_us, int repeats = 1);
Program generate_lu(int tiles, double cost_us);        // no pivoting; T(T+1)(2T+1)/6 ops
// 1-D, 3-point: a row of init ops, then `steps` steps (a grid, below, of GridPattern::stencil).
Program generate_stencil(int width, int steps, double cost_us);
// A binary reduction of `leaves` leaves; `rounds` reductions in a row, where the leaves of
// every round but the first read the previous round's root.
Program generate_tree(int leaves, double cost_us, int rounds = 1);
Program generate_forkjoin(int width, int stages, double cost_us);
// `width` independent chains of `steps` ops; each op reads and writes its chain's var.
Program generate_chain(int width, int steps, double cost_us);
// `ops` independent ops, each writing its own var.
Program generate_independent(int ops, double cost_us);
// Blocks of kFanReads + 2 ops: one write of the var "hub", kFanReads ops that each read it
// and write a var of their own, one write of "hub"; the last block is cut at `ops` ops.
inline constexpr int kFanReads = 1000;
Program generate_fan(int ops, double cost_us);

// Task Bench's grid patterns: `steps` steps over `width` points held in two buffers of vars;
// a point reads points of the buffer the previous step wrote and writes its own point of the
// other buffer (no init row: the first step reads vars nothing wrote).
enum class GridPattern {
  stencil,  // i - 1, i, i + 1
  nearest,  // the 5 nearest points, i - 2 to i + 2
  spread,   // 5 points spread across the row: i + k * (width / 5) mod width, k < 5
  fft,      // butterfly: i and i ^ 2^((step - 1) mod log2(width)); width a power of two
};
std::string_view grid_pattern_name(GridPattern p) noexcept;
Program generate_grid(GridPattern pattern, int width, int steps, double cost_us);
// `ops` ops over `vars` vars, each reading `reads` and writing `writes` distinct vars
// chosen by a seeded generator (the same seed gives the same file everywhere).
Program generate_random(int ops, int vars, int reads, int writes, std::uint64_t seed,
                        double cost_us);

// Busy-waits for `us` microseconds on the steady clock.
void spin_for_us(double us);

}  // namespace depengine::graphfile
