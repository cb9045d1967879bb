// `depengine demo`: the five experiments of d2l.ai chapter 13.2, "Asynchronous
// Computation", replayed with NDArray on the naive and threaded engines. Each prints its
// measured figures beside a paragraph that says what they show; the paragraphs are computed
// from the figures (demo_conclusions.h), never written in advance.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "demo_conclusions.h"
#include "depengine/ndarray.h"

namespace depengine::cli {
namespace {

using Clock = std::chrono::steady_clock;
using conclusions::median;
using conclusions::mib;
using conclusions::ms;
using conclusions::us;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"; 0 where unavailable).
std::size_t status_bytes(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      return std::stoul(line.substr(field.size() + 1)) * 1024;
    }
  }
  return 0;
}

long minor_page_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

void heading(int n, const std::string& title) { std::printf("\n%d. %s\n", n, title.c_str()); }

void figure(const std::string& label, const std::string& value) {
  std::printf("   %-56s %s\n", label.c_str(), value.c_str());
}

// Prints `text` as an indented paragraph wrapped at 92 columns.
void explain(std::string_view text) {
  std::string line = "  ";
  std::printf("\n");
  while (!text.empty()) {
    const std::size_t sp = text.find(' ');
    const std::string_view word = text.substr(0, sp);
    if (line.size() + 1 + word.size() > 92) {
      std::printf("%s\n", line.c_str());
      line = "  ";
    }
    line += ' ';
    line += word;
    text = sp == std::string_view::npos ? std::string_view() : text.substr(sp + 1);
  }
  std::printf("%s\n", line.c_str());
}

struct Options {
  std::size_t n = 1000;        // matrix size of experiments 1, 2 and 4
  int repeats = 10;            // dots in experiments 1 and 4
  int increments = 10000;      // y = x + 1 in experiment 3
  int batches = 200;           // batches in experiment 5
};

// Runs of the experiments whose figures are tiny-op times. A single run of experiment 3
// varies up to 4x from one run to the next on a shared machine (a thread hand-off delayed
// here and there dominates a 2 us op); experiment 2's 8 ms waits vary by up to 25%.
constexpr int kImprovingRuns = 5;
constexpr int kBarrierRuns = 5;

// 1. o.repeats products of random n×n matrices, serial (naive) and pushed (threaded).
void asynchrony(Engine& naive, Engine& threaded, const Options& o) {
  heading(1, "Asynchrony via the backend: " + std::to_string(o.repeats) +
                 " x (random n x n, dot)");
  auto run = [&](Engine& e, double& push, double& total) {
    EngineScope use(e);
    const auto t0 = Clock::now();
    for (int i = 0; i < o.repeats; ++i) {
      NDArray a = nd::random_normal({o.n, o.n});
      NDArray b = nd::dot(a, a);
    }
    push = seconds_since(t0);
    waitall();
    total = seconds_since(t0);
  };
  conclusions::AsynchronyFigures f{.ops = 2 * o.repeats};
  double np_push = 0;
  run(naive, np_push, f.naive_total);
  run(threaded, f.push, f.threaded_total);
  figure("naive engine (the chapter's numpy line), total", ms(f.naive_total));
  figure("threaded engine, pushes return after", ms(f.push));
  figure("threaded engine, waitall returns after", ms(f.threaded_total));
  figure("pushes / total", conclusions::percent(f.push / f.threaded_total));
  explain(conclusions::explain_asynchrony(f));
}

// 2. Four ways to wait for one product, each timed kBarrierRuns times (round robin).
void barriers(Engine& threaded, const Options& o) {
  heading(2, "Barriers and blockers after one dot (medians of " +
                 std::to_string(kBarrierRuns) + " runs)");
  EngineScope use(threaded);
  NDArray a = nd::random_normal({o.n, o.n});
  a.wait_to_read();
  auto timed = [&](auto&& block) {
    const auto t0 = Clock::now();
    NDArray b = nd::dot(a, a);
    block(b);
    return seconds_since(t0);
  };
  std::vector<double> samples[4];
  for (int r = 0; r < kBarrierRuns; ++r) {
    samples[0].push_back(timed([](NDArray&) { waitall(); }));
    samples[1].push_back(timed([](NDArray& b) { b.wait_to_read(); }));
    samples[2].push_back(timed([](NDArray& b) { (void)b.to_vector(); }));
    samples[3].push_back(timed([](NDArray& b) { (void)nd::sum(b).item(); }));
  }
  const std::vector<conclusions::Blocker> blockers = {
      {"waitall()", median(samples[0]), ""},
      {"b.wait_to_read()", median(samples[1]), ""},
      {"b.to_vector()", median(samples[2]), "it also copies the result into a host vector"},
      {"nd::sum(b).item()", median(samples[3]), "it also waits for the sum it pushes"},
  };
  figure("waitall()", ms(blockers[0].seconds));
  figure("b.wait_to_read()", ms(blockers[1].seconds));
  figure("b.to_vector()  (numpy: asnumpy)", ms(blockers[2].seconds));
  figure("nd::sum(b).item()", ms(blockers[3].seconds));
  explain(conclusions::explain_barriers(blockers));
}

// The chapter's two loops of `increments` x (y = x + 1) on `e`, kImprovingRuns runs of both.
conclusions::ImprovingFigures time_improving(Engine& e, const Options& o) {
  EngineScope use(e);
  NDArray x = nd::ones({1, 2});
  NDArray y;
  waitall();
  std::vector<double> sync, pushed, async;
  for (int r = 0; r < kImprovingRuns; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < o.increments; ++i) {
      y = x + 1.0f;
      y.wait_to_read();
    }
    sync.push_back(seconds_since(t0));
    t0 = Clock::now();
    for (int i = 0; i < o.increments; ++i) y = x + 1.0f;
    pushed.push_back(seconds_since(t0));
    waitall();
    async.push_back(seconds_since(t0));
  }
  return {.ops = o.increments,
          .runs = kImprovingRuns,
          .sync = median(sync),
          .pushed = median(pushed),
          .async = median(async)};
}

// 3. y = x + 1, waiting after each op or once at the end: on an engine that hands every op
// to a worker, as the chapter's does, then on the default one, which runs an op this small
// on the calling thread while nothing else runs (EngineOptions::inline_small_ops).
void improving(Engine& threaded, const Options& o) {
  heading(3, "Improving computation: " + std::to_string(o.increments) +
                 " x (y = x + 1), medians of " + std::to_string(kImprovingRuns) + " runs");
  auto handed =
      Engine::create("threaded", {.cpu_threads = threaded.cpu_threads(), .inline_small_ops = -1});
  const conclusions::ImprovingFigures f = time_improving(*handed, o);
  const conclusions::ImprovingFigures d = time_improving(threaded, o);
  const double per = 1.0 / f.ops;
  figure("synchronous (wait_to_read after each), total", ms(f.sync));
  figure("asynchronous (one waitall), total", ms(f.async));
  figure("speedup", conclusions::times(f.sync / f.async));
  figure("t1, frontend: pushing one op (mean)", us(f.pushed * per));
  figure("t2 + t3, backend and return, per op when waited (mean)",
         us((f.sync - f.pushed) * per));
  figure("per op when pipelined (mean)", us(f.async * per));
  figure("default engine: synchronous, total", ms(d.sync));
  figure("default engine: asynchronous, total", ms(d.async));
  explain(conclusions::explain_improving(f) + " " + conclusions::explain_small_ops(f, d));
}

// 4. The exercise: is asynchrony observable on the CPU?
void on_the_cpu(Engine& naive, const Options& o) {
  auto worker = Engine::create("threaded", {.cpu_threads = 1});
  // Frontend work the main thread does meanwhile: a host-side loop of fixed size.
  auto host_work = [] {
    std::vector<float> v(1 << 21);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>((i * 2654435761u) % 1000003);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const int dots = std::max(1, o.repeats / 2);
  struct Run {
    double dots;   // pushing the products: on the naive engine, computing them
    double push;   // one push of a product and its accumulation (median)
    double host;   // the host work after them
    double total;  // until the accumulated products exist
  };
  // One push is a tiny-op time: its figure is the median over the run's pushes, which costs
  // nothing extra, where repeating the whole experiment would add a third of a second a run.
  auto run = [&](Engine& e) {
    EngineScope use(e);
    NDArray a = nd::random_normal({o.n, o.n});
    waitall();
    Run r{};
    std::vector<double> pushes;
    const auto t0 = Clock::now();
    NDArray acc = nd::zeros({o.n, o.n});
    for (int i = 0; i < dots; ++i) {
      const auto p0 = Clock::now();
      acc += nd::dot(a, a);
      pushes.push_back(seconds_since(p0));
    }
    r.dots = seconds_since(t0);
    r.push = median(pushes);
    const auto h0 = Clock::now();
    volatile float sink = host_work();
    (void)sink;
    r.host = seconds_since(h0);
    acc.wait_to_read();
    r.total = seconds_since(t0);
    return r;
  };
  const Run serial = run(naive);
  const Run overlapped = run(*worker);
  const conclusions::OverlapFigures f{.dots = dots,
                                      .cores = std::thread::hardware_concurrency(),
                                      .naive_dots = serial.dots,
                                      .naive_host = serial.host,
                                      .naive_total = serial.total,
                                      .push = overlapped.push,
                                      .threaded_total = overlapped.total};
  heading(4, "Exercise: is asynchrony observable on the CPU? " + conclusions::overlap_answer(f));
  const std::string d = std::to_string(dots);
  figure("naive: " + d + " x (acc += dot), computed inline", ms(f.naive_dots));
  figure("naive: then the host work (sort 2M floats)", ms(f.naive_host));
  figure("naive: total", ms(f.naive_total));
  figure("threaded, 1 CPU worker: one push (median of " + d + ")", us(f.push));
  figure("threaded, 1 CPU worker: total, dots beside the host work", ms(f.threaded_total));
  figure("overlap saved (naive total - threaded total)", ms(f.naive_total - f.threaded_total));
  explain(conclusions::explain_overlap(f));
}

// 5. A loop of batches pushed without and with a bound on the ops in flight.
//
// Each variant runs in a fresh process of this binary (the hidden `demo --memory-run`).
// Run one after the other in one process, the second reuses the storage the first freed
// (the frontend's pool keeps up to 256 MiB, the allocator the rest), so its RSS does not
// grow at all: a bounded loop holding 12 MiB showed a gain of 0.0 MiB. Running the bounded
// variant first would hand its pooled storage to the unbounded one (up to 12 MiB missing
// from that figure), and the engine's own counters (peak pending, peak storage), though
// clean, are not the memory the process holds. A fresh process costs about 0.1 s to start.
constexpr std::size_t kBatchSide = 512;

// One variant in this process. Its RSS gain and page faults are its own only in a fresh
// process (memory_in_child); memory() drops them otherwise.
conclusions::MemoryRun memory_run(long bound, int batches) {
  const std::size_t n = kBatchSide;
  std::vector<float> host(n * n);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 7) * 0.01f;
  auto e = Engine::create("threaded", {.max_inflight = bound});
  EngineScope use(*e);
  NDArray w = nd::random_normal({n, n}, 0.0f, 0.01f);
  NDArray total = nd::zeros({});
  waitall();
  nd::reset_memory_peak();
  // Resets VmHWM to the current RSS (Linux >= 4.0), so that the peak below is the loop's.
  // Where that fails, VmHWM is the fresh process's peak so far, a few MiB at most.
  std::ofstream("/proc/self/clear_refs") << "5";
  const std::size_t rss0 = status_bytes("VmRSS");
  const long faults0 = minor_page_faults();
  const auto t0 = Clock::now();
  for (int i = 0; i < batches; ++i) {
    // As a data loader would: the batch is copied in on the frontend, then used by ops.
    NDArray batch = nd::array(host, {n, n});
    total += nd::sum(nd::relu(nd::dot(batch, w)));
  }
  total.wait_to_read();
  const double s = seconds_since(t0);
  // The ops write their outputs after the loop has pushed them all, so RSS keeps growing
  // while total.wait_to_read() waits: the high-water mark sees that, sampling in the loop
  // would not.
  const std::size_t hwm = status_bytes("VmHWM");
  return {.peak_pending = e->peak_pending(),
          .peak_storage = nd::memory_stats().peak,
          .rss_gain = hwm > rss0 ? hwm - rss0 : 0,
          .page_faults = minor_page_faults() - faults0,
          .seconds = s};
}

// The child's side of memory_in_child: one line of figures on stdout.
int memory_child(long bound, int batches) {
  const conclusions::MemoryRun r = memory_run(bound, batches);
  std::printf("%zu %zu %zu %ld %.9f\n", r.peak_pending, r.peak_storage, *r.rss_gain,
              *r.page_faults, r.seconds);
  return 0;
}

// Runs memory_run(bound, batches) in a fresh process of this binary; sets `why` and returns
// nothing when that fails.
std::optional<conclusions::MemoryRun> memory_in_child(long bound, int batches, std::string& why) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    why = std::string("pipe: ") + std::strerror(errno);
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::string b = std::to_string(bound), n = std::to_string(batches);
  std::string name = "depengine", command = "demo", flag = "--memory-run";
  char* argv[] = {name.data(), command.data(), flag.data(), b.data(), n.data(), nullptr};
  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    why = std::string("starting /proc/self/exe: ") + std::strerror(rc);
    return std::nullopt;
  }
  std::string out;
  char buf[256];
  for (;;) {
    const ssize_t k = read(fds[0], buf, sizeof buf);
    if (k > 0) {
      out.append(buf, static_cast<std::size_t>(k));
    } else if (k == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  conclusions::MemoryRun r;
  std::size_t rss = 0;
  long faults = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      std::sscanf(out.c_str(), "%zu %zu %zu %ld %lf", &r.peak_pending, &r.peak_storage, &rss,
                  &faults, &r.seconds) != 5) {
    why = "the child process failed";
    return std::nullopt;
  }
  r.rss_gain = rss;
  r.page_faults = faults;
  return r;
}

void memory(const Options& o) {
  heading(5, "Memory: " + std::to_string(o.batches) +
                 " batches pushed, without and with a bound on the ops in flight");
  // Storage a batch holds until its ops have run: the batch, its product and the relu of
  // it (the sum's scalar aside).
  conclusions::MemoryFigures f;
  f.batches = o.batches;
  f.batch_bytes = 3 * kBatchSide * kBatchSide * sizeof(float);
  f.bound = 16;
  std::string why;
  auto unbounded = memory_in_child(-1, o.batches, why);
  auto bounded = unbounded ? memory_in_child(f.bound, o.batches, why) : std::nullopt;
  const bool fresh = unbounded && bounded;
  if (fresh) {
    f.unbounded = *unbounded;
    f.bounded = *bounded;
  } else {
    // RSS and page faults would carry the other variant's memory: left out.
    f.unbounded = memory_run(-1, o.batches);
    f.bounded = memory_run(f.bound, o.batches);
    for (conclusions::MemoryRun* r : {&f.unbounded, &f.bounded}) {
      r->rss_gain.reset();
      r->page_faults.reset();
    }
  }
  std::printf("   %-20s %12s %13s %14s %12s %10s\n", "", "peak pending", "peak storage",
              "peak RSS gain", "page faults", "time");
  auto row = [](const std::string& label, const conclusions::MemoryRun& r) {
    std::printf("   %-20s %12zu %13s %14s %12s %10s\n", label.c_str(), r.peak_pending,
                mib(r.peak_storage).c_str(), r.rss_gain ? mib(*r.rss_gain).c_str() : "n/a",
                r.page_faults ? std::to_string(*r.page_faults).c_str() : "n/a",
                ms(r.seconds).c_str());
  };
  row("no bound", f.unbounded);
  row("max_inflight = " + std::to_string(f.bound), f.bounded);
  if (fresh) {
    std::printf("   (each row measured in a fresh process of its own)\n");
  } else {
    std::printf("   (%s: both rows measured in this process, RSS and faults left out)\n",
                why.c_str());
  }
  explain(conclusions::explain_memory(f));
}

// The largest matrix side --n takes: a few N x N float matrices live at once (at this
// bound, about 1 GB in all).
constexpr std::size_t kMaxN = 8192;

constexpr const char* kHelp =
    "usage: depengine demo [--n N] [--quick]\n"
    "  replays the experiments of d2l.ai chapter 13.2 on the naive and threaded\n"
    "  engines. --n sets the matrix size (1 to 8192; default 1000, or 200 with --quick);\n"
    "  --quick runs smaller loops (for tests).\n";

// The hidden arguments memory_in_child passes: "--memory-run BOUND BATCHES".
int memory_child_from(int argc, char** argv) {
  long bound = 0;
  int batches = 0;
  auto parse = [](const char* s, auto& out) {
    const std::string_view v = s;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return ec == std::errc() && end == v.data() + v.size();
  };
  if (argc != 3 || !parse(argv[1], bound) || !parse(argv[2], batches) || batches < 1) {
    throw UsageError("--memory-run takes a bound and a positive number of batches");
  }
  return memory_child(bound, batches);
}

}  // namespace

int demo(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (argc > 0 && std::string_view(argv[0]) == "--memory-run") {
    return memory_child_from(argc, argv);
  }
  // The shared parser: a flag without its value, an unknown flag or a stray argument is
  // named on one line (they printed the usage, naming nothing), and --n=N works as
  // elsewhere.
  const Args args(argc, argv, {"--n"}, {"--quick"});
  if (!args.positional().empty()) {
    throw UsageError("unexpected argument '" + args.positional().front() + "'");
  }
  Options o;
  if (args.has("--quick")) {
    o.n = 200;
    o.repeats = 4;
    o.increments = 500;
    o.batches = 24;
  }
  // --n wins over --quick's size whatever their order (`--n 500 --quick` ran n = 200).
  o.n = args.integer<std::size_t>("--n", o.n, 1, kMaxN);
  auto naive = Engine::create("naive");
  auto threaded = Engine::create("threaded");
  std::printf(
      "depengine demo: d2l.ai chapter 13.2, Asynchronous Computation, in C++\n"
      "machine: %u cores; threaded engine: %d CPU workers; naive engine: inline on the caller;\n"
      "GEMM: OpenBLAS pinned to 1 thread on tiles spread over the caller's oneTBB arena\n"
      "(docs/threading.md); n = %zu\n",
      std::thread::hardware_concurrency(), threaded->cpu_threads(), o.n);
  asynchrony(*naive, *threaded, o);
  barriers(*threaded, o);
  improving(*threaded, o);
  on_the_cpu(*naive, o);
  memory(o);
  return 0;
}

}  // namespace depengine::cli
