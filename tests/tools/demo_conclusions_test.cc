// `depengine demo` (tools/depengine): the rules that turn each experiment's figures into the
// paragraph printed beside them (demo_conclusions.h), and the command end to end.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "demo_conclusions.h"

namespace {

using namespace depengine::cli::conclusions;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// --- figures and medians ---------------------------------------------------------------

TEST(DemoConclusions, MedianOfOddEvenAndNoSamples) {
  EXPECT_DOUBLE_EQ(median({3.0, 1.0, 12.0}), 3.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 2.0, 40.0}), 3.0);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
  // One run slowed down 4x does not move the median of five.
  EXPECT_DOUBLE_EQ(median({1.6e-6, 1.7e-6, 6.4e-6, 1.5e-6, 1.8e-6}), 1.7e-6);
}

TEST(DemoConclusions, FigureFormats) {
  EXPECT_EQ(ms(0.0123), "12.3 ms");
  EXPECT_EQ(ms(0.00012), "0.12 ms");  // one decimal would print 0.1 ms for 0.12 and 0.14
  EXPECT_EQ(us(1.5e-6), "1.50 us");
  EXPECT_EQ(mib(std::size_t{3} << 20), "3.0 MiB");
  EXPECT_EQ(times(1.44), "1.4 x");
  EXPECT_EQ(percent(0.0022), "0.22 %");
}

// --- 1. asynchrony ---------------------------------------------------------------------

AsynchronyFigures asynchrony(double naive, double push, double threaded) {
  return {.ops = 20, .naive_total = naive, .push = push, .threaded_total = threaded};
}

TEST(DemoConclusions, AsynchronyAboutTheSerialTimeOnlyWhenItIs) {
  EXPECT_TRUE(has(explain_asynchrony(asynchrony(0.150, 3e-4, 0.155)), "about the serial time"));
  // Threaded 1.3x faster (187 against 144 ms, as measured): not "about the serial time".
  const std::string faster = explain_asynchrony(asynchrony(0.187, 3e-4, 0.144));
  EXPECT_FALSE(has(faster, "about the serial time"));
  EXPECT_TRUE(has(faster, "1.3 x faster than the serial run"));
  const std::string slower = explain_asynchrony(asynchrony(0.144, 3e-4, 0.187));
  EXPECT_FALSE(has(slower, "about the serial time"));
  EXPECT_TRUE(has(slower, "took 1.3 x as long as the serial run"));
}

TEST(DemoConclusions, AsynchronyLongBeforeOnlyWhenThePushesWereAShortPart) {
  const std::string quick = explain_asynchrony(asynchrony(0.150, 3e-4, 0.150));
  EXPECT_TRUE(has(quick, "long before the results existed"));
  EXPECT_TRUE(has(quick, "0.20 %"));
  EXPECT_TRUE(has(quick, "20 ops"));
  const std::string slow = explain_asynchrony(asynchrony(0.150, 0.075, 0.150));
  EXPECT_FALSE(has(slow, "long before"));
  EXPECT_TRUE(has(slow, "did not get far ahead"));
}

// --- 2. barriers -----------------------------------------------------------------------

TEST(DemoConclusions, BarriersAllTheSameOnlyWhenTheyAre) {
  const std::string same = explain_barriers(
      {{"waitall()", 0.0083, ""}, {"wait_to_read()", 0.0081, ""}, {"item()", 0.0085, ""}});
  EXPECT_TRUE(has(same, "all of them cost about the same (8.1-8.5 ms)"));
  const std::string apart = explain_barriers({{"waitall()", 0.0083, ""},
                                              {"wait_to_read()", 0.0081, ""},
                                              {"to_vector()", 0.0120, "it also copies"}});
  EXPECT_FALSE(has(apart, "all of them"));
  EXPECT_TRUE(has(apart, "waitall() and wait_to_read() cost about the same"));
  EXPECT_TRUE(has(apart, "to_vector() took 3.9 ms more (it also copies)"));
  const std::string spread =
      explain_barriers({{"waitall()", 0.0080, ""}, {"wait_to_read()", 0.0097, ""}});
  EXPECT_TRUE(has(spread, "wait_to_read() took 1.7 ms more, though it does no work besides"));
}

// --- 3. improving computation ----------------------------------------------------------

ImprovingFigures improving(double sync, double pushed, double async) {
  return {.ops = 10000, .runs = 5, .sync = sync, .pushed = pushed, .async = async};
}

TEST(DemoConclusions, PipelinedAtAboutT1SaysTheFrontendIsTheBottleneck) {
  // Per op pipelined 3.11 us, t1 3.11 us (the reviewer's run).
  const std::string text = explain_improving(improving(0.0922, 0.0311, 0.0311));
  EXPECT_TRUE(has(text, "the frontend is the bottleneck"));
  EXPECT_TRUE(has(text, "about t1 (3.11 us)"));
  EXPECT_TRUE(has(text, "waitall found nothing left to do"));
  EXPECT_TRUE(has(explain_improving(improving(0.0922, 0.0311, 0.0314)), "found only 0.30 ms"));
  EXPECT_FALSE(has(text, "t1 + 10000 t2 + t3"));
  EXPECT_FALSE(has(text, "backend is the bottleneck"));
  EXPECT_TRUE(has(text, "medians of 5 runs"));
}

TEST(DemoConclusions, PipelinedWellAboveT1SaysTheBackendIsTheBottleneck) {
  const std::string text = explain_improving(improving(0.0900, 0.0150, 0.0450));
  EXPECT_TRUE(has(text, "the backend is the bottleneck"));
  EXPECT_FALSE(has(text, "frontend is the bottleneck"));
  EXPECT_TRUE(has(text, "waitall waited 30.0 ms"));
  EXPECT_TRUE(has(text, "the backend's pace (4.50 us per op), not 10000 t1"));
}

TEST(DemoConclusions, PipelinedAFifthAboveT1IsNotAboutT1) {
  // t1 1.75 us, 2.17 us per op pipelined (a run on the loaded machine).
  const std::string text = explain_improving(improving(0.0974, 0.0175, 0.0217));
  EXPECT_FALSE(has(text, "about t1"));
  EXPECT_TRUE(has(text, "the backend is the bottleneck"));
}

TEST(DemoConclusions, NoSpeedupIsNotCalledOne) {
  const std::string text = explain_improving(improving(0.0200, 0.0180, 0.0190));
  EXPECT_TRUE(has(text, "saved little (1.1 x)"));
  EXPECT_FALSE(has(text, "speedup is"));
}

TEST(DemoConclusions, SmallOpsOnTheCallerAreComparedWithTheChaptersEngine) {
  // Handed over: 8.8 / 1.1 us per op; small ops on the caller: 0.52 / 0.50 us.
  const std::string same = explain_small_ops(improving(0.0880, 0.0080, 0.0110),
                                             improving(0.0052, 0.0050, 0.0050));
  EXPECT_TRUE(has(same, "cost 0.52 us per op with a wait after each and 0.50 us without"));
  EXPECT_TRUE(has(same, "about the same: there is no t2 + t3 left to wait for"));
  EXPECT_TRUE(has(same, "against 8.80 us and 1.10 us handed over"));
  const std::string slower = explain_small_ops(improving(0.0880, 0.0080, 0.0110),
                                               improving(0.0090, 0.0050, 0.0050));
  EXPECT_TRUE(has(slower, "(1.8 x: the wait itself still costs something)"));
  EXPECT_FALSE(has(slower, "about the same"));
}

// --- 4. the exercise -------------------------------------------------------------------

OverlapFigures overlap(double naive_total, double threaded_total) {
  return {.dots = 5,
          .cores = 2,
          .naive_dots = 0.040,
          .naive_host = naive_total - 0.040,
          .naive_total = naive_total,
          .push = 2e-6,
          .threaded_total = threaded_total};
}

TEST(DemoConclusions, NoOverlapSavedIsNotYes) {
  const OverlapFigures none = overlap(0.180, 0.180);  // overlap saved 0.0 ms
  EXPECT_EQ(overlap_answer(none), "No");
  const std::string text = explain_overlap(none);
  EXPECT_FALSE(has(text, "hid"));
  EXPECT_TRUE(has(text, "did not overlap"));
  EXPECT_EQ(overlap_answer(overlap(0.180, 0.190)), "No");  // threaded slower
  EXPECT_EQ(overlap_answer(overlap(0.180, 0.175)), "No");  // 2.8 % saved
  EXPECT_EQ(overlap_answer(overlap(0.180, 0.168)), "Barely");  // 6.7 %
}

TEST(DemoConclusions, OverlapThatSavedTheProductsIsYes) {
  // 180 ms serial, 137 ms overlapped, host work 140 ms: the products hid entirely.
  const OverlapFigures full = overlap(0.180, 0.137);
  EXPECT_EQ(overlap_answer(full), "Yes");
  EXPECT_TRUE(has(explain_overlap(full), "hid entirely behind the host work"));
  // 200 ms serial, host work 160 ms, 178 ms overlapped: part of them.
  const OverlapFigures part = {.dots = 5, .cores = 2, .naive_dots = 0.100, .naive_host = 0.100,
                               .naive_total = 0.200, .push = 2e-6, .threaded_total = 0.170};
  EXPECT_EQ(overlap_answer(part), "Yes");
  EXPECT_TRUE(has(explain_overlap(part), "part of the products hid"));
}

TEST(DemoConclusions, PushesAreMicrosecondsOnlyWhenTheyAre) {
  EXPECT_TRUE(has(explain_overlap(overlap(0.180, 0.137)), "the frontend thread is free"));
  OverlapFigures slow_push = overlap(0.180, 0.137);
  slow_push.push = 4e-3;  // half a product
  EXPECT_FALSE(has(explain_overlap(slow_push), "the frontend thread is free"));
}

// --- 5. memory -------------------------------------------------------------------------

constexpr std::size_t kMiB = std::size_t{1} << 20;

MemoryFigures memory(double unbounded_s, double bounded_s) {
  MemoryFigures f;
  f.batches = 200;
  f.batch_bytes = 3 * kMiB;
  f.bound = 16;
  f.unbounded = {.peak_pending = 1252,
                 .peak_storage = 539 * kMiB,
                 .rss_gain = 540 * kMiB,
                 .page_faults = 140000,
                 .seconds = unbounded_s};
  f.bounded = {.peak_pending = 16,
               .peak_storage = 12 * kMiB,
               .rss_gain = 11 * kMiB + kMiB / 2,
               .page_faults = 3000,
               .seconds = bounded_s};
  return f;
}

TEST(DemoConclusions, BoundedFasterBy1_4IsNotAboutTheSameTime) {
  // The reviewer's fresh-process figures: 560 against 780 ms.
  const std::string text = explain_memory(memory(0.780, 0.560));
  EXPECT_FALSE(has(text, "about the same time"));
  EXPECT_TRUE(has(text, "1.4 x faster (560.0 ms against 780.0 ms)"));
  EXPECT_TRUE(has(text, "3000 against 140000 page faults"));
}

TEST(DemoConclusions, AboutTheSameTimeOnlyWhenItIs) {
  EXPECT_TRUE(has(explain_memory(memory(0.600, 0.580)), "in about the same time"));
  const std::string slower = explain_memory(memory(0.400, 0.600));
  EXPECT_FALSE(has(slower, "about the same time"));
  EXPECT_TRUE(has(slower, "took 1.5 x as long"));
}

TEST(DemoConclusions, MemoryFiguresAreTheVariantsOwn) {
  const std::string text = explain_memory(memory(0.780, 0.560));
  EXPECT_TRUE(has(text, "almost the whole loop (1252 ops pending"));
  EXPECT_TRUE(has(text, "180 of the 200 batches"));
  EXPECT_TRUE(has(text, "kept 4 batches resident"));
  EXPECT_TRUE(has(text, "44.9 x less storage"));
  EXPECT_TRUE(has(text, "+11.5 MiB against +540.0 MiB"));
  // Without a process of its own a run's RSS is not its own: not quoted, no cause claimed.
  MemoryFigures shared = memory(0.780, 0.560);
  for (MemoryRun* r : {&shared.unbounded, &shared.bounded}) {
    r->rss_gain.reset();
    r->page_faults.reset();
  }
  const std::string without = explain_memory(shared);
  EXPECT_FALSE(has(without, "RSS"));
  EXPECT_FALSE(has(without, "page faults"));
  EXPECT_TRUE(has(without, "1.4 x faster"));
}

TEST(DemoConclusions, AFrontendThatStayedCloseIsNotSaidToQueueTheLoop) {
  MemoryFigures f = memory(0.600, 0.590);
  f.unbounded.peak_pending = 40;
  f.unbounded.peak_storage = 15 * kMiB;
  const std::string text = explain_memory(f);
  EXPECT_FALSE(has(text, "almost the whole loop"));
  EXPECT_TRUE(has(text, "stayed close to the backend"));
  EXPECT_TRUE(has(text, "about as much storage as without"));
  EXPECT_FALSE(has(text, "warning"));
}

// --- the command end to end ------------------------------------------------------------

#ifdef DEMO_CLI

TEST(DemoCli, QuickRunPrintsFiveExperimentsWithFreshProcessMemoryFigures) {
  std::FILE* p = popen("'" DEMO_CLI "' demo --quick", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (const std::size_t k = std::fread(buf, 1, sizeof buf, p)) out.append(buf, k);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  for (const char* heading : {"\n1. ", "\n2. ", "\n3. ", "\n4. ", "\n5. "}) {
    EXPECT_TRUE(has(out, heading)) << heading;
  }
  EXPECT_TRUE(has(out, "each row measured in a fresh process of its own")) << out;
  EXPECT_FALSE(has(out, "n/a")) << out;
}

TEST(DemoCli, MemoryRunPrintsOneLineOfFigures) {
  std::FILE* p = popen("'" DEMO_CLI "' demo --memory-run 16 8", "r");
  ASSERT_NE(p, nullptr);
  std::size_t pending = 0, storage = 0, rss = 0;
  long faults = 0;
  double seconds = 0;
  const int n = std::fscanf(p, "%zu %zu %zu %ld %lf", &pending, &storage, &rss, &faults,
                            &seconds);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(n, 5);
  EXPECT_LE(pending, 16u);
  EXPECT_GT(storage, 0u);
  EXPECT_GT(seconds, 0.0);
}

#endif  // DEMO_CLI

}  // namespace
