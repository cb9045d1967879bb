// `depengine run FILE` under mpirun: the graph file's program on every rank through
// depengine::dist. Vars are owned block-cyclically in order of first use (--block B: B
// consecutive vars per rank, default 1) unless the file gives owners in a top-level
// "owners" object ({"A00": 0, "A10": 1, ...}; every var it names must exist, every owner
// must be a rank). Each op spins for its cost_us on the rank that owns its first written
// var and writes a value derived from its reads, so the final values are checked against
// the same program run sequentially.
//
//   mpirun -np 4 depengine run cholesky.json [--block 2] [--bytes 8] [--trace t.json]
#include <algorithm>
#include <chrono>
#include <iostream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "depengine/dist.h"
#include "depengine/profiler.h"
#include "graphfile.h"

namespace depengine::cli {
namespace {

namespace gf = depengine::graphfile;
namespace dd = depengine::dist;

// The value an op writes into its j-th written var, from the values it read.
std::uint64_t op_value(std::size_t op, std::size_t j, const std::vector<std::uint64_t>& reads) {
  std::uint64_t acc = 1469598103934665603ull ^ (op + 1);
  for (std::uint64_t r : reads) acc = (acc ^ r) * 1099511628211ull;
  return acc + j;
}

std::string read_text(const std::string& path) {
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw gf::ReadError("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

int run_dist(int argc, char** argv) {
  const Args args(argc, argv, {"--block", "--bytes", "--trace"}, {});
  if (args.positional().size() != 1) throw UsageError("expected exactly one FILE");
  const std::string file = args.positional().front();
  const int block = args.integer("--block", 1, 1, 1 << 20);
  const int bytes = args.integer("--bytes", 8, 8, 1 << 26);

  // Owners given by the file: taken out before the graph-file parser sees it.
  std::string text = read_text(file);
  // Before "owners" is taken out: the dump below keeps only the last of two keys.
  gf::check_unique_keys(text);
  nlohmann::json owners;
  {
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    if (!doc.is_discarded() && doc.is_object() && doc.contains("owners")) {
      owners = doc["owners"];
      if (!owners.is_object())
        throw gf::FileError("\"owners\" must be an object of var name -> rank", -1, "owners");
      doc.erase("owners");
      text = doc.dump();
    }
  }
  const gf::Program program = gf::parse_program(text);
  // Before any work, as on one machine; every rank checks, so all of them stop alike.
  if (args.has("--trace")) check_writable("--trace", args.str("--trace"));

  dd::Context ctx;
  std::vector<int> owner(program.vars.size());
  for (std::size_t v = 0; v < owner.size(); ++v)
    owner[v] = static_cast<int>((v / static_cast<std::size_t>(block)) % static_cast<std::size_t>(ctx.size()));
  for (const auto& [name, r] : owners.items()) {
    auto it = std::find(program.vars.begin(), program.vars.end(), name);
    if (it == program.vars.end())
      throw gf::FileError("\"owners\" names var '" + name + "', which no op uses", -1, "owners");
    if (!r.is_number_integer() || r.get<long>() < 0 || r.get<long>() >= ctx.size())
      throw gf::FileError("\"owners\": var '" + name + "' needs a rank in 0.." +
                              std::to_string(ctx.size() - 1) + ", got " + r.dump(),
                          -1, "owners");
    owner[static_cast<std::size_t>(it - program.vars.begin())] = r.get<int>();
  }
  std::shared_ptr<Profiler> prof;
  if (args.has("--trace")) {
    prof = std::make_shared<Profiler>();
    ctx.set_observer(prof);
  }
  std::vector<dd::DistVar> vars;
  for (std::size_t v = 0; v < owner.size(); ++v)
    vars.push_back(ctx.new_var(static_cast<std::size_t>(bytes), owner[v]));
  ctx.wait_all();

  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const gf::OpSpec& op = program.ops[i];
    std::vector<dd::DistVar> r, w;
    for (std::size_t v : op.reads) r.push_back(vars[v]);
    for (std::size_t v : op.writes) w.push_back(vars[v]);
    ctx.push(
        [i, cost = op.cost_us](dd::Args a) {
          gf::spin_for_us(cost);
          std::vector<std::uint64_t> in;
          for (std::size_t k = 0; k < a.reads(); ++k) in.push_back(*a.read<std::uint64_t>(k));
          for (std::size_t j = 0; j < a.writes(); ++j) *a.write<std::uint64_t>(j) = op_value(i, j, in);
        },
        r, w, {.name = op.name, .priority = op.priority});
  }
  ctx.wait_all();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The same program sequentially; every rank compares every var.
  std::vector<std::uint64_t> expect(program.vars.size(), 0);
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    std::vector<std::uint64_t> in;
    for (std::size_t v : program.ops[i].reads) in.push_back(expect[v]);
    for (std::size_t j = 0; j < program.ops[i].writes.size(); ++j)
      expect[program.ops[i].writes[j]] = op_value(i, j, in);
  }
  std::size_t wrong = 0;
  for (std::size_t v = 0; v < vars.size(); ++v) {
    std::vector<std::byte> got = ctx.get(vars[v]);
    std::uint64_t x = 0;
    std::memcpy(&x, got.data(), sizeof x);
    wrong += x != expect[v];
  }
  const auto stats = ctx.gather_stats();
  std::uint64_t messages = 0, sent_bytes = 0;
  for (const auto& s : stats) {
    messages += s.messages_sent;
    sent_bytes += s.bytes_sent;
  }
  if (ctx.rank() == 0) {
    std::printf("dist run: %zu ops, %zu vars on %d ranks (%s owners): %.3f ms, %llu messages "
                "(%.1f kB)\n",
                program.ops.size(), program.vars.size(), ctx.size(),
                owners.empty() ? ("block-cyclic, block " + std::to_string(block)).c_str() : "file",
                secs * 1e3, static_cast<unsigned long long>(messages),
                static_cast<double>(sent_bytes) / 1e3);
    std::printf("values equal to the sequential run: %s (%zu of %zu differ)\n",
                wrong ? "NO" : "yes", wrong, vars.size());
  }
  if (prof) {
    ctx.write_trace(args.str("--trace"), *prof);
    if (ctx.rank() == 0) std::printf("wrote the Chrome trace of every rank to %s\n", args.str("--trace").c_str());
  }
  return wrong ? 1 : 0;
}

}  // namespace depengine::cli
