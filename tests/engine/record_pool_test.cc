// Direct tests of the record pool (engine/src/record_pool.h): each kind's blocks are aligned
// for its record, records freed by one thread come back to another in batches, and the
// kinds never mix.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "op.h"
#include "prefetch.h"
#include "record_pool.h"
#include "test_util.h"
#include "var_state.h"

namespace depengine::detail {
namespace {

using record_pool::Record;

using test::kRecordPoolBypassed;

std::vector<void*> take(Record r, std::size_t n) {
  std::vector<void*> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(record_pool::allocate(r));
  return out;
}

TEST(RecordPool, EachKindIsAlignedForItsRecord) {
  for (Record r : {Record::op, Record::var_state}) {
    const std::size_t align = r == Record::op ? alignof(Op) : alignof(VarState);
    std::vector<void*> blocks = take(r, 3 * record_pool::kBatch);
    for (void* p : blocks) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u);
    }
    for (void* p : blocks) record_pool::release(r, p);
  }
  EXPECT_EQ(alignof(VarState), 64u);
}

// What a frontend and a worker do: one thread makes the records, another frees them; the
// maker gets them back through the shared list rather than from the allocator.
TEST(RecordPool, RecordsFreedOnAnotherThreadComeBackToTheMaker) {
  if (kRecordPoolBypassed) GTEST_SKIP() << "the pool is bypassed under ASan and TSan";
  for (Record r : {Record::op, Record::var_state}) {
    std::set<void*> made;
    std::thread maker([&] {
      for (void* p : take(r, 4 * record_pool::kBatch)) made.insert(p);
    });
    maker.join();
    // Freed on this thread: every kBatch past 2 · kBatch goes to the shared list.
    for (void* p : made) record_pool::release(r, p);
    std::size_t reused = 0;
    std::thread again([&] {
      std::vector<void*> blocks = take(r, record_pool::kBatch);
      for (void* p : blocks) reused += made.count(p);
      for (void* p : blocks) record_pool::release(r, p);
    });
    again.join();
    EXPECT_EQ(reused, record_pool::kBatch) << "a new thread's first batch is one given back";
  }
}

// An op's block never serves as a var state's (their sizes and alignments differ).
TEST(RecordPool, KindsDoNotMix) {
  if (kRecordPoolBypassed) GTEST_SKIP() << "the pool is bypassed under ASan and TSan";
  std::vector<void*> ops = take(Record::op, 2 * record_pool::kBatch);
  const std::set<void*> op_blocks(ops.begin(), ops.end());
  for (void* p : ops) record_pool::release(Record::op, p);
  std::vector<void*> vars = take(Record::var_state, 2 * record_pool::kBatch);
  for (void* p : vars) EXPECT_EQ(op_blocks.count(p), 0u);
  for (void* p : vars) record_pool::release(Record::var_state, p);
}

// Var states made and dropped through the engine's own path use the pool and stay aligned.
TEST(RecordPool, VarStatesComeFromThePool) {
  std::vector<Var> vars;
  for (int i = 0; i < 1000; ++i) vars.emplace_back(new_var_state(1));
  for (const Var& v : vars) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.state()) % 64, 0u);
  }
}

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
// prefetch.h reads the CPU's PREFETCHW bit itself; the kernel lists the same bit as the flag
// "3dnowprefetch" in /proc/cpuinfo.
TEST(PrefetchForWrite, FindsPrefetchwWhereTheKernelDoes) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  if (!cpuinfo) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  std::istringstream flags(line.substr(line.find(':') + 1));
  bool listed = false;
  for (std::string f; flags >> f;) listed = listed || f == "3dnowprefetch";
  EXPECT_EQ(g_has_prefetchw, listed);
  EXPECT_EQ(cpu_has_prefetchw(), listed);
}
#endif

// A prefetch is a hint: the record's bytes stay as they were, whichever instruction it takes.
TEST(PrefetchForWrite, LeavesTheRecordAsItWas) {
  void* p = record_pool::allocate(Record::op);
  std::memset(p, 0x5a, sizeof(Op));
  Op::prefetch_free_record(p);
  prefetch_for_write(p);
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < sizeof(Op); ++i) ASSERT_EQ(bytes[i], 0x5a) << "byte " << i;
  record_pool::release(Record::op, p);
}

}  // namespace
}  // namespace depengine::detail
