// Random distributed programs (random owners, reads, writes, placements and failing ops)
// compared exactly with the same program run sequentially in this process: every value
// (dist::Context::get on every rank) and every failure (wait_all and get rethrow it on every
// rank, with the same text).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "depengine/dist.h"

namespace dd = depengine::dist;

namespace {

struct OpSpec {
  std::string name;
  std::vector<int> reads, writes;  // var indices (duplicates allowed)
  int on_rank = -1;
  bool fails = false;
  bool wait_after = false;
};

struct Program {
  std::vector<std::size_t> words;  // per var: int64 words
  std::vector<int> owners;
  std::vector<OpSpec> ops;
};

Program make_program(std::uint32_t seed, int ranks) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Program p;
  const int nvars = 3 + pick(8);
  for (int v = 0; v < nvars; ++v) {
    p.words.push_back(1 + static_cast<std::size_t>(pick(6)));
    p.owners.push_back(pick(ranks));
  }
  const int nops = 20 + pick(40);
  for (int i = 0; i < nops; ++i) {
    OpSpec op;
    op.name = "op" + std::to_string(i);
    for (int k = pick(4); k > 0; --k) op.reads.push_back(pick(nvars));
    for (int k = 1 + pick(2); k > 0; --k) op.writes.push_back(pick(nvars));
    if (pick(5) == 0) op.on_rank = pick(ranks);
    op.fails = pick(12) == 0;
    op.wait_after = pick(10) == 0;
    p.ops.push_back(std::move(op));
  }
  return p;
}

// The op body, shared by the distributed run and the oracle: every written word is set from
// all read words (and its own old value when the var is also read).
void kernel(const OpSpec& op, const std::vector<const std::uint64_t*>& r,
            const std::vector<std::size_t>& rn, const std::vector<std::uint64_t*>& w,
            const std::vector<std::size_t>& wn) {
  if (op.fails) throw std::runtime_error("boom in " + op.name);
  std::uint64_t acc = static_cast<std::uint64_t>(op.name.size()) * 1000003u;
  for (std::size_t i = 0; i < r.size(); ++i)
    for (std::size_t k = 0; k < rn[i]; ++k) acc = acc * 31 + r[i][k] + static_cast<std::uint64_t>(k);
  for (std::size_t j = 0; j < w.size(); ++j) {
    bool rw = false;
    for (int rv : op.reads) rw |= rv == op.writes[j];
    for (std::size_t k = 0; k < wn[j]; ++k)
      w[j][k] = (rw ? w[j][k] * 3 : 0) + acc + static_cast<std::uint64_t>(17 * j + k);
  }
}

struct OracleVar {
  std::vector<std::uint64_t> value;
  std::optional<std::string> poison;
};

int exec_rank(const Program& p, const OpSpec& op) {
  if (op.on_rank >= 0) return op.on_rank;
  return p.owners[static_cast<std::size_t>(op.writes[0])];
}

void run_and_compare(std::uint32_t seed, dd::ContextOptions options = {}) {
  dd::Context ctx(options);
  SCOPED_TRACE("seed " + std::to_string(seed) + " on rank " + std::to_string(ctx.rank()));
  const Program p = make_program(seed, ctx.size());
  std::vector<dd::DistVar> vars;
  std::vector<OracleVar> oracle;
  for (std::size_t v = 0; v < p.words.size(); ++v) {
    vars.push_back(ctx.new_var(p.words[v] * sizeof(std::uint64_t), p.owners[v]));
    oracle.push_back({std::vector<std::uint64_t>(p.words[v], 0), std::nullopt});
  }
  std::optional<std::string> first_failure;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const OpSpec& op = p.ops[i];
    std::vector<dd::DistVar> r, w;
    for (int v : op.reads) r.push_back(vars[static_cast<std::size_t>(v)]);
    for (int v : op.writes) w.push_back(vars[static_cast<std::size_t>(v)]);
    ctx.push(
        [&op](dd::Args a) {
          std::vector<const std::uint64_t*> rp;
          std::vector<std::uint64_t*> wp;
          std::vector<std::size_t> rn, wn;
          for (std::size_t k = 0; k < a.reads(); ++k) {
            rp.push_back(a.read<std::uint64_t>(k));
            rn.push_back(a.read_size(k) / sizeof(std::uint64_t));
          }
          for (std::size_t k = 0; k < a.writes(); ++k) {
            wp.push_back(a.write<std::uint64_t>(k));
            wn.push_back(a.write_size(k) / sizeof(std::uint64_t));
          }
          kernel(op, rp, rn, wp, wn);
        },
        r, w, {.name = op.name, .on_rank = op.on_rank});

    // The oracle: the same op, sequentially.
    std::optional<std::string> poison;
    for (int v : op.reads)
      if (oracle[static_cast<std::size_t>(v)].poison) {
        poison = oracle[static_cast<std::size_t>(v)].poison;
        break;
      }
    if (!poison) {
      std::vector<const std::uint64_t*> rp;
      std::vector<std::uint64_t*> wp;
      std::vector<std::size_t> rn, wn;
      for (int v : op.reads) {
        rp.push_back(oracle[static_cast<std::size_t>(v)].value.data());
        rn.push_back(oracle[static_cast<std::size_t>(v)].value.size());
      }
      for (int v : op.writes) {
        wp.push_back(oracle[static_cast<std::size_t>(v)].value.data());
        wn.push_back(oracle[static_cast<std::size_t>(v)].value.size());
      }
      try {
        kernel(op, rp, rn, wp, wn);
      } catch (const std::exception& e) {
        poison = "op '" + op.name + "' (#" + std::to_string(i + 1) + ") failed on rank " +
                 std::to_string(exec_rank(p, op)) + ": " + e.what();
        if (!first_failure) first_failure = poison;
      }
    }
    for (int v : op.writes) oracle[static_cast<std::size_t>(v)].poison = poison;

    if (op.wait_after || i + 1 == p.ops.size()) {
      if (first_failure) {
        try {
          ctx.wait_all();
          ADD_FAILURE() << "wait_all after op " << i << " did not throw " << *first_failure;
        } catch (const depengine::Error& e) {
          EXPECT_EQ(e.what(), *first_failure);
        }
      } else {
        EXPECT_NO_THROW(ctx.wait_all());
      }
      first_failure.reset();
    }
  }
  for (std::size_t v = 0; v < vars.size(); ++v) {
    SCOPED_TRACE("var " + std::to_string(v));
    if (oracle[v].poison) {
      try {
        ctx.get(vars[v]);
        ADD_FAILURE() << "get did not throw " << *oracle[v].poison;
      } catch (const depengine::Error& e) {
        EXPECT_EQ(e.what(), *oracle[v].poison);
      }
    } else {
      std::vector<std::byte> got = ctx.get(vars[v]);
      ASSERT_EQ(got.size(), oracle[v].value.size() * sizeof(std::uint64_t));
      std::vector<std::uint64_t> words(oracle[v].value.size());
      std::memcpy(words.data(), got.data(), got.size());
      EXPECT_EQ(words, oracle[v].value);
    }
  }
}

TEST(DistOracle, RandomProgramsMatchSequentialRun) {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) run_and_compare(seed);
}

TEST(DistOracle, RandomProgramsOnNaiveEngines) {
  for (std::uint32_t seed = 100; seed <= 110; ++seed) run_and_compare(seed, {.engine = "naive"});
}

TEST(DistOracle, RandomProgramsWithInjectedLatency) {
  for (std::uint32_t seed = 200; seed <= 205; ++seed) run_and_compare(seed, {.latency_us = 200});
}

}  // namespace
