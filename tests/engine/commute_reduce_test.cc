// Direct tests of two engine parts, without an engine: commute exclusion (commute.h) and the
// reduction group (reduce.h). The engines' behaviour with them is in access_modes_test.cc
// and the oracle; these check each part's own rules.
#include <algorithm>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "commute.h"
#include "op.h"
#include "reduce.h"

namespace depengine::detail {
namespace {

constexpr std::uint64_t kOwner = 1;

// An op with the given commute vars (and, when `read` is set, a read of it), as a push
// would make it.
OpPtr commute_op(std::vector<Var> commutes, const Var& read = Var()) {
  OpPtr op(new Op(nullptr, OpKind::body, PushOptions{}));
  std::vector<Var> writes;
  for (const Var& v : commutes) writes.push_back(commute(v));
  std::vector<Var> reads;
  if (read) reads.push_back(read);
  op->set_accesses(reads, writes, kOwner);
  return op;
}

struct Redispatched {
  std::vector<Op*> ops;
  void operator()(Op* op) { ops.push_back(op); }
};

TEST(Commute, AnOpTakesEveryCommuteVarItLists) {
  Var a(new_var_state(kOwner)), b(new_var_state(kOwner));
  OpPtr op = commute_op({a, b});
  Redispatched back;
  ASSERT_TRUE(take_commute(op.get(), back));
  EXPECT_TRUE(a.state()->queue.commute_held);
  EXPECT_TRUE(b.state()->queue.commute_held);
  EXPECT_TRUE(op->commute_taken);
  // Taking again (a redispatched op) is a no-op.
  EXPECT_TRUE(take_commute(op.get(), back));
  release_commute(op.get(), back);
  EXPECT_FALSE(a.state()->queue.commute_held);
  EXPECT_FALSE(b.state()->queue.commute_held);
  EXPECT_TRUE(back.ops.empty());
}

TEST(Commute, AnOpThatFindsAVarHeldParksOnItAndHoldsNothing) {
  Var a(new_var_state(kOwner)), b(new_var_state(kOwner));
  OpPtr holder = commute_op({b});
  OpPtr second = commute_op({a, b});
  Redispatched back;
  ASSERT_TRUE(take_commute(holder.get(), back));
  // `second` takes a, finds b held: it parks on b and lets a go (all or none).
  EXPECT_FALSE(take_commute(second.get(), back));
  EXPECT_FALSE(second->commute_taken);
  EXPECT_FALSE(a.state()->queue.commute_held);
  EXPECT_EQ(b.state()->queue.parked, second.get());
  EXPECT_TRUE(back.ops.empty());
  // The holder's release hands the parked op back, which then takes both.
  release_commute(holder.get(), back);
  ASSERT_EQ(back.ops, std::vector<Op*>{second.get()});
  EXPECT_EQ(b.state()->queue.parked, nullptr);
  EXPECT_TRUE(take_commute(second.get(), back));
  EXPECT_TRUE(a.state()->queue.commute_held && b.state()->queue.commute_held);
  release_commute(second.get(), back);
}

TEST(Commute, LettingGoOfAVarWhileParkingRedispatchesWhatWaitedOnIt) {
  Var a(new_var_state(kOwner)), b(new_var_state(kOwner));
  OpPtr holds_b = commute_op({b});
  OpPtr holds_a = commute_op({a});
  OpPtr waits_on_a = commute_op({a});
  OpPtr both = commute_op({a, b});
  Redispatched back;
  ASSERT_TRUE(take_commute(holds_b.get(), back));
  ASSERT_TRUE(take_commute(holds_a.get(), back));
  ASSERT_FALSE(take_commute(waits_on_a.get(), back));  // parked on a
  release_commute(holds_a.get(), back);                 // a free again, waits_on_a back
  ASSERT_EQ(back.ops, std::vector<Op*>{waits_on_a.get()});
  back.ops.clear();
  // `both` takes a, parks on b, and lets a go: nobody waited on a meanwhile.
  EXPECT_FALSE(take_commute(both.get(), back));
  EXPECT_TRUE(back.ops.empty());
  EXPECT_FALSE(a.state()->queue.commute_held);
  release_commute(holds_b.get(), back);
  EXPECT_EQ(back.ops, std::vector<Op*>{both.get()});
}

TEST(Commute, AnOpWithoutCommuteAccessesTakesNothing) {
  Var a(new_var_state(kOwner));
  OpPtr op = commute_op({}, a);
  Redispatched back;
  EXPECT_TRUE(take_commute(op.get(), back));
  EXPECT_FALSE(op->commute_taken);
  EXPECT_FALSE(a.state()->queue.commute_held);
  release_commute(op.get(), back);
  EXPECT_TRUE(back.ops.empty());
}

// Parked ops are handed back in the order the var's list holds them, every one of them.
TEST(Commute, EveryOpParkedOnAVarComesBack) {
  Var a(new_var_state(kOwner));
  OpPtr holder = commute_op({a});
  std::vector<OpPtr> waiting;
  for (int i = 0; i < 5; ++i) waiting.push_back(commute_op({a}));
  Redispatched back;
  ASSERT_TRUE(take_commute(holder.get(), back));
  for (OpPtr& w : waiting) EXPECT_FALSE(take_commute(w.get(), back));
  release_commute(holder.get(), back);
  ASSERT_EQ(back.ops.size(), waiting.size());
  for (OpPtr& w : waiting) {
    EXPECT_NE(std::find(back.ops.begin(), back.ops.end(), w.get()), back.ops.end());
    EXPECT_EQ(w->next_parked, nullptr);
  }
}

// A sum of ints: each buffer an int, combined by addition into `target`.
struct Sum {
  int target = 0;
  std::atomic<int> identities{0};
  std::vector<std::pair<int, int>> combines;  // (into, from) values before each combine
  std::shared_ptr<const Reduction> hooks() {
    return std::make_shared<const Reduction>(Reduction{
        .identity =
            [this] {
              identities.fetch_add(1);
              return std::make_shared<int>(0);
            },
        .combine =
            [this](void* into, const void* from) {
              combines.emplace_back(*static_cast<int*>(into), *static_cast<const int*>(from));
              *static_cast<int*>(into) += *static_cast<const int*>(from);
            },
        .target = &target});
  }
};

TEST(ReduceGroup, EachThreadGetsABufferOfItsOwn) {
  Sum sum;
  ReduceGroup group(sum.hooks());
  void* mine = group.buffer();
  EXPECT_EQ(group.buffer(), mine);
  void* theirs = nullptr;
  std::thread([&] { theirs = group.buffer(); }).join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(sum.identities.load(), 2);
}

TEST(ReduceGroup, ANullIdentityIsAnError) {
  int target = 0;
  ReduceGroup group(std::make_shared<const Reduction>(
      Reduction{.identity = [] { return std::shared_ptr<void>(); },
                .combine = [](void*, const void*) {},
                .target = &target}));
  EXPECT_THROW(group.buffer(), Error);
}

TEST(ReduceGroup, TheEarliestFailureStaysWhateverTheOrder) {
  Sum sum;
  ReduceGroup group(sum.hooks());
  EXPECT_FALSE(group.failure());
  std::vector<std::thread> threads;
  for (std::uint64_t origin : {9u, 4u, 7u, 12u, 5u}) {
    threads.emplace_back([&, origin] {
      group.fail(Failure{std::make_exception_ptr(std::runtime_error("x")), origin});
    });
  }
  for (std::thread& t : threads) t.join();
  group.fail(Failure{});  // success changes nothing
  ASSERT_TRUE(group.failure());
  EXPECT_EQ(group.failure().origin, 4u);
}

// Five buffers combine as a pairwise tree (0+1, 2+3; then 0+2; then 0+4), then into the
// target, and are dropped: a later contribution starts from a new identity.
TEST(ReduceGroup, CombineAllIsAPairwiseTreeIntoTheTarget) {
  Sum sum;
  sum.target = 100;
  ReduceGroup group(sum.hooks());
  // Five threads alive at once (a finished thread's id may be reused), taking their buffers
  // in turn, so that buffer i holds i + 1.
  std::atomic<int> turn{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      while (turn.load() != i) std::this_thread::yield();
      *static_cast<int*>(group.buffer()) = i + 1;
      turn.fetch_add(1);
      while (turn.load() != 5) std::this_thread::yield();
    });
  }
  for (std::thread& t : threads) t.join();
  group.combine_all();
  EXPECT_EQ(sum.target, 115);
  const std::vector<std::pair<int, int>> expected = {{1, 2}, {3, 4}, {3, 7}, {10, 5}, {100, 15}};
  EXPECT_EQ(sum.combines, expected);
  EXPECT_EQ(*static_cast<int*>(group.buffer()), 0);
  EXPECT_EQ(sum.identities.load(), 6);
}

TEST(ReduceGroup, NoContributionLeavesTheTargetAlone) {
  Sum sum;
  sum.target = 7;
  ReduceGroup group(sum.hooks());
  group.combine_all();
  EXPECT_EQ(sum.target, 7);
  EXPECT_TRUE(sum.combines.empty());
}

}  // namespace
}  // namespace depengine::detail
