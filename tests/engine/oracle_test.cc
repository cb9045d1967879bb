// Randomized oracle (design point 1): random programs — hundreds of vars, random read and
// write sets with duplicates, some ops asynchronous and completed from other threads, some
// throwing — run on the naive and threaded engines with 1, 2, 3 and 8 workers and 1 or 4
// frontend threads, and must match a plain sequential model exactly, failures included.
// The `gpu` configurations place a fifth of the ops on two host-simulated GPUs, on random
// lanes, their work on the stream and their failures raised there or by the launch, so that
// event waits across streams (data and ordering alike) meet failed work.
//
// SharedOracle goes further: several frontends push into the same vars at once, with random
// priorities (the priority lane included), delete_var replacing vars, ops on simulated GPUs
// and an observer attached; the order in which the pushes happened is logged and replayed on
// the naive engine, and the two engines must agree exactly (values, failures, which ops ran,
// the values deleted vars held, the observer's counts).
//
// The `modes` configurations give a fifth of the ops one commute(v) or reduce(v) access (a
// commutative update: the var's value plus a hash of what the op reads, so the sequential
// result is defined whatever order the engine picks): commute on CPU ops, async ones
// included, reduce on synchronous CPU ops, whose contributions meet in per-thread buffers.
//
// Every third CPU op is small (PushOptions::small), so that ops run inside their push
// (an idle threaded engine) meet the rest.
//
// DEPENGINE_ORACLE_SEEDS=n runs n seeds per configuration instead of 10.
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "serial_worker.h"
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
  int index = 0;  // position in its frontend's program
  std::vector<int> reads, writes;  // may hold duplicates; a var may be in both
  bool async = false;
  bool throws = false;
  int gpu = -1;  // the GPU it runs on, or -1 for the CPU
  Lane lane = Lane::compute;
  bool throws_at_launch = false;  // a GPU op's failure: raised by the launch, else on the stream
  int priority = 0;
  bool delete_var = false;  // SharedOracle: deletes writes[0]'s var, which gets a new one
  std::vector<int> commutes, reduces;  // commute(v) and reduce(v) accesses, apart from the rest
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

// The commutative update of a commute or reduce access: value += contribution(h, v).
std::uint64_t contribution(std::uint64_t h, int v) {
  return mix(h, static_cast<std::uint64_t>(v) + 7777);
}

// Commute and reduce accesses do not inherit their var's failure (the ops of a run go in
// any order, so none may see another's); they pass the op's failure on to the var, where
// the earliest origin stays. An update of a failed var is lost (its value is never seen:
// every later reader is skipped until a write replaces it).
void apply(const OpSpec& op, Model& m) {
  int upstream = -1;
  auto see = [&](int r) {
    if (m.failed[r] >= 0 && (upstream < 0 || m.failed[r] < upstream)) upstream = m.failed[r];
  };
  for (int r : op.reads) see(r);
  m.ran.push_back(upstream < 0);
  if (upstream >= 0 || op.throws) {
    const int origin = upstream >= 0 ? upstream : op.index;
    for (int w : op.writes) m.failed[w] = origin;
    for (int v : op.commutes) {
      if (m.failed[v] < 0 || origin < m.failed[v]) m.failed[v] = origin;
    }
    for (int v : op.reduces) {
      if (m.failed[v] < 0 || origin < m.failed[v]) m.failed[v] = origin;
    }
    return;
  }
  std::uint64_t h = compute(op, m.value);
  for (int w : op.writes) {
    m.value[w] = mix(h, static_cast<std::uint64_t>(w));
    m.failed[w] = -1;
  }
  for (int c : op.commutes) {
    if (m.failed[c] < 0) m.value[c] += contribution(h, c);
  }
  for (int r : op.reduces) {
    if (m.failed[r] < 0) m.value[r] += contribution(h, r);
  }
}

// `gpu_percent` of the ops go to one of two GPUs, `mode_percent` get a commute or reduce
// access; with 0 the program is the same as before they existed (no extra draws).
std::vector<OpSpec> generate(std::uint32_t seed, int n, int first_var, int var_count,
                             int gpu_percent, int mode_percent = 0) {
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
    if (mode_percent > 0 && static_cast<int>(rng() % 100) < mode_percent) {
      // On a var the op lists nowhere else, so that what it computes does not read a value
      // that the other ops of the run change in any order.
      const int v = pick();
      const bool elsewhere = std::find(op.reads.begin(), op.reads.end(), v) != op.reads.end() ||
                             std::find(op.writes.begin(), op.writes.end(), v) != op.writes.end();
      // CPU ops only: on a GPU, a commute op also inherits the device failures of the op
      // before it in the run, which the events chain (docs/design.md).
      const bool reduce = rng() % 2 == 0 && !op.async;
      if (!elsewhere && op.gpu < 0) (reduce ? op.reduces : op.commutes).push_back(v);
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

// Threads that complete asynchronous ops, as a GPU callback or I/O system would: the
// engine's own serial workers, jobs dealt round-robin.
class Completer {
 public:
  explicit Completer(int threads) {
    for (int i = 0; i < threads; ++i) {
      workers_.push_back(std::make_unique<detail::SerialWorker<std::function<void()>>>(
          [](std::function<void()>& job) { job(); }));
    }
  }
  void post(std::function<void()> job) {
    workers_[next_.fetch_add(1) % workers_.size()]->push(std::move(job));
  }

 private:
  std::vector<std::unique_ptr<detail::SerialWorker<std::function<void()>>>> workers_;
  std::atomic<std::size_t> next_{0};
};

// Ops pushed by running ops (issue 27): every fifth synchronous CPU op, once it has
// computed what it writes, pushes a child that writes a var of its own; the child pushes a
// grandchild that reads it and writes another. Both run exactly when their pusher's body
// did not throw, and the program's last wait_all must find them done: they belong to the
// epoch of the op that pushed them. The last ops' children are slow, so that they are still
// to come when that wait_all is called.
class Nested {
 public:
  Nested(Engine& e, std::size_t ops) : e_(e), value_(ops, 0), grand_value_(ops, 0),
                                       ran_(ops, 0), grand_ran_(ops, 0) {
    for (std::size_t i = 0; i < ops; ++i) {
      var_.push_back(pushes_at(i) ? e.new_var() : Var());
      grand_var_.push_back(pushes_at(i) ? e.new_var() : Var());
    }
  }
  static bool pushes(const OpSpec& op) {
    return op.gpu < 0 && !op.async && pushes_at(static_cast<std::size_t>(op.index));
  }
  // Called by op's body with what it computed.
  void from(const OpSpec& op, std::uint64_t h) {
    const auto i = static_cast<std::size_t>(op.index);
    const bool late = i + 100 >= ran_.size();
    e_.push([this, i, h, late] {
      if (late) std::this_thread::sleep_for(std::chrono::microseconds(300));
      value_[i] = mix(h, 424242);
      ran_[i] = 1;
      e_.push([this, i] {
        grand_value_[i] = mix(value_[i], 7);
        grand_ran_[i] = 1;
      }, {var_[i]}, {grand_var_[i]});
    }, {}, {var_[i]});
  }
  // Checks op's nested ops against the model: `h` is what the op computes there, `ran`
  // whether its body ran to the end. Returns a description of the first mismatch, or "".
  std::string check(const OpSpec& op, bool ran, std::uint64_t h) const {
    if (!pushes(op)) return "";
    const auto i = static_cast<std::size_t>(op.index);
    if (ran_[i] != ran || grand_ran_[i] != ran) {
      return "op " + std::to_string(i) + (ran ? " ran" : " did not run") + ", its child ran " +
             std::to_string(int{ran_[i]}) + " and grandchild " + std::to_string(int{grand_ran_[i]});
    }
    if (ran && (value_[i] != mix(h, 424242) || grand_value_[i] != mix(mix(h, 424242), 7))) {
      return "op " + std::to_string(i) + ": its nested ops computed the wrong values";
    }
    return "";
  }

 private:
  static bool pushes_at(std::size_t i) { return i % 5 == 0; }
  Engine& e_;
  std::vector<Var> var_, grand_var_;
  std::vector<std::uint64_t> value_, grand_value_;
  std::vector<char> ran_, grand_ran_;
};

// `ran[op.index]` is set when the op's body starts; `nested`, when given, gets the value of
// every op it pushes from.
void push_op(Engine& e, const OpSpec& op, const std::vector<Var>& vars,
             std::vector<std::uint64_t>& value, std::vector<char>& ran, Completer& completer,
             Nested* nested = nullptr) {
  std::vector<Var> reads, writes;
  for (int r : op.reads) reads.push_back(vars[static_cast<std::size_t>(r)]);
  for (int w : op.writes) writes.push_back(vars[static_cast<std::size_t>(w)]);
  for (int c : op.commutes) writes.push_back(commute(vars[static_cast<std::size_t>(c)]));
  for (int r : op.reduces) writes.push_back(reduce(vars[static_cast<std::size_t>(r)]));
  if (!Nested::pushes(op)) nested = nullptr;
  auto body = [&value, &ran, &op, &vars, nested] {
    ran[static_cast<std::size_t>(op.index)] = 1;
    if (op.throws) throw std::runtime_error(std::to_string(op.index));
    std::uint64_t h = compute(op, value);
    for (int w : op.writes) value[static_cast<std::size_t>(w)] = mix(h, static_cast<std::uint64_t>(w));
    for (int c : op.commutes) value[static_cast<std::size_t>(c)] += contribution(h, c);
    for (int r : op.reduces) {
      *reduction_buffer<std::uint64_t>(vars[static_cast<std::size_t>(r)]) += contribution(h, r);
    }
    if (nested) nested->from(op, h);
  };
  if (op.gpu >= 0) {
    const PushOptions on{.device = Device::gpu(op.gpu), .lane = op.lane, .priority = op.priority};
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
    }, reads, writes, {.lane = op.lane, .priority = op.priority});
  } else {
    // Every third CPU op is small (PushOptions::small): an idle threaded engine runs it on
    // the pushing thread, which must change no result.
    e.push(body, reads, writes,
           {.lane = op.lane, .small = op.index % 3 == 0, .priority = op.priority});
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
  int mode_percent = 0;
  friend void PrintTo(const Config& c, std::ostream* os) {
    *os << c.kind << "/" << c.threads << "w/" << c.frontends << "f/gpu" << c.gpu_percent
        << "/modes" << c.mode_percent;
  }
};

// The program's vars; each sums the contributions of its reduce accesses into its value.
std::vector<Var> make_vars(Engine& e, std::vector<std::uint64_t>& value) {
  std::vector<Var> vars;
  for (std::size_t i = 0; i < value.size(); ++i) {
    vars.push_back(e.new_var());
    e.set_reduction(vars.back(),
                    {.identity = [] { return std::make_shared<std::uint64_t>(0); },
                     .combine =
                         [](void* into, const void* from) {
                           *static_cast<std::uint64_t*>(into) +=
                               *static_cast<const std::uint64_t*>(from);
                         },
                     .target = &value[i]});
  }
  return vars;
}

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
  for (int c : op.commutes) s += " commute " + std::to_string(c);
  for (int r : op.reduces) s += " reduce " + std::to_string(r);
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
// With `with_nested`, ops also push ops (Nested), checked right after the last wait_all.
void run_single_frontend(Engine& e, std::uint32_t seed, int gpu_percent, int mode_percent,
                         bool with_nested = false) {
  Completer completer(2);
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<Var> vars = make_vars(e, value);
  std::vector<OpSpec> ops = generate(seed, kOpsPerSeed, 0, kVars, gpu_percent, mode_percent);
  std::vector<char> ran(ops.size(), 0);
  std::optional<Nested> nested;
  if (with_nested) nested.emplace(e, ops.size());
  std::vector<std::uint64_t> computed(ops.size(), 0);  // by the model, for the nested checks
  // A failed check returns early: the ops in flight use the locals above.
  DrainOnExit drain{e};
  Model model;
  std::mt19937 rng(seed ^ 0xabcdefu);
  for (const OpSpec& op : ops) {
    push_op(e, op, vars, value, ran, completer, nested ? &*nested : nullptr);
    computed[static_cast<std::size_t>(op.index)] = compute(op, model.value);
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
  if (nested) {
    for (const OpSpec& op : ops) {
      const auto i = static_cast<std::size_t>(op.index);
      const std::string bad = nested->check(op, model.ran[i] && !op.throws, computed[i]);
      ASSERT_EQ(bad, "") << "seed " << seed << " (checked as the last wait_all returned)";
    }
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
void run_multi_frontend(Engine& e, std::uint32_t seed, int frontends, int gpu_percent,
                        int mode_percent) {
  Completer completer(2);
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<Var> vars = make_vars(e, value);
  const int share = kVars / frontends;
  std::vector<Model> models(static_cast<std::size_t>(frontends));
  std::vector<std::vector<OpSpec>> programs;
  std::vector<std::vector<char>> ran;
  for (int t = 0; t < frontends; ++t) {
    programs.push_back(generate(seed * 31u + static_cast<std::uint32_t>(t), kOpsPerSeed / frontends,
                                t * share, share, gpu_percent, mode_percent));
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
      run_single_frontend(*e, seed, c.gpu_percent, c.mode_percent);
    } else {
      run_multi_frontend(*e, seed, c.frontends, c.gpu_percent, c.mode_percent);
    }
    if (HasFatalFailure()) return;
  }
}

// Ops pushed by running ops belong to their pusher's wait_all epoch: the program's last
// wait_all returns only once they have run, and they compute what the model says.
TEST_P(Oracle, NestedPushesAreWaitedFor) {
  const Config& c = GetParam();
  if (c.frontends != 1) GTEST_SKIP() << "one frontend: the model checks the nested values";
  const int seeds = std::max(1, seed_count() / 2);
  for (int s = 0; s < seeds; ++s) {
    auto e = make_oracle_engine(c);
    run_single_frontend(*e, static_cast<std::uint32_t>(5000 + s), c.gpu_percent, c.mode_percent,
                        true);
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
  std::vector<std::uint64_t> value(kVars, 0);
  std::vector<Var> vars = make_vars(*e, value);
  std::vector<OpSpec> ops = generate(77, 3000, 0, kVars, c.gpu_percent, c.mode_percent);
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
                    Config{"threaded", 2, 4, 20}, Config{"naive", 1, 1, 0, 20},
                    Config{"threaded", 1, 1, 0, 20}, Config{"threaded", 2, 1, 0, 20},
                    Config{"threaded", 8, 1, 0, 20}, Config{"threaded", 3, 4, 0, 20},
                    Config{"naive", 1, 1, 20, 20}, Config{"threaded", 2, 1, 20, 20},
                    Config{"threaded", 8, 4, 20, 20}),
    [](const testing::TestParamInfo<Config>& p) {
      return p.param.kind + "_" + std::to_string(p.param.threads) + "w_" +
             std::to_string(p.param.frontends) + "f" +
             (p.param.gpu_percent > 0 ? "_gpu" + std::to_string(p.param.gpu_percent) : "") +
             (p.param.mode_percent > 0 ? "_modes" + std::to_string(p.param.mode_percent) : "");
    });

// --- Frontends sharing vars, replayed on the naive engine ---

// Counts an engine's observer events.
class CountingObserver final : public Observer {
 public:
  void on_push(const OpInfo&) override { pushes.fetch_add(1); }
  void on_ready(std::uint64_t) override { readies.fetch_add(1); }
  void on_start(std::uint64_t, int) override { starts.fetch_add(1); }
  void on_end(std::uint64_t, bool, bool) override { ends.fetch_add(1); }
  std::atomic<long> pushes{0}, readies{0}, starts{0}, ends{0};
};

// One frontend's program over slots (the shared var table): ops as in generate(), plus
// priorities, the priority lane and deletes. Slot numbers become cell numbers (one cell per
// var ever made) when the op is pushed.
std::vector<OpSpec> generate_shared(std::uint32_t seed, int n, int gpu_percent) {
  std::vector<OpSpec> ops = generate(seed, n, 0, kVars, gpu_percent);
  std::mt19937 rng(seed ^ 0x5eedu);
  constexpr int kPriorities[] = {-3, -1, 0, 0, 0, 0, 1, 2, 10};
  for (OpSpec& op : ops) {
    op.priority = kPriorities[rng() % std::size(kPriorities)];
    if (op.gpu < 0 && rng() % 10 == 0) op.lane = Lane::priority;
    if (rng() % 50 == 0) {
      OpSpec del;
      del.index = op.index;
      del.delete_var = true;
      del.writes = {op.writes[0]};
      op = del;
    }
  }
  return ops;
}

// What a run leaves behind, compared between the engines.
struct SharedOutcome {
  std::vector<OpSpec> log;  // the pushes in the order they happened, slots resolved to cells
  std::vector<std::uint64_t> value;    // by cell
  std::vector<int> failed;             // by cell: the failure origin, or -1
  std::vector<std::uint64_t> deleted;  // by cell: its value when its delete ran
  std::vector<char> ran;               // by op (log position)
  long pushes = 0, ends = 0;
};

constexpr int kMaxCells = kVars + kOpsPerSeed;  // every delete makes one more var

// Runs `programs` (one per frontend thread, or their logged order when `replay` is set, on
// one thread) on `e`. Pushes go through one mutex, which fixes the order that the log and
// the model follow; a blocker every ~500 ops checks one var against the model meanwhile.
void run_shared(Engine& e, const std::vector<std::vector<OpSpec>>& programs,
                const std::vector<OpSpec>* replay, SharedOutcome& out, std::uint32_t seed) {
  auto observer = std::make_shared<CountingObserver>();
  e.set_observer(observer);
  Completer completer(2);
  std::vector<Var> cell_var(kMaxCells);
  std::vector<int> slot_cell(kVars);
  int cells = 0;
  for (int v = 0; v < kVars; ++v) {
    slot_cell[static_cast<std::size_t>(v)] = cells;
    cell_var[static_cast<std::size_t>(cells++)] = e.new_var();
  }
  out.value.assign(kMaxCells, 0);
  out.deleted.assign(kMaxCells, 0);
  out.ran.assign(kMaxCells + kOpsPerSeed, 0);
  // Stable storage: ops in flight refer to their spec until wait_all.
  auto specs = std::make_unique<std::vector<OpSpec>>();
  specs->reserve(out.ran.size());
  Model model;
  model.value.assign(kMaxCells, 0);
  model.failed.assign(kMaxCells, -1);
  std::vector<std::uint64_t> model_deleted(kMaxCells, 0);
  std::mutex push_mu;
  std::atomic<bool> mismatch{false};
  DrainOnExit drain{e};

  auto push_one = [&](const OpSpec& from_program, bool resolved) {
    std::lock_guard lk(push_mu);
    OpSpec op = from_program;
    op.index = static_cast<int>(specs->size());
    if (!resolved) {
      for (int& r : op.reads) r = slot_cell[static_cast<std::size_t>(r)];
      for (int& w : op.writes) w = slot_cell[static_cast<std::size_t>(w)];
    }
    specs->push_back(op);
    const OpSpec& spec = specs->back();
    if (spec.delete_var) {
      const int cell = spec.writes[0];
      std::uint64_t* slot = &out.deleted[static_cast<std::size_t>(cell)];
      const std::uint64_t* value = &out.value[static_cast<std::size_t>(cell)];
      e.delete_var(cell_var[static_cast<std::size_t>(cell)], [slot, value] { *slot = *value; });
      model.ran.push_back(1);
      model_deleted[static_cast<std::size_t>(cell)] = model.value[static_cast<std::size_t>(cell)];
      // The slot that named the deleted var gets a new one (in the replay, the log says
      // which cell the next ops use).
      for (int& c : slot_cell) {
        if (c == cell) c = cells;
      }
      cell_var[static_cast<std::size_t>(cells++)] = e.new_var();
      out.ran[static_cast<std::size_t>(spec.index)] = 1;
      return;
    }
    push_op(e, spec, cell_var, out.value, out.ran, completer);
    apply(spec, model);
    // A blocker while the other frontends wait to push, at the same ops in the replay.
    if (mix(seed, static_cast<std::uint64_t>(spec.index)) % 500 == 0) {
      const int cell = spec.writes[0];
      const int f = failure_of(e, cell_var[static_cast<std::size_t>(cell)]);
      if (f != model.failed[static_cast<std::size_t>(cell)] ||
          (f < 0 && out.value[static_cast<std::size_t>(cell)] !=
                        model.value[static_cast<std::size_t>(cell)])) {
        mismatch = true;
      }
    }
  };

  if (replay) {
    // The log's cells are made again in the same order, so its cell numbers hold here.
    for (const OpSpec& op : *replay) push_one(op, true);
  } else {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < programs.size(); ++t) {
      threads.emplace_back([&, t] {
        for (const OpSpec& op : programs[t]) push_one(op, false);
      });
    }
    for (auto& th : threads) th.join();
  }
  try {
    e.wait_all();
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(mismatch.load()) << "seed " << seed << ": a blocker saw a value the model has not";
  const std::size_t n = specs->size();
  out.ran.resize(n);
  const int bad = first_ran_mismatch(*specs, out.ran, model);
  EXPECT_LT(bad, 0) << "seed " << seed << " "
                    << (bad >= 0 ? describe((*specs)[static_cast<std::size_t>(bad)], out.ran) : "");
  out.failed.assign(static_cast<std::size_t>(cells), -1);
  out.value.resize(static_cast<std::size_t>(cells));
  out.deleted.resize(static_cast<std::size_t>(cells));
  for (int c = 0; c < cells; ++c) {
    const auto ci = static_cast<std::size_t>(c);
    const bool live = std::find(slot_cell.begin(), slot_cell.end(), c) != slot_cell.end();
    if (live) {
      out.failed[ci] = failure_of(e, cell_var[ci]);
      EXPECT_EQ(out.failed[ci], model.failed[ci]) << "seed " << seed << " cell " << c;
      if (out.failed[ci] < 0) {
        EXPECT_EQ(out.value[ci], model.value[ci]) << "seed " << seed << " cell " << c;
      }
    } else if (model.failed[ci] < 0) {
      EXPECT_EQ(out.deleted[ci], model_deleted[ci]) << "seed " << seed << " deleted cell " << c;
    }
  }
  e.set_observer(nullptr);
  out.pushes = observer->pushes.load();
  out.ends = observer->ends.load();
  EXPECT_EQ(out.ends, out.pushes) << "seed " << seed << ": every pushed op reports its end";
  EXPECT_LE(observer->starts.load(), out.pushes);
  out.log = std::move(*specs);
}

struct SharedConfig {
  int threads;
  int frontends;
  int gpu_percent;
  friend void PrintTo(const SharedConfig& c, std::ostream* os) {
    *os << c.threads << "w/" << c.frontends << "f/gpu" << c.gpu_percent;
  }
};

class SharedOracle : public testing::TestWithParam<SharedConfig> {};

TEST_P(SharedOracle, ThreadedEqualsNaiveWithFrontendsSharingVars) {
  const SharedConfig& c = GetParam();
  const int seeds = std::max(1, seed_count() / 2);
  for (int s = 0; s < seeds; ++s) {
    const auto seed = static_cast<std::uint32_t>(5000 + s);
    std::vector<std::vector<OpSpec>> programs;
    for (int t = 0; t < c.frontends; ++t) {
      programs.push_back(generate_shared(seed * 131u + static_cast<std::uint32_t>(t),
                                         kOpsPerSeed / c.frontends, c.gpu_percent));
    }
    const int gpus = c.gpu_percent > 0 ? 2 : 0;
    SharedOutcome threaded, naive;
    {
      auto e = Engine::create("threaded", {.cpu_threads = c.threads, .sim_gpus = gpus});
      run_shared(*e, programs, nullptr, threaded, seed);
    }
    if (HasFailure()) return;
    {
      auto e = Engine::create("naive", {.sim_gpus = gpus});
      run_shared(*e, {}, &threaded.log, naive, seed);
    }
    if (HasFailure()) return;
    ASSERT_EQ(threaded.failed, naive.failed) << "seed " << seed;
    for (std::size_t cell = 0; cell < threaded.failed.size(); ++cell) {
      if (threaded.failed[cell] < 0) {
        ASSERT_EQ(threaded.value[cell], naive.value[cell]) << "seed " << seed << " cell " << cell;
      }
    }
    ASSERT_EQ(threaded.deleted, naive.deleted) << "seed " << seed;
    EXPECT_EQ(threaded.pushes, naive.pushes) << "seed " << seed;
    EXPECT_EQ(threaded.ends, naive.ends) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, SharedOracle,
                         testing::Values(SharedConfig{1, 2, 0}, SharedConfig{2, 4, 0},
                                         SharedConfig{4, 3, 0}, SharedConfig{2, 4, 20},
                                         SharedConfig{3, 2, 20}),
                         [](const testing::TestParamInfo<SharedConfig>& p) {
                           return std::to_string(p.param.threads) + "w_" +
                                  std::to_string(p.param.frontends) + "f" +
                                  (p.param.gpu_percent > 0 ? "_gpu" : "");
                         });

}  // namespace
}  // namespace depengine::test
