// Error semantics of the stream/event layer (device/device_backend.h) on the host-simulated
// device, and what the engine makes of them:
//
//   - an event carries the error of each record separately: a wait reads the error of the
//     record it was issued against, never that of a later record of the same (pooled) event;
//   - only a data wait (the waiting work reads what the recorded work wrote) takes the
//     error on; an ordering wait (write-after-write, write-after-read) only orders, so an op
//     that overwrites a failed op's output, or a var the failed op read, still runs;
//   - a lane outside the Lane enum is an error naming it.
//
// The engine cases compare the threaded engine with the naive one (the oracle).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device/device_backend.h"
#include "test_util.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;
using detail::WaitKind;

constexpr auto kPatience = 10s;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kSkipRounds = 300;
#else
constexpr int kSkipRounds = 1000;
#endif

// The message of the error `s` reports for its work so far ("" when none).
std::string notified_error(detail::DeviceStream& s) {
  std::promise<std::exception_ptr> p;
  s.notify_when_done([&](std::exception_ptr e) { p.set_value(std::move(e)); });
  std::future<std::exception_ptr> f = p.get_future();
  if (f.wait_for(kPatience) != std::future_status::ready) return "<no notification>";
  std::exception_ptr e = f.get();
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& err) {
    return err.what();
  }
}

class SimEventErrors : public testing::Test {
 protected:
  std::unique_ptr<detail::DeviceBackend> backend_ = detail::make_sim_backend(1);
  std::unique_ptr<detail::DeviceStream> a_ = backend_->make_stream(0, Lane::compute);
  std::unique_ptr<detail::DeviceStream> b_ = backend_->make_stream(0, Lane::copy_from_device);
  std::unique_ptr<detail::DeviceStream> c_ = backend_->make_stream(0, Lane::copy_to_device);
  std::unique_ptr<detail::StreamEvent> event_ = backend_->make_event(0);
};

// A wait issued against a failed record still sees that failure when a clean record of the
// same event has been reached before the waiting stream gets to the wait.
TEST_F(SimEventErrors, LaterCleanRecordDoesNotHideTheErrorOfTheAwaitedOne) {
  Gate gate;
  b_->enqueue_host([&] { gate.pass(); });  // the wait below runs only after both records
  a_->enqueue_host([] { throw std::runtime_error("first record"); });
  a_->record(*event_);
  b_->wait(*event_, WaitKind::data);
  std::atomic<bool> b_ran{false};
  b_->enqueue_host([&] { b_ran = true; });
  EXPECT_EQ(notified_error(*a_), "first record");
  c_->record(*event_);  // the event reused, as the pool does, by clean work elsewhere
  event_->synchronize();
  gate.open();
  EXPECT_EQ(notified_error(*b_), "first record");
  EXPECT_FALSE(b_ran.load()) << "work behind a failed data wait ran";
}

// The converse: a wait issued against a clean record does not pick up the failure of a later
// record of the same event.
TEST_F(SimEventErrors, LaterFailedRecordDoesNotLeakIntoAnEarlierWait) {
  Gate gate;
  b_->enqueue_host([&] { gate.pass(); });
  a_->record(*event_);
  b_->wait(*event_, WaitKind::data);
  std::atomic<bool> b_ran{false};
  b_->enqueue_host([&] { b_ran = true; });
  c_->enqueue_host([] { throw std::runtime_error("later record"); });
  c_->record(*event_);
  event_->synchronize();
  gate.open();
  EXPECT_EQ(notified_error(*b_), "");
  EXPECT_TRUE(b_ran.load());
  EXPECT_EQ(notified_error(*c_), "later record");
  EXPECT_EQ(notified_error(*a_), "");
}

// Many records of one event, alternately failed and clean, each awaited by a stream that is
// held back until all of them have been reached: every wait sees its own record's outcome.
TEST_F(SimEventErrors, EveryRecordKeepsItsOwnOutcome) {
  constexpr int kRecords = 16;
  Gate gate;
  b_->enqueue_host([&] { gate.pass(); });
  std::vector<std::string> seen(kRecords);
  for (int i = 0; i < kRecords; ++i) {
    if (i % 2 == 1) a_->enqueue_host([i] { throw std::runtime_error(std::to_string(i)); });
    a_->record(*event_);
    b_->wait(*event_, WaitKind::data);
    b_->enqueue_host([] {});
    b_->notify_when_done([&seen, i](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& err) {
        seen[static_cast<std::size_t>(i)] = err.what();
      }
    });
    a_->notify_when_done([](std::exception_ptr) {});
  }
  event_->synchronize();
  gate.open();
  b_->synchronize();
  for (int i = 0; i < kRecords; ++i) {
    EXPECT_EQ(seen[static_cast<std::size_t>(i)], i % 2 == 1 ? std::to_string(i) : "") << i;
  }
}

// An ordering wait waits for the recorded work but never takes its error; a data wait does.
TEST_F(SimEventErrors, OnlyADataWaitTakesTheError) {
  Gate gate;
  std::atomic<bool> failed_ran{false};
  a_->enqueue_host([&] {
    gate.pass();
    failed_ran = true;
    throw std::runtime_error("producer");
  });
  a_->record(*event_);
  std::atomic<bool> ordered_ran{false}, ordered_after{false}, data_ran{false};
  b_->wait(*event_, WaitKind::order);
  b_->enqueue_host([&] {
    ordered_after = failed_ran.load();
    ordered_ran = true;
  });
  c_->wait(*event_, WaitKind::data);
  c_->enqueue_host([&] { data_ran = true; });
  gate.open();
  EXPECT_EQ(notified_error(*b_), "");
  EXPECT_TRUE(ordered_ran.load()) << "an ordering wait skipped the work behind it";
  EXPECT_TRUE(ordered_after.load()) << "an ordering wait did not wait";
  EXPECT_EQ(notified_error(*c_), "producer");
  EXPECT_FALSE(data_ran.load());
  EXPECT_EQ(notified_error(*a_), "producer");
}

TEST(SimLanes, LaneOutsideTheEnumIsAnErrorNamingIt) {
  auto backend = detail::make_sim_backend(1);
  for (int lane : {kLaneCount, 17, 255}) {
    expect_error([&] { backend->make_stream(0, static_cast<Lane>(lane)); },
                 "lane " + std::to_string(lane));
  }
  EXPECT_NO_THROW(backend->make_stream(0, Lane::priority));
}

// Checked before the device, so that it holds whether or not CUDA was built or a GPU is
// present.
TEST(CudaLanes, LaneOutsideTheEnumIsAnErrorNamingIt) {
  auto backend = detail::make_cuda_backend();
  for (int lane : {kLaneCount, 17, 255}) {
    expect_error([&] { backend->make_stream(0, static_cast<Lane>(lane)); },
                 "lane " + std::to_string(lane));
  }
}

// --- The engines ---

class GpuFailures : public testing::TestWithParam<EngineParam> {
 protected:
  std::unique_ptr<Engine> e_ = make_engine(GetParam(), {.sim_gpus = 2});
};

PushOptions on(Device d, Lane lane = Lane::compute) {
  return PushOptions{.device = d, .lane = lane, .priority = 0, .name = "gpu op"};
}

// The message wait_to_read(v) rethrows ("" when none).
std::string failure_of(Engine& e, const Var& v) {
  try {
    e.wait_to_read(v);
    return "";
  } catch (const std::runtime_error& err) {
    return err.what();
  }
}

std::string wait_all_failure(Engine& e) {
  try {
    e.wait_all();
    return "";
  } catch (const std::runtime_error& err) {
    return err.what();
  }
}

// The failing op A: reads `reads`, writes `writes` on gpu(0)'s compute stream, and its
// stream work throws "A". On the threaded engine the work is held until `release` so that
// the successors are launched, and wait on A's event, while it is in flight; the naive
// engine runs each op to completion at its push, so there A fails at once.
class FailingOp {
 public:
  FailingOp(Engine& e, VarList reads, VarList writes) : naive_(e.kind() == "naive") {
    e.push([this](const RunContext& ctx) {
      ctx.stream->enqueue_host([this] {
        if (!naive_) gate_.pass();
        throw std::runtime_error("A");
      });
    }, reads, writes, on(Device::gpu(0)));
  }
  // Counts a successor's launch.
  void launched() { launched_.fetch_add(1); }
  // Lets A's work fail once `n` successors have been launched (threaded engine).
  void release(int n) {
    if (!naive_) {
      const auto deadline = std::chrono::steady_clock::now() + kPatience;
      while (launched_.load() < n && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(200us);
      }
      EXPECT_EQ(launched_.load(), n) << "successors were not launched while A was in flight";
    }
    gate_.open();
  }

 private:
  const bool naive_;
  Gate gate_;
  std::atomic<int> launched_{0};
};

// Write-after-write: B only overwrites A's output, on another stream or GPU. B runs, the var
// holds B's value, and wait_all reports A's failure alone.
TEST_P(GpuFailures, OverwritingAFailedOutputOnAnotherStreamRuns) {
  for (Device d : {Device::gpu(0), Device::gpu(1)}) {
    SCOPED_TRACE(d.str());
    Var x = e_->new_var(), done = e_->new_var();
    FailingOp a(*e_, {}, {x});
    std::atomic<int> xv{0};
    e_->push([&](const RunContext& ctx) {
      a.launched();
      ctx.stream->enqueue_host([&] { xv = 7; });
    }, {}, {x}, on(d, Lane::copy_to_device));
    int seen = 0;
    e_->push([&] { seen = xv.load(); }, {x}, {done});  // a CPU reader of B's value
    a.release(1);
    EXPECT_EQ(failure_of(*e_, x), "");
    EXPECT_EQ(xv.load(), 7) << "the overwrite did not run";
    EXPECT_EQ(failure_of(*e_, done), "");
    EXPECT_EQ(seen, 7);
    EXPECT_EQ(wait_all_failure(*e_), "A");
    EXPECT_EQ(wait_all_failure(*e_), "");
  }
}

// Write-after-read: B overwrites a var that A read. B runs and that var is not failed; A's
// own output is.
TEST_P(GpuFailures, OverwritingAVarAFailedOpReadRuns) {
  Var r = e_->new_var(), y = e_->new_var();
  FailingOp a(*e_, {r}, {y});
  std::atomic<bool> b_ran{false};
  e_->push([&](const RunContext& ctx) {
    a.launched();
    ctx.stream->enqueue_host([&] { b_ran = true; });
  }, {}, {r}, on(Device::gpu(1)));
  a.release(1);
  EXPECT_EQ(failure_of(*e_, r), "");
  EXPECT_TRUE(b_ran.load());
  EXPECT_EQ(failure_of(*e_, y), "A");
  EXPECT_EQ(wait_all_failure(*e_), "A");
  EXPECT_EQ(wait_all_failure(*e_), "");
}

// An op that both reads an output of A and overwrites another waits on A's event twice, once
// for data and once for order: the data wait wins, so the op is skipped with A's failure.
// B2 then reads B1's output and overwrites a var B1 read: the same again on B1's event.
TEST_P(GpuFailures, ReadingAndOverwritingOneOpsOutputsIsADataWait) {
  Var x = e_->new_var(), y = e_->new_var(), z = e_->new_var();
  FailingOp a(*e_, {}, {x, y});
  std::atomic<bool> b_ran{false};
  e_->push([&](const RunContext& ctx) {
    a.launched();
    ctx.stream->enqueue_host([&] { b_ran = true; });
  }, {x}, {y}, on(Device::gpu(0), Lane::copy_from_device));
  e_->push([&](const RunContext& ctx) {
    a.launched();
    ctx.stream->enqueue_host([&] { b_ran = true; });
  }, {y}, {x, z}, on(Device::gpu(1)));
  a.release(2);
  EXPECT_EQ(failure_of(*e_, y), "A");
  EXPECT_EQ(failure_of(*e_, x), "A");
  EXPECT_EQ(failure_of(*e_, z), "A");
  EXPECT_FALSE(b_ran.load()) << "work that reads a failed output ran";
  EXPECT_EQ(wait_all_failure(*e_), "A");
}

// A failure still flows along data, to readers on other streams and GPUs and to the CPU,
// while an overwrite of A's other output runs.
TEST_P(GpuFailures, DataFlowStillCarriesTheFailure) {
  Var x = e_->new_var(), y = e_->new_var(), w = e_->new_var(), h = e_->new_var();
  FailingOp a(*e_, {}, {x, w});
  std::atomic<bool> reader_ran{false}, writer_ran{false};
  e_->push([&](const RunContext& ctx) {
    a.launched();
    ctx.stream->enqueue_host([&] { reader_ran = true; });
  }, {x}, {y}, on(Device::gpu(1), Lane::copy_from_device));
  e_->push([&](const RunContext& ctx) {
    a.launched();
    ctx.stream->enqueue_host([&] { writer_ran = true; });
  }, {}, {w}, on(Device::gpu(1), Lane::copy_to_device));
  bool cpu_ran = false;
  e_->push([&] { cpu_ran = true; }, {y}, {h});
  a.release(2);
  EXPECT_EQ(failure_of(*e_, y), "A");
  EXPECT_EQ(failure_of(*e_, h), "A");
  EXPECT_EQ(failure_of(*e_, w), "");
  EXPECT_FALSE(reader_ran.load());
  EXPECT_FALSE(cpu_ran);
  EXPECT_TRUE(writer_ran.load());
  EXPECT_EQ(wait_all_failure(*e_), "A");
}

// Tells when the op named "B" starts, i.e. when its lane is about to order it after its
// inputs.
class StartWatch final : public Observer {
 public:
  void on_push(const OpInfo& op) override {
    if (op.name == "B") b_id_.store(op.id);
  }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t id, int) override {
    if (id == b_id_.load()) b_started_.store(true);
  }
  void on_end(std::uint64_t, bool, bool) override {}
  bool b_started() const { return b_started_.load(); }
  void reset() { b_started_.store(false); }

 private:
  std::atomic<std::uint64_t> b_id_{~std::uint64_t{0}};
  std::atomic<bool> b_started_{false};
};

// A producer that fails while its reader B is being ordered after it: B waits on its event
// for data and is then skipped without launching anything. The failure that wait carries
// must not reach C, the next op on B's stream, which only writes. Timing-dependent: the
// producer fails at a spread of moments around B's ordering.
TEST_P(GpuFailures, SkippedReaderLeavesItsStreamClean) {
  if (GetParam().kind == "naive") GTEST_SKIP() << "no ordering in flight on the naive engine";
  auto watch = std::make_shared<StartWatch>();
  e_->set_observer(watch);
  for (int i = 0; i < kSkipRounds; ++i) {
    watch->reset();
    Var x = e_->new_var(), y = e_->new_var(), z = e_->new_var();
    e_->push([&watch, i](const RunContext& ctx) {
      ctx.stream->enqueue_host([&watch, i] {
        const auto deadline = std::chrono::steady_clock::now() + kPatience;
        while (!watch->b_started() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
        std::atomic<int> spin{0};
        while (spin.fetch_add(1, std::memory_order_relaxed) < (i % 64) * 20) {
        }
        throw std::runtime_error("A");
      });
    }, {}, {x}, {.device = Device::gpu(0), .name = "A"});
    e_->push([](const RunContext& ctx) { ctx.stream->enqueue_host([] {}); }, {x}, {y},
             {.device = Device::gpu(0), .lane = Lane::copy_from_device, .name = "B"});
    std::atomic<bool> c_ran{false};
    e_->push([&](const RunContext& ctx) { ctx.stream->enqueue_host([&] { c_ran = true; }); },
             {}, {z}, {.device = Device::gpu(0), .lane = Lane::copy_from_device, .name = "C"});
    EXPECT_EQ(failure_of(*e_, z), "") << "iteration " << i;
    EXPECT_EQ(failure_of(*e_, y), "A");
    EXPECT_EQ(wait_all_failure(*e_), "A");
    EXPECT_TRUE(c_ran.load());
    if (HasFailure()) break;
  }
  e_->set_observer(nullptr);
}

TEST_P(GpuFailures, PushOnALaneOutsideTheEnumIsAnError) {
  Var v = e_->new_var();
  for (int lane : {17, 255}) {
    EXPECT_THROW(e_->push([](const RunContext&) {}, {}, {v},
                          on(Device::gpu(0), static_cast<Lane>(lane))),
                 Error)
        << lane;
  }
  EXPECT_NO_THROW(e_->wait_all());
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuFailures, kAllEngines, param_name);

}  // namespace
}  // namespace depengine::test
