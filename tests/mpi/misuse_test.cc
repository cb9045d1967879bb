// Misuse of a distributed context is a depengine::Error on every rank, never a hang; a
// failure crosses ranks with its original text.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <atomic>
#include <climits>
#include <functional>
#include <vector>
#include <memory>
#include <string>
#include <thread>

#include "depengine/dist.h"

namespace dd = depengine::dist;

namespace {

void noop(dd::Args) {}

TEST(DistMisuse, OwnerOutsideRanks) {
  dd::Context ctx;
  EXPECT_THROW(ctx.new_var(8, ctx.size()), depengine::Error);
  EXPECT_THROW(ctx.new_var(8, -1), depengine::Error);
  dd::DistVar v = ctx.new_var(8, 0);
  EXPECT_THROW(ctx.push(noop, {}, {v}, {.on_rank = ctx.size()}), depengine::Error);
  EXPECT_THROW(ctx.push(noop, {}, {v}, {.on_rank = -2}), depengine::Error);
  ctx.wait_all();
}

TEST(DistMisuse, LatencyOutsideItsRange) {
  // -1 means "from the environment"; other negatives and delays that overflow the clock
  // are mistakes, not requests.
  for (long bad : {-2L, 10'000'001L, LONG_MAX}) {
    try {
      dd::Context ctx({.latency_us = bad});
      ADD_FAILURE() << "latency_us " << bad << " was accepted";
    } catch (const depengine::Error& e) {
      EXPECT_NE(std::string(e.what()).find("latency_us " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

TEST(DistMisuse, NullAndForeignVarsAndEmptyFunction) {
  dd::Context a;
  dd::Context b;
  dd::DistVar va = a.new_var(8, 0);
  dd::DistVar vb = b.new_var(8, 0);
  try {
    a.push(noop, {vb}, {va});
    ADD_FAILURE() << "a var of another context was accepted";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("another context"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.push(noop, {}, {dd::DistVar()}), depengine::Error);
  EXPECT_THROW(a.push(nullptr, {}, {va}), depengine::Error);
  EXPECT_THROW(a.get(vb), depengine::Error);
  EXPECT_THROW(a.owner(dd::DistVar()), depengine::Error);
  a.wait_all();
  b.wait_all();
}

TEST(DistMisuse, ArgsIndexOutOfRangeFailsTheOp) {
  dd::Context ctx;
  dd::DistVar v = ctx.new_var(8, ctx.size() - 1);
  ctx.push([](dd::Args a) { a.read<double>(0); }, {}, {v}, {.name = "bad_index"});
  try {
    ctx.wait_all();
    ADD_FAILURE() << "no failure";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'bad_index' (#1) failed on rank " +
                                         std::to_string(ctx.size() - 1) + ": dist::Args::read(0)"),
              std::string::npos)
        << e.what();
  }
}

// An op runs on one rank's engine worker: a push, new_var or collective made from it would
// be seen by that rank only (the ranks diverge) and would race with the program's thread.
TEST(DistMisuse, ContextCallsFromInsideAnOpAreAnError) {
  dd::Context ctx;
  dd::DistVar v = ctx.new_var(8, 0);
  dd::DistVar w = ctx.new_var(8, ctx.size() - 1);
  auto refused = std::make_shared<std::vector<std::string>>();
  auto attempt = [refused](const std::function<void()>& call) {
    try {
      call();
      refused->push_back("accepted");
    } catch (const depengine::Error& e) {
      refused->push_back(e.what());
    }
  };
  dd::Context* c = &ctx;
  ctx.push(
      [c, v, w, attempt](dd::Args) {
        attempt([&] { c->push(noop, {}, {w}); });
        attempt([&] { c->new_var(8, 0); });
        attempt([&] { c->wait_all(); });
        attempt([&] { c->get(w); });
        attempt([&] { c->gather_stats(); });
        attempt([&] { c->owner(w); });
        attempt([&] { c->set_observer(nullptr); });
      },
      {}, {v}, {.name = "nested"});
  ctx.wait_all();
  if (ctx.rank() == 0) {
    ASSERT_EQ(refused->size(), 7u);
    for (const std::string& what : *refused)
      EXPECT_NE(what.find("called from inside op 'nested'"), std::string::npos) << what;
  } else {
    EXPECT_TRUE(refused->empty());
  }
  // The context is still usable, and every rank still agrees.
  ctx.push([](dd::Args a) { a.write<double>(0)[0] = 2; }, {}, {w});
  double x = 0;
  std::memcpy(&x, ctx.get(w).data(), sizeof x);
  EXPECT_EQ(x, 2);
}

TEST(DistFailure, CrossesRanksWithItsText) {
  dd::Context ctx;
  const int last = ctx.size() - 1;
  dd::DistVar a = ctx.new_var(8, 0);
  dd::DistVar b = ctx.new_var(8, last);
  dd::DistVar c = ctx.new_var(8, last);
  ctx.push([](dd::Args) { throw std::runtime_error("disk full"); }, {}, {a}, {.name = "load"});
  ctx.push([](dd::Args x) { x.write<double>(0)[0] = x.read<double>(0)[0]; }, {a}, {b},
           {.name = "use"});
  ctx.push([](dd::Args x) { x.write<double>(0)[0] = 7; }, {}, {c}, {.name = "independent"});
  const std::string want = "op 'load' (#1) failed on rank 0: disk full";
  try {
    ctx.wait_all();
    ADD_FAILURE() << "no failure";
  } catch (const depengine::Error& e) {
    EXPECT_EQ(e.what(), want);
  }
  // Forgotten by wait_all, still held by the vars.
  EXPECT_NO_THROW(ctx.wait_all());
  for (dd::DistVar v : {a, b}) {
    try {
      ctx.get(v);
      ADD_FAILURE() << "get of a failed var did not throw";
    } catch (const depengine::Error& e) {
      EXPECT_EQ(e.what(), want);
    }
  }
  std::vector<std::byte> got = ctx.get(c);
  double x = 0;
  std::memcpy(&x, got.data(), sizeof x);
  EXPECT_EQ(x, 7);
  // A successful write-only access clears the failure.
  ctx.push([](dd::Args w) { w.write<double>(0)[0] = 1; }, {}, {a}, {.name = "reload"});
  got = ctx.get(a);
  std::memcpy(&x, got.data(), sizeof x);
  EXPECT_EQ(x, 1);
}

TEST(DistMisuse, DivergingRanksAreAnErrorNotAHang) {
  dd::Context ctx;
  if (ctx.size() < 2) GTEST_SKIP() << "needs two ranks";
  dd::DistVar on1 = ctx.new_var(1 << 20, 1);  // large: a rendezvous message, never eager
  dd::DistVar on0 = ctx.new_var(8, 0);
  // Only rank 0 pushes an op that needs rank 1's value: rank 0 waits for a message rank 1
  // never sends.
  if (ctx.rank() == 0) ctx.push(noop, {on1}, {on0}, {.name = "only_on_rank_0"});
  try {
    ctx.wait_all();
    ADD_FAILURE() << "diverging ranks were not detected";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("different op sequences"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ctx.push(noop, {}, {on0}), depengine::Error);
}

TEST(DistMisuse, ATransferThatStartsAfterDivergenceFailsInsteadOfHanging) {
  dd::Context ctx;
  if (ctx.size() < 2) GTEST_SKIP() << "needs two ranks";
  dd::DistVar v1 = ctx.new_var(8, 1);
  dd::DistVar g0 = ctx.new_var(8, 0);
  auto release = std::make_shared<std::atomic<bool>>(false);
  // Rank 0 reads its replica of v1 in an op held until the divergence is reported.
  ctx.push([release](dd::Args) { while (!release->load()) std::this_thread::yield(); }, {v1},
           {g0}, {.name = "held"});
  ctx.push(noop, {}, {v1}, {.name = "new_version"});
  // Only rank 0 needs the new version: its receive waits for "held" (WAR on the replica), so
  // it starts after wait_all found the divergence and cancelled what was outstanding.
  if (ctx.rank() == 0) ctx.push(noop, {v1}, {g0}, {.name = "only_on_rank_0"});
  EXPECT_THROW(ctx.wait_all(), depengine::Error);
  release->store(true);
  // The destructor waits for the late receive: it must fail, not wait for a message.
}

TEST(DistMisuse, DivergingRanksWithAnUnmatchedSendAreAnErrorNotAHang) {
  dd::Context ctx;
  if (ctx.size() < 2) GTEST_SKIP() << "needs two ranks";
  dd::DistVar on0 = ctx.new_var(1 << 20, 0);
  dd::DistVar on1 = ctx.new_var(8, 1);
  // Only rank 0 pushes an op that runs on rank 1: rank 0 sends a message nobody receives.
  if (ctx.rank() == 0) ctx.push(noop, {on0}, {on1}, {.name = "only_on_rank_0"});
  EXPECT_THROW(ctx.wait_all(), depengine::Error);
}

TEST(DistMisuse, DifferentCollectivesAreAnError) {
  dd::Context ctx;
  if (ctx.size() < 2) GTEST_SKIP() << "needs two ranks";
  dd::DistVar v = ctx.new_var(8, 0);
  try {
    if (ctx.rank() == 0) ctx.wait_all();
    else ctx.get(v);
    ADD_FAILURE() << "different collectives were not detected";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("different op sequences"), std::string::npos) << e.what();
  }
}

TEST(DistMisuse, RanksThatDisagreeOnAVarAreAnError) {
  dd::Context ctx;
  if (ctx.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int last = ctx.size() - 1;
  // Sizes that differ (the receiver expects more, or fewer, bytes than are sent), then owners
  // that differ (every rank believes it owns the var).
  for (int variant = 0; variant < 3; ++variant) {
    dd::Context c;
    const std::size_t bytes = variant == 0 ? 8u + 8u * static_cast<unsigned>(c.rank())
                              : variant == 1 ? 64u - 8u * static_cast<unsigned>(c.rank())
                                             : 8u;
    dd::DistVar v = c.new_var(bytes, variant == 2 ? c.rank() : 0);
    dd::DistVar out = c.new_var(8, last);
    c.push([](dd::Args a) { a.write<char>(0)[0] = a.read<char>(0)[0]; }, {v}, {out},
           {.name = "use"});
    try {
      c.wait_all();
      ADD_FAILURE() << "variant " << variant << ": the disagreement was not detected";
    } catch (const depengine::Error& e) {
      EXPECT_NE(std::string(e.what()).find("different op sequences"), std::string::npos)
          << e.what();
    }
  }
}

TEST(DistTransfers, ZeroByteVars) {
  dd::Context ctx;
  const int last = ctx.size() - 1;
  dd::DistVar z = ctx.new_var(0, 0);
  dd::DistVar out = ctx.new_var(0, last);
  ctx.push([](dd::Args a) { EXPECT_EQ(a.write_size(0), 0u); }, {}, {z}, {.name = "make"});
  ctx.push([](dd::Args a) { EXPECT_EQ(a.read_size(0) + a.write_size(0), 0u); }, {z}, {out},
           {.name = "use"});
  ctx.push([](dd::Args) {}, {out}, {z}, {.name = "back", .on_rank = last});
  ctx.wait_all();
  EXPECT_TRUE(ctx.get(z).empty());
  EXPECT_TRUE(ctx.get(out).empty());
}

TEST(DistTransfers, EachValueGoesOncePerDestinationAndVersion) {
  dd::Context ctx;
  const int n = ctx.size();
  dd::DistVar src = ctx.new_var(64, 0);
  std::vector<dd::DistVar> dst;
  for (int r = 0; r < n; ++r) dst.push_back(ctx.new_var(64, r));
  ctx.push([](dd::Args a) { a.write<char>(0)[0] = 1; }, {}, {src});
  // Three readers per rank of the same version: one message per other rank.
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < n; ++r)
      ctx.push([](dd::Args a) { a.write<char>(0)[0] += a.read<char>(0)[0]; }, {src},
               {dst[static_cast<std::size_t>(r)]});
  ctx.push([](dd::Args a) { a.write<char>(0)[0] = 2; }, {}, {src});  // a new version
  for (int r = 0; r < n; ++r)
    ctx.push([](dd::Args a) { a.write<char>(0)[0] += a.read<char>(0)[0]; }, {src},
             {dst[static_cast<std::size_t>(r)]});
  // Written on rank n-1 for rank 0's var: one message back to the owner.
  ctx.push([](dd::Args a) { a.write<char>(0)[0] = 5; }, {}, {src}, {.on_rank = n - 1});
  ctx.wait_all();
  const auto s = ctx.stats();
  const std::uint64_t want_sent = ctx.rank() == 0 ? 2u * static_cast<unsigned>(n - 1)
                                  : ctx.rank() == n - 1 && n > 1 ? 1u : 0u;
  EXPECT_EQ(s.messages_sent, want_sent);
  for (int r = 0; r < n; ++r) {
    auto got = ctx.get(dst[static_cast<std::size_t>(r)]);
    EXPECT_EQ(static_cast<int>(got[0]), 3 * 1 + 2);
  }
  EXPECT_EQ(static_cast<int>(ctx.get(src)[0]), 5);
}

}  // namespace
