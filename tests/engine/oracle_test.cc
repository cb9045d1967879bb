// Randomized oracle (design point 1): random programs — hundreds of vars, random read and
// write sets with duplicates, some ops asynchronous and completed from other threads, some
// throwing — run on the naive and threaded engines with 1, 2, 3 and 8 workers and 1 or 4
// frontend threads, and must match a plain sequential model exactly, failures included.
#include <condition_variable>
#include <cstdint>
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
constexpr int kSeeds = 10;
constexpr int kVars = 300;

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
};

// The sequential model: values and failure origins per var.
struct Model {
  std::vector<std::uint64_t> value = std::vector<std::uint64_t>(kVars, 0);
  std::vector<int> failed = std::vector<int>(kVars, -1);  // op that failed it, or -1
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

std::vector<OpSpec> generate(std::uint32_t seed, int n, int first_var, int var_count) {
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

void push_op(Engine& e, const OpSpec& op, const std::vector<Var>& vars,
             std::vector<std::uint64_t>& value, Completer& completer) {
  std::vector<Var> reads, writes;
  for (int r : op.reads) reads.push_back(vars[static_cast<std::size_t>(r)]);
  for (int w : op.writes) writes.push_back(vars[static_cast<std::size_t>(w)]);
  auto body = [&value, &op] {
    if (op.throws) throw std::runtime_error(std::to_string(op.index));
    std::uint64_t h = compute(op, value);
    for (int w : op.writes) value[static_cast<std::size_t>(w)] = mix(h, static_cast<std::uint64_t>(w));
  };
  if (op.async) {
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
};

class Oracle : public testing::TestWithParam<Config> {};

// One frontend: the program's push order is the model's order; waits in the middle of the
// program are checked against the model at that point.
void run_single_frontend(Engine& e, std::uint32_t seed) {
  Completer completer(2);
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e.new_var());
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<OpSpec> ops = generate(seed, kOpsPerSeed, 0, kVars);
  Model model;
  std::mt19937 rng(seed ^ 0xabcdefu);
  for (const OpSpec& op : ops) {
    push_op(e, op, vars, value, completer);
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
void run_multi_frontend(Engine& e, std::uint32_t seed, int frontends) {
  Completer completer(2);
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e.new_var());
  std::vector<std::uint64_t> value(kVars, 0);
  const int share = kVars / frontends;
  std::vector<Model> models(static_cast<std::size_t>(frontends));
  std::vector<std::vector<OpSpec>> programs;
  for (int t = 0; t < frontends; ++t) {
    programs.push_back(generate(seed * 31u + static_cast<std::uint32_t>(t), kOpsPerSeed / frontends,
                                t * share, share));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < frontends; ++t) {
    threads.emplace_back([&, t] {
      for (const OpSpec& op : programs[static_cast<std::size_t>(t)]) push_op(e, op, vars, value, completer);
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
  for (int s = 0; s < kSeeds; ++s) {
    auto e = Engine::create(c.kind, {.cpu_threads = c.threads});
    const auto seed = static_cast<std::uint32_t>(1000 + s);
    if (c.frontends == 1) {
      run_single_frontend(*e, seed);
    } else {
      run_multi_frontend(*e, seed, c.frontends);
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
  auto e = Engine::create(c.kind, {.cpu_threads = c.threads});
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(e->new_var());
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<OpSpec> ops = generate(77, 3000, 0, kVars);
  int first = -1;
  for (const OpSpec& op : ops) {
    push_op(*e, op, vars, value, completer);
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
                    Config{"threaded", 2, 4}, Config{"threaded", 3, 4}, Config{"threaded", 8, 4}),
    [](const testing::TestParamInfo<Config>& p) {
      return p.param.kind + "_" + std::to_string(p.param.threads) + "w_" +
             std::to_string(p.param.frontends) + "f";
    });

}  // namespace
}  // namespace depengine::test
