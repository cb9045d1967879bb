// Engine::record / Engine::replay: a replay is the recorded pushes made again at that point.
// Replaying a random program N times (values, failures, async and simulated-GPU ops, other
// pushes and waits in between, back-pressure, an observer attached) must equal pushing it N
// times on the naive engine, whether the threaded engine replays it op by op or with its
// internal edges precomputed; record must refuse what a replay cannot repeat.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace depengine::test {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

constexpr int kVars = 24;

struct OpSpec {
  int index = 0;
  std::vector<int> reads, writes;  // may repeat, may overlap
  bool async = false;
  bool throws = false;
  int gpu = -1;
};

std::vector<OpSpec> random_program(std::uint32_t seed, int n, bool gpus) {
  std::mt19937 rng(seed);
  auto pick = [&](int hi) { return std::uniform_int_distribution<int>(0, hi - 1)(rng); };
  std::vector<OpSpec> ops(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    OpSpec& op = ops[static_cast<std::size_t>(i)];
    op.index = i;
    for (int r = pick(4); r > 0; --r) op.reads.push_back(pick(kVars));
    for (int w = 1 + pick(2); w > 0; --w) op.writes.push_back(pick(kVars));
    op.async = pick(4) == 0;
    op.throws = pick(12) == 0;
    if (gpus && pick(3) == 0) op.gpu = pick(2);
  }
  return ops;
}

// What an observer sees of a run, engine-independent: each reported push (name, and its
// accesses as var id, version, mode), and how many ops ended.
class PushLog final : public Observer {
 public:
  void on_push(const OpInfo& op) override {
    std::lock_guard lk(mu_);
    std::string line(op.name);
    for (const VarAccess& a : op.accesses) {
      line += " " + std::to_string(a.var) + ":" + std::to_string(a.version) + ":" +
              std::to_string(static_cast<int>(a.mode));
    }
    pushes_.push_back(std::move(line));
  }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {}
  void on_end(std::uint64_t, bool, bool) override { ends_.fetch_add(1); }
  // The pushes, with each var id replaced by its index in `vars`.
  std::vector<std::string> pushes(const std::vector<Var>& vars) const {
    std::map<std::string, std::string> index;
    for (std::size_t i = 0; i < vars.size(); ++i) {
      index[std::to_string(vars[i].id())] = "v" + std::to_string(i);
    }
    std::vector<std::string> out;
    std::lock_guard lk(mu_);
    for (const std::string& line : pushes_) {
      std::string mapped;
      std::size_t pos = 0;
      while (pos < line.size()) {
        std::size_t end = line.find(' ', pos);
        if (end == std::string::npos) end = line.size();
        std::string word = line.substr(pos, end - pos);
        if (const std::size_t colon = word.find(':'); colon != std::string::npos) {
          word = index.at(word.substr(0, colon)) + word.substr(colon);
        }
        mapped += word + " ";
        pos = end + 1;
      }
      out.push_back(mapped);
    }
    return out;
  }
  std::size_t push_count() const {
    std::lock_guard lk(mu_);
    return pushes_.size();
  }
  int ends() const { return ends_.load(); }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> pushes_;
  std::atomic<int> ends_{0};
};

// The state one run works on.
struct Program {
  std::vector<OpSpec> ops;
  std::vector<std::uint64_t> value = std::vector<std::uint64_t>(kVars, 1);
  std::vector<Var> vars;
};

void push_op(Engine& e, Program& p, const OpSpec& op) {
  std::vector<Var> reads, writes;
  for (int r : op.reads) reads.push_back(p.vars[static_cast<std::size_t>(r)]);
  for (int w : op.writes) writes.push_back(p.vars[static_cast<std::size_t>(w)]);
  auto body = [&value = p.value, &op] {
    if (op.throws) throw std::runtime_error("op " + std::to_string(op.index));
    std::uint64_t h = static_cast<std::uint64_t>(op.index);
    for (int r : op.reads) h = mix(h, value[static_cast<std::size_t>(r)]);
    for (int w : op.writes) value[static_cast<std::size_t>(w)] = mix(h, static_cast<std::uint64_t>(w));
  };
  if (op.gpu >= 0) {
    e.push([body](const RunContext& ctx) { ctx.stream->enqueue_host(body); }, reads, writes,
           {.device = Device::gpu(op.gpu), .name = "gpu" + std::to_string(op.index)});
  } else if (op.async) {
    e.push_async([body](Completion done) {
      try {
        body();
        done();
      } catch (...) {
        done(std::current_exception());
      }
    }, reads, writes, {.name = "async" + std::to_string(op.index)});
  } else {
    e.push(body, reads, writes, {.name = "op" + std::to_string(op.index)});
  }
}

std::string failure_of(Engine& e, const Var& v) {
  try {
    e.wait_to_read(v);
    return "";
  } catch (const std::runtime_error& err) {
    return err.what();
  }
}

// What a run leaves: each var's value and failure, and what the waits between steps saw.
struct Outcome {
  std::vector<std::uint64_t> value;
  std::vector<std::string> failure;
  std::vector<std::string> seen;
  bool operator==(const Outcome&) const = default;
};

// Runs the program `steps` times on `e`: pushed each time, or recorded at the first step
// and replayed after. Between steps another frontend push writes one var (clearing its
// failure) and reads another, and every other step waits on a var.
Outcome run(Engine& e, Program& p, int steps, bool replay) {
  for (int i = 0; i < kVars; ++i) p.vars.push_back(e.new_var());
  Outcome out;
  Segment seg;
  auto step = [&] {
    for (const OpSpec& op : p.ops) push_op(e, p, op);
  };
  for (int s = 0; s < steps; ++s) {
    if (!replay) {
      step();
    } else if (s == 0) {
      seg = e.record(step);
      EXPECT_EQ(seg.size(), p.ops.size());
    } else {
      e.replay(seg);
    }
    const auto w = static_cast<std::size_t>((s * 7) % kVars);
    const auto r = static_cast<std::size_t>((s * 5 + 3) % kVars);
    e.push([&value = p.value, w, r, s] { value[w] = mix(value[r], static_cast<std::uint64_t>(s)); },
           {p.vars[r]}, {p.vars[w]});
    if (s % 2 == 1) out.seen.push_back(failure_of(e, p.vars[static_cast<std::size_t>(s % kVars)]));
  }
  try {
    e.wait_all();
    out.seen.push_back("");
  } catch (const std::runtime_error& err) {
    out.seen.push_back(err.what());
  }
  for (const Var& v : p.vars) out.failure.push_back(failure_of(e, v));
  out.value = p.value;
  return out;
}

struct ReplayParam {
  EngineParam engine;
  bool gpus;
  long max_inflight = 0;
  bool observed = false;
  std::string name() const {
    return engine.kind + "_" + std::to_string(engine.threads) + (gpus ? "_simgpu" : "") +
           (max_inflight ? "_bounded" + std::to_string(max_inflight) : "") +
           (observed ? "_observed" : "");
  }
  friend void PrintTo(const ReplayParam& p, std::ostream* os) { *os << p.name(); }
};

class ReplayEqualsPush : public testing::TestWithParam<ReplayParam> {};

TEST_P(ReplayEqualsPush, RandomProgramsValuesAndFailures) {
  const ReplayParam& param = GetParam();
  constexpr int kSteps = 6;
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const int sim = param.gpus ? 2 : 0;
    const EngineOptions options{.max_inflight = param.max_inflight, .sim_gpus = sim};
    Program eager;
    eager.ops = random_program(seed, 60, param.gpus);
    auto expected_log = std::make_shared<PushLog>();
    Outcome expected;
    {
      auto oracle = Engine::create("naive", options);
      if (param.observed) oracle->set_observer(expected_log);
      expected = run(*oracle, eager, kSteps, false);
    }
    Program replayed;
    replayed.ops = random_program(seed, 60, param.gpus);
    auto got_log = std::make_shared<PushLog>();
    Outcome got;
    {
      auto e = make_engine(param.engine, options);
      if (param.observed) e->set_observer(got_log);
      got = run(*e, replayed, kSteps, true);
    }
    ASSERT_EQ(got.failure, expected.failure);
    ASSERT_EQ(got.seen, expected.seen);
    // A failed var's value is not compared: a simulated-GPU op that reads device work which
    // fails later may have been launched behind it and run, as on a GPU (oracle_test.cc).
    for (std::size_t v = 0; v < kVars; ++v) {
      if (expected.failure[v].empty()) {
        EXPECT_EQ(got.value[v], expected.value[v]) << "var " << v;
      }
    }
    if (param.observed) {
      // The same ops, numbered and versioned alike: a graph recorder draws the same edges.
      ASSERT_EQ(got_log->pushes(replayed.vars), expected_log->pushes(eager.vars));
      EXPECT_EQ(static_cast<std::size_t>(got_log->ends()), got_log->push_count());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Engines, ReplayEqualsPush,
    testing::Values(ReplayParam{{"naive", 1}, false}, ReplayParam{{"threaded", 1}, false},
                    ReplayParam{{"threaded", 2}, false}, ReplayParam{{"threaded", 4}, false},
                    ReplayParam{{"naive", 1}, true}, ReplayParam{{"threaded", 2}, true},
                    ReplayParam{{"threaded", 4}, true},
                    ReplayParam{{"threaded", 2}, false, 0, true},
                    ReplayParam{{"threaded", 4}, true, 0, true},
                    ReplayParam{{"threaded", 2}, false, 7},
                    ReplayParam{{"threaded", 4}, false, 40, true}),
    [](const testing::TestParamInfo<ReplayParam>& p) { return p.param.name(); });

class Segments : public testing::TestWithParam<EngineParam> {};

TEST_P(Segments, BodyRunsOncePerReplayAndRecordRunsItOnce) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  std::atomic<int> runs{0};
  std::uint64_t x = 0;
  Segment seg = e->record([&] {
    e->push([&] { runs.fetch_add(1); }, {}, {}, {.name = "count"});
    e->push([&] { x = x * 3 + 1; }, {v}, {v}, {.name = "step"});
  });
  EXPECT_TRUE(seg);
  EXPECT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg.names(), (std::vector<std::string>{"count", "step"}));
  EXPECT_EQ(seg.input_count(), 1u);
  EXPECT_EQ(seg.output_count(), 1u);
  for (int i = 0; i < 4; ++i) e->replay(seg);
  e->wait_all();
  EXPECT_EQ(runs.load(), 5);
  EXPECT_EQ(x, 121u);  // x -> 3x + 1, five times from 0
}

TEST_P(Segments, EmptyRegionGivesAnEmptySegment) {
  auto e = make_engine(GetParam());
  Segment seg = e->record([] {});
  EXPECT_TRUE(seg);
  EXPECT_EQ(seg.size(), 0u);
  e->replay(seg);
  e->wait_all();
}

TEST_P(Segments, PushesMadeByRecordedOpsAreMadeAgainByTheirReplays) {
  auto e = make_engine(GetParam());
  std::atomic<int> children{0};
  Segment seg = e->record([&] {
    e->push([&] { e->push([&] { children.fetch_add(1); }, {}, {}); }, {}, {});
  });
  EXPECT_EQ(seg.size(), 1u);
  e->replay(seg);
  e->replay(seg);
  e->wait_all();  // the parents; their children were pushed before the second wait_all
  e->wait_all();
  EXPECT_EQ(children.load(), 3);
}

TEST_P(Segments, PushesOfOtherThreadsAreNotRecorded) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  std::atomic<int> outside{0};
  Segment seg = e->record([&] {
    std::thread([&] { e->push([&] { outside.fetch_add(1); }, {}, {v}); }).join();
    e->push([] {}, {v}, {});
  });
  EXPECT_EQ(seg.size(), 1u);
  e->replay(seg);
  e->wait_all();
  EXPECT_EQ(outside.load(), 1);
}

TEST_P(Segments, ReplayedFailureReachesWaitsAndIsClearedByALaterWrite) {
  auto e = make_engine(GetParam());
  Var a = e->new_var();
  Var b = e->new_var();
  bool fail = true;
  Segment seg = e->record([&] {
    e->push([&] { if (fail) throw std::runtime_error("bad step"); }, {}, {a});
    e->push([] {}, {a}, {b});
  });
  EXPECT_THROW(e->wait_to_read(b), std::runtime_error);
  EXPECT_THROW(e->wait_all(), std::runtime_error);
  e->replay(seg);
  EXPECT_THROW(e->wait_to_read(b), std::runtime_error);
  EXPECT_THROW(e->wait_all(), std::runtime_error);
  fail = false;  // read by the body when the replayed op runs, after the waits above
  e->replay(seg);
  e->wait_to_read(b);
  e->wait_all();
}

TEST_P(Segments, ReplayHonoursBackPressure) {
  auto e = make_engine(GetParam(), {.max_inflight = 3});
  std::vector<Var> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(e->new_var());
  Segment seg = e->record([&] {
    for (const Var& v : vars) e->push([] {}, {}, {v});
  });
  for (int i = 0; i < 10; ++i) e->replay(seg);
  e->wait_all();
  EXPECT_LE(e->peak_pending(), 3u);
}

TEST_P(Segments, ReplayInsideARecordKeepsItsOps) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  int n = 0;
  Segment inner = e->record([&] { e->push([&] { ++n; }, {}, {v}); });
  Segment outer = e->record([&] {
    e->replay(inner);
    e->push([&] { n *= 10; }, {}, {v});
  });
  EXPECT_EQ(outer.size(), 2u);
  e->replay(outer);
  e->wait_all();
  EXPECT_EQ(n, 210);  // record 1, record 2 then 20, replay 21 then 210
}

TEST_P(Segments, RecordRefusesWaitsAndDeletesInsideTheRegion) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  auto expect_refused = [&](auto&& body, const std::string& what) {
    try {
      (void)e->record(body);
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("record"), std::string::npos) << err.what();
    }
  };
  expect_refused([&] { e->wait_to_read(v); }, "wait_to_read");
  expect_refused([&] { e->wait_all(); }, "wait_all");
  expect_refused([&] { e->delete_var(v); }, "delete_var");
  // Refused even when the region catches the error: the segment would not repeat the call.
  expect_refused([&] {
    e->push([] {}, {}, {v});
    try {
      e->wait_all();
    } catch (const Error&) {
    }
  }, "wait_all");
  expect_refused([&] { (void)e->record([] {}); }, "nest");
  // The refused delete did nothing: v is still usable, and waits work again.
  e->push([] {}, {v}, {v});
  e->wait_to_read(v);
  e->wait_all();
}

TEST_P(Segments, MisuseIsAnError) {
  auto e = make_engine(GetParam());
  auto other = make_engine(GetParam());
  EXPECT_THROW(e->replay(Segment{}), Error);
  Segment seg = other->record([&] { other->push([] {}, {}, {}); });
  EXPECT_THROW(e->replay(seg), Error);
  // record from inside a running op.
  std::atomic<bool> refused{false};
  e->push([&] {
    try {
      (void)e->record([] {});
    } catch (const Error&) {
      refused = true;
    }
  }, {}, {});
  e->wait_all();
  EXPECT_TRUE(refused.load());
  // A var deleted after recording: the replay's push of its op throws, as a push would.
  Var v = e->new_var();
  Segment uses_v = e->record([&] { e->push([] {}, {}, {v}); });
  e->delete_var(v);
  EXPECT_THROW(e->replay(uses_v), Error);
  e->wait_all();
}

TEST_P(Segments, ExceptionFromTheRegionPropagatesAndItsPushesStand) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  int x = 0;
  EXPECT_THROW((void)e->record([&] {
    e->push([&] { x = 7; }, {}, {v});
    throw std::logic_error("user");
  }), std::logic_error);
  e->wait_to_read(v);
  EXPECT_EQ(x, 7);
  // The thread records again afterwards.
  Segment seg = e->record([&] { e->push([&] { ++x; }, {}, {v}); });
  e->replay(seg);
  e->wait_all();
  EXPECT_EQ(x, 9);
}

TEST_P(Segments, OneSegmentReplayedFromSeveralThreads) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  std::atomic<int> runs{0};
  long total = 0;  // written only by the ops that write v, which the engine serializes
  Segment seg = e->record([&] {
    e->push([&] { runs.fetch_add(1); }, {}, {});
    e->push([&] { ++total; }, {}, {v});
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) e->replay(seg);
    });
  }
  for (std::thread& t : threads) t.join();
  e->wait_all();
  EXPECT_EQ(runs.load(), 151);
  EXPECT_EQ(total, 151);
}

// A segment whose ops all sit on one GPU stream replays as one op launching their work in
// stream order (a CUDA graph on a GPU): the same values as pushing them, with CPU pushes
// interleaved.
TEST_P(Segments, OneStreamSegmentOnTheSimulatedGpuEqualsPushes) {
  std::vector<std::uint64_t> results[2];
  for (int replay = 0; replay < 2; ++replay) {
    auto e = make_engine(GetParam(), {.sim_gpus = 1});
    Var a = e->new_var(), b = e->new_var(), c = e->new_var();
    std::uint64_t va = 1, vb = 2, vc = 3;
    const PushOptions gpu{.device = Device::gpu(0)};
    auto step = [&] {
      e->push([&](const RunContext& ctx) { ctx.stream->enqueue_host([&] { vb = mix(va, vb); }); },
              {a}, {b}, gpu);
      e->push([&](const RunContext& ctx) { ctx.stream->enqueue_host([&] { vc = mix(vb, vc); }); },
              {b}, {c}, gpu);
    };
    Segment seg;
    for (int i = 0; i < 6; ++i) {
      if (!replay) {
        step();
      } else if (i == 0) {
        seg = e->record(step);
        EXPECT_TRUE(seg.one_stream());
      } else {
        e->replay(seg);
      }
      e->push([&, i] { va = mix(vc, static_cast<std::uint64_t>(i)); }, {c}, {a});
    }
    e->wait_all();
    results[replay] = {va, vb, vc};
  }
  EXPECT_EQ(results[1], results[0]);
}

// Such a segment fails as a unit, as a graph launch does; a later good replay clears it.
TEST_P(Segments, OneStreamSegmentFailsAsAUnit) {
  auto e = make_engine(GetParam(), {.sim_gpus = 1});
  Var a = e->new_var(), b = e->new_var();
  std::atomic<bool> fail{false};
  const PushOptions gpu{.device = Device::gpu(0)};
  Segment seg = e->record([&] {
    e->push([&](const RunContext& ctx) {
      ctx.stream->enqueue_host([&] { if (fail) throw std::runtime_error("device fault"); });
    }, {}, {a}, gpu);
    e->push([](const RunContext& ctx) { ctx.stream->enqueue_host([] {}); }, {}, {b}, gpu);
  });
  e->wait_all();
  fail = true;
  e->replay(seg);
  EXPECT_EQ(failure_of(*e, a), "device fault");
  EXPECT_EQ(failure_of(*e, b), "device fault");
  EXPECT_THROW(e->wait_all(), std::runtime_error);
  fail = false;
  e->replay(seg);
  EXPECT_EQ(failure_of(*e, a), "");
  EXPECT_EQ(failure_of(*e, b), "");
  e->wait_all();
}

TEST_P(Segments, MixedOrAsyncSegmentsAreNotOneStream) {
  auto e = make_engine(GetParam(), {.sim_gpus = 2});
  Var v = e->new_var();
  auto gpu_op = [&](int g, Lane lane) {
    e->push([](const RunContext& ctx) { ctx.stream->enqueue_host([] {}); }, {}, {v},
            {.device = Device::gpu(g), .lane = lane});
  };
  EXPECT_FALSE(e->record([&] { gpu_op(0, Lane::compute); e->push([] {}, {}, {v}); }).one_stream());
  EXPECT_FALSE(e->record([&] { gpu_op(0, Lane::compute); gpu_op(1, Lane::compute); }).one_stream());
  EXPECT_FALSE(e->record([&] { gpu_op(0, Lane::compute); gpu_op(0, Lane::copy_to_device); }).one_stream());
  EXPECT_FALSE(e->record([&] {
    e->push_async([](const RunContext&, Completion done) { done(); }, {}, {v}, {.device = Device::gpu(0)});
  }).one_stream());
  EXPECT_FALSE(e->record([] {}).one_stream());
  EXPECT_TRUE(e->record([&] { gpu_op(1, Lane::priority); gpu_op(1, Lane::priority); }).one_stream());
  e->wait_all();
}

// Which segments have their internal edges precomputed: CPU ops without commute or
// reduce accesses, synchronous or not.
TEST_P(Segments, PrecomputedSegments) {
  auto e = make_engine(GetParam(), {.sim_gpus = 1});
  Var v = e->new_var();
  Var w = e->new_var();
  EXPECT_TRUE(e->record([&] {
    e->push([] {}, {v}, {w});
    e->push_async([](Completion done) { done(); }, {w}, {v});
  }).precomputed());
  EXPECT_TRUE(e->record([] {}).precomputed());
  EXPECT_FALSE(e->record([&] { e->push([] {}, {v}, {commute(w)}); }).precomputed());
  EXPECT_FALSE(e->record([&] {
    e->push([](const RunContext& ctx) { ctx.stream->enqueue_host([] {}); }, {}, {v},
            {.device = Device::gpu(0)});
    e->push([] {}, {v}, {w});
  }).precomputed());
  e->wait_all();
}

// A chain, a fan-out and a fan-in over one var, replayed with pushes around it: every op
// sees the value the push order gives it.
TEST_P(Segments, ReplayOrdersReadsAndWritesOfOneVarAsPushes) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  Var sum = e->new_var();
  long value = 0;
  std::vector<long> seen(4, -1);
  long total = 0;
  Segment seg = e->record([&] {
    e->push([&] { value = value * 10 + 1; }, {}, {v});
    for (std::size_t i = 0; i < seen.size(); ++i) e->push([&, i] { seen[i] = value; }, {v}, {});
    e->push([&] { value = value * 10 + 2; }, {v}, {v});
    e->push([&] { total += value; }, {v}, {sum});
  });
  ASSERT_TRUE(seg.precomputed());
  for (int r = 0; r < 3; ++r) {
    e->push([&] { value = 0; }, {}, {v});
    e->replay(seg);
    e->push([&] { value += 100; }, {v}, {v});
    e->wait_to_read(v);
    EXPECT_EQ(value, 112);
    EXPECT_EQ(seen, std::vector<long>(4, 1));
  }
  e->wait_all();
  EXPECT_EQ(total, 4 * 12);
}

// delete_var of a segment var after replays is a write behind them: storage goes once they
// have run.
TEST_P(Segments, DeleteVarAfterReplaysWaitsForThem) {
  auto e = make_engine(GetParam());
  Var v = e->new_var();
  Var other = e->new_var();
  int writes = 0;
  int at_delete = -1;
  Segment seg = e->record([&] {
    for (int i = 0; i < 20; ++i) e->push([&] { ++writes; }, {other}, {v});
    e->push([] {}, {v}, {other});
  });
  for (int r = 0; r < 3; ++r) e->replay(seg);
  e->delete_var(v, [&] { at_delete = writes; });
  e->wait_all();
  EXPECT_EQ(at_delete, 80);
  // The segment still refers to the deleted var: a replay is refused as its pushes would be.
  EXPECT_THROW(e->replay(seg), Error);
  e->wait_all();
}

// An op's replay is not held by back-pressure (as an op's pushes are not), so a bounded
// engine takes the precomputed path there.
TEST_P(Segments, ReplayFromInsideAnOpOfABoundedEngine) {
  auto e = make_engine(GetParam(), {.max_inflight = 2});
  Var v = e->new_var();
  long count = 0;
  Segment seg = e->record([&] {
    for (int i = 0; i < 10; ++i) e->push([&] { ++count; }, {}, {v});
  });
  e->push([&] {
    for (int r = 0; r < 3; ++r) e->replay(seg);
  }, {}, {});
  e->wait_all();  // the op, which has replayed by then
  e->wait_all();  // its replays
  EXPECT_EQ(count, 40);
}

// A failure inside a replayed segment reaches the ops behind it in the segment and after
// it, and the next replay's successful write clears it.
TEST_P(Segments, FailureInsideAReplayReachesItsSuccessors) {
  auto e = make_engine(GetParam());
  Var a = e->new_var();
  Var b = e->new_var();
  std::atomic<bool> fail{false};
  std::atomic<int> ran{0};
  Segment seg = e->record([&] {
    e->push([&] {
      if (fail.load()) throw std::runtime_error("boom");
    }, {}, {a});
    e->push([&] { ran.fetch_add(1); }, {a}, {b});
  });
  e->wait_all();
  fail = true;
  e->replay(seg);
  EXPECT_THROW(e->wait_to_read(b), std::runtime_error);
  EXPECT_THROW(e->wait_all(), std::runtime_error);
  EXPECT_EQ(ran.load(), 1);
  fail = false;
  e->replay(seg);
  e->wait_to_read(b);
  EXPECT_EQ(ran.load(), 2);
  e->wait_all();
}

// Replays on one thread and pushes on another, all read-writes of one var: each is applied
// once, whatever falls between them.
TEST_P(Segments, ReplaysAndConcurrentPushesOfAnotherThread) {
  auto e = make_engine(GetParam());
  Var x = e->new_var();
  Var y = e->new_var();
  long count = 0;  // written only by ops that write x
  Segment seg = e->record([&] {
    e->push([&] { ++count; }, {x}, {x});
    e->push([] {}, {x}, {y});
    e->push([&] { ++count; }, {y}, {x});
  });
  ASSERT_TRUE(seg.precomputed());
  std::thread pusher([&] {
    for (int i = 0; i < 200; ++i) e->push([&] { count += 1000; }, {}, {x});
  });
  for (int r = 0; r < 100; ++r) e->replay(seg);
  pusher.join();
  e->wait_all();
  EXPECT_EQ(count, 2 * 101 + 200 * 1000);
}

// A precomputed CPU segment between simulated-GPU ops on the same var: the device work
// before it is complete when it runs, and the device work after it sees its writes.
TEST_P(Segments, PrecomputedReplayBetweenGpuOps) {
  auto e = make_engine(GetParam(), {.sim_gpus = 1});
  Var v = e->new_var();
  long value = 0;  // touched only by ops that write v
  auto gpu = [&](long digit) {
    e->push([&value, digit](const RunContext& ctx) {
      ctx.stream->enqueue_host([&value, digit] { value = value * 10 + digit; });
    }, {v}, {v}, {.device = Device::gpu(0)});
  };
  Segment seg = e->record([&] {
    e->push([&] { value = value * 10 + 2; }, {v}, {v});
    e->push([] {}, {v}, {});
  });
  ASSERT_TRUE(seg.precomputed());
  e->wait_all();
  for (int r = 0; r < 5; ++r) {
    value = 0;
    gpu(1);
    e->replay(seg);
    gpu(3);
    e->wait_to_read(v);
    EXPECT_EQ(value, 123);
  }
  e->wait_all();
}

INSTANTIATE_TEST_SUITE_P(Engines, Segments, kAllEngines, param_name);

}  // namespace
}  // namespace depengine::test
