// Randomized oracle (design point 1): random programs — hundreds of vars, random read and
// write sets with duplicates, some ops asynchronous and completed from other threads, some
// throwing — run on the naive and threaded engines with 1, 2, 3 and 8 workers and 1 or 4
// frontend threads, and must match a plain sequential model exactly, failures included.
// The `gpu` configurations place a fifth of the ops on two host-simulated GPUs, on random
// lanes, their work on the stream and their failures raised there or by the launch, so that
// event waits across streams (data and ordering alike) meet failed work.
//
// DEPENGINE_ORACLE_SEEDS=n runs n seeds per configuration instead of 10.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace depengine::test {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kOpsPerSeed = 2500;  // sanitizers run ~10x slower; same shapes, fewer ops
#else
constexpr int kOpsPerSeed = 10000;
#endif
constexpr int kVars = 300;

int seed_count() {
  const char* env = std::getenv("DEPENGINE_ORACLE_SEEDS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : 10;
}

std::uint64_t mix(std::uint64_t h, std::uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

struct OpSpec {
  int index;  // position in its frontend's program
  std::vector<int> reads, writes;  // may hold duplicates; a var may be in both
  bool async = false;
  bool throws = false;
  int gpu = -1;  // the GPU it runs on, or -1 for the CPU
  Lane lane = Lane::compute;
  bool throws_at_launch = false;  // a GPU op's failure: raised by the launch, else on the stream
};

// The sequential model: values and failure origins per var, and which ops run (an op runs
// unless it reads a failed var; one that throws has run).
struct Model {
  std::vector<std::uint64_t> value = std::vector<std::uint64_t>(kVars, 0);
  std::vector<int> failed = std::vector<int>(kVars, -1);  // op that failed it, or -1
  std::vector<char> ran;                                   // by op index
};

// What every op computes from what it reads, shared by the model and the engine runs.
std::uint64_t compute(const OpSpec& op, const std::vector<std::uint64_t>& value) {
  std::uint64_t h = static_cast<std::uint64_t>(op.index) * 1315423911ULL;
  for (int r : op.reads) h = mix(h, value[r]);
  return h;
}

void apply(const OpSpec& op, Model& m) {
  int upstream = -1;
  for (int r : op.reads) {
    if (m.failed[r] >= 0 && (upstream < 0 || m.failed[r] < upstream)) upstream = m.failed[r];
  }
  m.ran.push_back(upstream < 0);
  if (upstream >= 0 || op.throws) {
    for (int w : op.writes) m.failed[w] = upstream >= 0 ? upstream : op.index;
    return;
  }
  std::uint64_t h = compute(op, m.value);
  for (int w : op.writes) {
    m.value[w] = mix(h, static_cast<std::uint64_t>(w));
    m.failed[w] = -1;
  }
}

// `gpu_percent` of the ops go to one of two GPUs; with 0 the program is the same as before
// GPU ops existed (no extra draws).
std::vector<OpSpec> generate(std::uint32_t seed, int n, int first_var, int var_count,
                             int gpu_percent) {
  std::mt19937 rng(seed);
  auto pick = [&] { return first_var + static_cast<int>(rng() % static_cast<unsigned>(var_count)); };
  std::vector<OpSpec> ops;
  ops.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    OpSpec op;
    op.index = i;
    int nr = static_cast<int>(rng() % 4);
    int nw = 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < nr; ++k) op.reads.push_back(pick());
    for (int k = 0; k < nw; ++k) op.writes.push_back(pick());
    if (rng() % 10 == 0 && !op.reads.empty()) op.reads.push_back(op.reads[0]);  // duplicate
    if (rng() % 8 == 0) op.reads.push_back(op.writes[0]);                       // read-write
    op.async = rng() % 10 == 0;
    op.throws = rng() % 100 == 0;
    if (gpu_percent > 0 && static_cast<int>(rng() % 100) < gpu_percent) {
      op.gpu = static_cast<int>(rng() % 2);
      op.lane = static_cast<Lane>(rng() % kLaneCount);
      op.throws_at_launch = rng() % 4 == 0;
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

// Threads that complete asynchronous ops, as a GPU callback or I/O system would.
class Completer {
 public:
  explicit Completer(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Completer() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Notifies under the lock: the job may finish the test before an unlocked notify returns.
  void post(std::function<void()> job) {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// `ran[op.index]` is set when the op's body starts.
void push_op(Engine& e, const OpSpec& op, const std::vector<Var>& vars,
             std::vector<std::uint64_t>& value, std::vector<char>& ran, Completer& completer) {
  std::vector<Var> reads, writes;
  for (int r : op.reads) reads.push_back(vars[static_cast<std::size_t>(r)]);
  for (int w : op.writes) writes.push_back(vars[static_cast<std::size_t>(w)]);
  auto body = [&value, &ran, &op] {
    ran[static_cast<std::size_t>(op.index)] = 1;
    if (op.throws) throw std::runtime_error(std::to_string(op.index));
    std::uint64_t h = compute(op, value);
    for (int w : op.writes) value[static_cast<std::size_t>(w)] = mix(h, static_cast<std::uint64_t>(w));
  };
  if (op.gpu >= 0) {
    const PushOptions on{.device = Device::gpu(op.gpu), .lane = op.lane};
    if (op.async) {  // completed by its own stream work
      e.push_async([body](const RunContext& ctx, Completion done) {
        ctx.stream->enqueue_host([body, done] {
          try {
            body();
            done();
          } catch (...) {
            done(std::current_exception());
          }
        });
      }, reads, writes, on);
    } else {
      e.push([body, &op](const RunContext& ctx) {
        if (op.throws && op.throws_at_launch) body();
        ctx.stream->enqueue_host([body, &op] {
          // A fault found late: the ops pushed behind it are launched, and wait on its
          // event, while it is still in flight.
          if (op.throws) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          body();
        });
      }, reads, writes, on);
    }
  } else if (op.async) {
    e.push_async([body, &completer](Completion done) {
      completer.post([body, done] {
        try {
          body();
          done();
        } catch (...) {
          done(std::current_exception());
        }
      });
    }, reads, writes);
  } else {
    e.push(body, reads, writes);
  }
}

// The failure origin `v` holds on engine `e`, or -1.
int failure_of(Engine& e, const Var& v) {
  try {
    e.wait_to_read(v);
    return -1;
  } catch (const std::runtime_error& err) {
    return std::stoi(err.what());
  }
}

struct Config {
  std::string kind;
  int threads;
  int frontends;
  int gpu_percent = 0;
  friend void PrintTo(const Config& c, std::ostream* os) {
    *os << c.kind << "/" << c.threads << "w/" << c.frontends << "f/gpu" << c.gpu_percent;
  }
};

std::unique_ptr<Engine> make_oracle_engine(const Config& c) {
  return Engine::create(c.kind, {.cpu_threads = c.threads, .sim_gpus = c.gpu_percent > 0 ? 2 : 0});
}

class Oracle : public testing::TestWithParam<Config> {};

// The first op that ran on the engine but not in the model, or the other way round; -1.
// One exception: a synchronous GPU op that the model skips may have run. It can be launched
// while the device work it reads is still in flight, behind that work on the same stream (or
// behind an op that was), and then runs before that work fails, as on a GPU, where launched
// kernels cannot be recalled; it is failed all the same, which the checks of the vars see.
int first_ran_mismatch(const std::vector<OpSpec>& ops, const std::vector<char>& ran,
                       const Model& m) {
  for (std::size_t i = 0; i < ran.size(); ++i) {
    if (ran[i] == m.ran[i]) continue;
    const bool launched_early = ran[i] && ops[i].gpu >= 0 && !ops[i].async;
    if (!launched_early) return static_cast<int>(i);
  }
  return -1;
}

// For failure messages: "op 12 (gpu(1) copy_to_device, async) reads {3} writes {4 7} ran 1".
std::string describe(const OpSpec& op, const std::vector<char>& ran) {
  std::string s = "op " + std::to_string(op.index) + " (" +
                  (op.gpu >= 0 ? Device::gpu(op.gpu).str() + " " + lane_name(op.lane) : "cpu") +
                  (op.async ? ", async" : "") + (op.throws ? ", throws" : "") + ") reads {";
  for (int r : op.reads) s += " " + std::to_string(r);
  s += " } writes {";
  for (int w : op.writes) s += " " + std::to_string(w);
  return s + " } ran " + std::to_string(int{ran[static_cast<std::size_t>(op.index)]});
}

struct DrainOnExit {
  Engine& e;
  ~DrainOnExit() {
    try {
      e.wait_all();
    } catch (const std::runtime_error&) {
    }
  }
};

// One frontend: the program's push order is the model's order; waits in the middle of the
// program are checked against the model at that point.
void run_single_frontend(Engine& e, std::uint32_t seed, int gpu_percent) {
  Completer completer(2);
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e.new_var());
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<OpSpec> ops = generate(seed, kOpsPerSeed, 0, kVars, gpu_percent);
  std::vector<char> ran(ops.size(), 0);
  // A failed check returns early: the ops in flight use the locals above.
  DrainOnExit drain{e};
  Model model;
  std::mt19937 rng(seed ^ 0xabcdefu);
  for (const OpSpec& op : ops) {
    push_op(e, op, vars, value, ran, completer);
    apply(op, model);
    if (rng() % 997 == 0) {  // a blocker in the middle of the program
      int v = static_cast<int>(rng() % kVars);
      int f = failure_of(e, vars[static_cast<std::size_t>(v)]);
      ASSERT_EQ(f, model.failed[v]) << "seed " << seed << " var " << v << " after op " << op.index;
      if (f < 0) {
        ASSERT_EQ(value[v], model.value[v]) << "seed " << seed << " var " << v;
      }
    }
  }
  try {
    e.wait_all();
  } catch (const std::runtime_error&) {
  }
  const int mismatch = first_ran_mismatch(ops, ran, model);
  ASSERT_LT(mismatch, 0) << "seed " << seed << " "
                         << describe(ops[static_cast<std::size_t>(mismatch)], ran);
  for (int v = 0; v < kVars; ++v) {
    int f = failure_of(e, vars[static_cast<std::size_t>(v)]);
    ASSERT_EQ(f, model.failed[v]) << "seed " << seed << " var " << v;
    if (f < 0) {
      ASSERT_EQ(value[v], model.value[v]) << "seed " << seed << " var " << v;
    }
  }
}

// Several frontends push at once, each its own program over its own share of the vars plus
// reads of vars that no one writes; each share must match its own sequential model.
void run_multi_frontend(Engine& e, std::uint32_t seed, int frontends, int gpu_percent) {
  Completer completer(2);
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e.new_var());
  std::vector<std::uint64_t> value(kVars, 0);
  const int share = kVars / frontends;
  std::vector<Model> models(static_cast<std::size_t>(frontends));
  std::vector<std::vector<OpSpec>> programs;
  std::vector<std::vector<char>> ran;
  for (int t = 0; t < frontends; ++t) {
    programs.push_back(generate(seed * 31u + static_cast<std::uint32_t>(t), kOpsPerSeed / frontends,
                                t * share, share, gpu_percent));
    ran.emplace_back(programs.back().size(), 0);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < frontends; ++t) {
    threads.emplace_back([&, t] {
      const auto ti = static_cast<std::size_t>(t);
      for (const OpSpec& op : programs[ti]) push_op(e, op, vars, value, ran[ti], completer);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < frontends; ++t) {
    for (const OpSpec& op : programs[static_cast<std::size_t>(t)]) apply(op, models[static_cast<std::size_t>(t)]);
  }
  try {
    e.wait_all();
  } catch (const std::runtime_error&) {
  }
  for (int t = 0; t < frontends; ++t) {
    const Model& m = models[static_cast<std::size_t>(t)];
    const std::vector<char>& ran_t = ran[static_cast<std::size_t>(t)];
    const int mismatch = first_ran_mismatch(programs[static_cast<std::size_t>(t)], ran_t, m);
    ASSERT_LT(mismatch, 0) << "seed " << seed << " frontend " << t << " "
                           << describe(programs[static_cast<std::size_t>(t)][static_cast<std::size_t>(mismatch)], ran_t);
    for (int v = t * share; v < (t + 1) * share; ++v) {
      int f = failure_of(e, vars[static_cast<std::size_t>(v)]);
      ASSERT_EQ(f, m.failed[v]) << "seed " << seed << " frontend " << t << " var " << v;
      if (f < 0) {
        ASSERT_EQ(value[v], m.value[v]) << "seed " << seed << " frontend " << t << " var " << v;
      }
    }
  }
}

TEST_P(Oracle, RandomProgramsMatchTheSequentialModel) {
  const Config& c = GetParam();
  const int seeds = seed_count();
  for (int s = 0; s < seeds; ++s) {
    auto e = make_oracle_engine(c);
    const auto seed = static_cast<std::uint32_t>(1000 + s);
    if (c.frontends == 1) {
      run_single_frontend(*e, seed, c.gpu_percent);
    } else {
      run_multi_frontend(*e, seed, c.frontends, c.gpu_percent);
    }
    if (HasFatalFailure()) return;
  }
}

// wait_all rethrows the first failure in push order, whatever the scheduling. (An op that
// is skipped because an input failed does not count: only ops that threw.)
TEST_P(Oracle, WaitAllReportsTheFirstFailureInPushOrder) {
  const Config& c = GetParam();
  if (c.frontends != 1) GTEST_SKIP() << "push order across frontends is not fixed";
  Completer completer(2);
  auto e = make_oracle_engine(c);
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e->new_var());
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<OpSpec> ops = generate(77, 3000, 0, kVars, c.gpu_percent);
  std::vector<char> ran(ops.size(), 0);
  int first = -1;
  for (const OpSpec& op : ops) {
    push_op(*e, op, vars, value, ran, completer);
    if (op.throws && first < 0) first = op.index;
  }
  ASSERT_GE(first, 0) << "the program should contain a throwing op";
  try {
    e->wait_all();
    FAIL() << "expected op " << first << " to be reported";
  } catch (const std::runtime_error& err) {
    EXPECT_EQ(std::stoi(err.what()), first);
  }
  EXPECT_NO_THROW(e->wait_all());
}

INSTANTIATE_TEST_SUITE_P(
    Engines, Oracle,
    testing::Values(Config{"naive", 1, 1}, Config{"threaded", 1, 1}, Config{"threaded", 2, 1},
                    Config{"threaded", 3, 1}, Config{"threaded", 8, 1}, Config{"threaded", 1, 4},
                    Config{"threaded", 2, 4}, Config{"threaded", 3, 4}, Config{"threaded", 8, 4},
                    Config{"naive", 1, 1, 20}, Config{"threaded", 1, 1, 20},
                    Config{"threaded", 2, 1, 20}, Config{"threaded", 8, 1, 20},
                    Config{"threaded", 2, 4, 20}),
    [](const testing::TestParamInfo<Config>& p) {
      return p.param.kind + "_" + std::to_string(p.param.threads) + "w_" +
             std::to_string(p.param.frontends) + "f" +
             (p.param.gpu_percent > 0 ? "_gpu" + std::to_string(p.param.gpu_percent) : "");
    });

}  // namespace
}  // namespace depengine::test
