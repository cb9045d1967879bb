// Event-based GPU completion on the host-simulated device (device/gpu_sync.h): a GPU op is
// complete for its successors once its work is on its stream. These tests hold a stream's
// work back behind a gate and check what may and may not happen meanwhile: successors on the
// same stream, on another stream and on another GPU are launched (ordered by the stream or by
// an event wait, not by the host); CPU ops, wait_to_read, delete_var and async GPU ops wait
// for the work to complete without holding a CPU worker; errors raised by the work reach the
// ops downstream even when those were launched before the error was known.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "device/device_backend.h"
#include "device/gpu_sync.h"
#include "test_util.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

constexpr auto kPatience = 10s;  // how long a test waits for another thread

PushOptions on(Device d, Lane lane = Lane::compute) {
  return PushOptions{.device = d, .lane = lane, .priority = 0, .name = "gpu op"};
}

class GpuEvents : public testing::TestWithParam<int> {
 protected:
  std::unique_ptr<Engine> e_ =
      Engine::create("threaded", {.cpu_threads = GetParam(), .sim_gpus = 2});
};

// A successor on the same stream is launched while its predecessor's work is still queued:
// no host round trip between them, and the stream keeps their order.
TEST_P(GpuEvents, SameStreamChainLaunchesBeforeTheWorkCompletes) {
  Var v = e_->new_var();
  Gate gate;
  std::vector<int> order;
  std::atomic<int> launched{0};
  for (int i = 0; i < 20; ++i) {
    e_->push([&, i](const RunContext& ctx) {
      launched.fetch_add(1);
      ctx.stream->enqueue_host([&, i] {
        if (i == 0) gate.pass();
        order.push_back(i);
      });
    }, {v}, {v}, on(Device::gpu(0)));
  }
  const bool all_launched = eventually([&] { return launched.load() == 20; });
  gate.open();
  EXPECT_TRUE(all_launched) << "only " << launched.load() << " of 20 ops were launched";
  e_->wait_to_read(v);
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

// Successors on another stream of the same GPU and on another GPU are launched at once and
// ordered by event waits: their work sees the producer's result.
TEST_P(GpuEvents, CrossStreamAndCrossDeviceSuccessorsWaitOnEvents) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var();
  Gate gate;
  std::atomic<int> av{0}, bv{0}, cv{0};
  std::atomic<int> launched{0};
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      gate.pass();
      av = 5;
    });
  }, {}, {a}, on(Device::gpu(0)));
  e_->push([&](const RunContext& ctx) {
    launched.fetch_add(1);
    ctx.stream->enqueue_host([&] { bv = av.load() * 2; });
  }, {a}, {b}, on(Device::gpu(0), Lane::copy_from_device));
  e_->push([&](const RunContext& ctx) {
    launched.fetch_add(1);
    ctx.stream->enqueue_host([&] { cv = bv.load() + 1; });
  }, {b}, {c}, on(Device::gpu(1), Lane::copy_to_device));
  const bool both_launched = eventually([&] { return launched.load() == 2; });
  EXPECT_EQ(bv.load(), 0) << "the copy ran before the work it waits for";
  gate.open();
  EXPECT_TRUE(both_launched);
  e_->wait_to_read(c);
  EXPECT_EQ(av.load(), 5);
  EXPECT_EQ(bv.load(), 10);
  EXPECT_EQ(cv.load(), 11);
}

// A write on another stream waits for earlier reads of the var on other streams (WAR).
TEST_P(GpuEvents, WriteOnAnotherStreamWaitsForEarlierReads) {
  Var x = e_->new_var(), y = e_->new_var();
  Gate gate;
  std::atomic<int> xv{1}, seen{0};
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      gate.pass();
      seen = xv.load();
    });
  }, {x}, {y}, on(Device::gpu(0), Lane::copy_from_device));
  std::atomic<bool> writer_launched{false};
  e_->push([&](const RunContext& ctx) {
    writer_launched = true;
    ctx.stream->enqueue_host([&] { xv = 2; });
  }, {}, {x}, on(Device::gpu(1)));
  const bool launched = eventually([&] { return writer_launched.load(); });
  gate.open();
  EXPECT_TRUE(launched);
  e_->wait_all();
  EXPECT_EQ(seen.load(), 1) << "the write overtook an earlier read";
  EXPECT_EQ(xv.load(), 2);
}

// With one CPU worker, a CPU op that reads GPU output is parked until the work completes
// and the worker goes on with other ops meanwhile.
TEST_P(GpuEvents, CpuOpWaitsForGpuWorkWithoutHoldingAWorker) {
  Var g = e_->new_var(), h = e_->new_var(), other = e_->new_var();
  Gate gate;
  std::atomic<int> gv{0};
  std::atomic<bool> h_ran{false};
  int hv = 0;
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      gate.pass();
      gv = 42;
    });
  }, {}, {g}, on(Device::gpu(0)));
  e_->push([&] {
    h_ran = true;
    hv = gv.load() + 1;
  }, {g}, {h});
  int ov = 0;
  e_->push([&] { ov = 7; }, {}, {other});
  auto independent = std::async(std::launch::async, [&] { e_->wait_to_read(other); });
  const bool other_done = independent.wait_for(kPatience) == std::future_status::ready;
  EXPECT_FALSE(h_ran.load()) << "the CPU op ran before the GPU work it reads";
  gate.open();
  independent.get();
  EXPECT_TRUE(other_done) << "an independent CPU op waited behind GPU work";
  EXPECT_EQ(ov, 7);
  e_->wait_to_read(h);
  EXPECT_EQ(hv, 43);
}

// wait_to_read, wait_all, pending() and delete_var all count GPU work until it completes.
TEST_P(GpuEvents, WaitsAndDeletesCoverDeviceWorkInFlight) {
  Var a = e_->new_var(), b = e_->new_var();
  Gate gate;
  std::atomic<bool> a_done{false}, b_done{false}, deleted{false};
  std::atomic<int> launched{0};
  e_->push([&](const RunContext& ctx) {
    launched.fetch_add(1);
    ctx.stream->enqueue_host([&] {
      gate.pass();
      a_done = true;
    });
  }, {}, {a}, on(Device::gpu(0)));
  e_->push([&](const RunContext& ctx) {
    launched.fetch_add(1);
    ctx.stream->enqueue_host([&] { b_done = a_done.load(); });
  }, {a}, {b}, on(Device::gpu(1)));
  e_->delete_var(a, [&] { deleted = a_done.load(); });
  ASSERT_TRUE(eventually([&] { return launched.load() == 2; }));
  EXPECT_GE(e_->pending(), 2u) << "launched GPU ops must stay pending until their work runs";
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(deleted.load()) << "the var was deleted under GPU work that uses it";
  gate.open();
  e_->wait_to_read(b);
  EXPECT_TRUE(b_done.load());
  e_->wait_all();
  EXPECT_TRUE(deleted.load());
  EXPECT_EQ(e_->pending(), 0u);
}

// A delete whose callback only frees memory, pushed while a GPU op on the var has not even
// launched: the op's access ends at its launch, its work later, and the memory must outlive
// the work (the frontend's host arrays read by a copy to a device).
TEST_P(GpuEvents, FreeingDeleteWaitsForDeviceWorkNotYetLaunched) {
  Var a = e_->new_var();
  Gate host_gate, device_gate;
  std::atomic<bool> work_done{false}, freed_early{false}, freed{false};
  e_->push([&] { host_gate.pass(); }, {}, {a});  // holds the GPU op back from launching
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      device_gate.pass();
      work_done = true;
    });
  }, {a}, {}, on(Device::gpu(0)));
  e_->delete_var(a, [&] {
    freed_early = !work_done.load();
    freed = true;
  }, {.frees_memory_only = true});
  host_gate.open();
  std::this_thread::sleep_for(20ms);  // the GPU op launches and lets go of its access
  EXPECT_FALSE(freed.load()) << "the var was freed under GPU work that reads it";
  device_gate.open();
  e_->wait_all();
  EXPECT_TRUE(freed.load());
  EXPECT_FALSE(freed_early.load());
}

// An async GPU op is a host op: its function starts only once its device inputs are done.
TEST_P(GpuEvents, AsyncGpuOpStartsAfterItsDeviceInputs) {
  Var a = e_->new_var(), b = e_->new_var();
  std::atomic<int> av{0};
  int seen = -1;
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      std::this_thread::sleep_for(10ms);
      av = 3;
    });
  }, {}, {a}, on(Device::gpu(0)));
  e_->push_async([&](const RunContext&, Completion done) {
    seen = av.load();
    done();
  }, {a}, {b}, on(Device::gpu(1), Lane::copy_to_device));
  e_->wait_to_read(b);
  EXPECT_EQ(seen, 3);
}

// A pipeline: compute(k) then copy(k) of its result. copy(k) waits for compute(k) through
// an event, and runs while compute(k+1) runs: two streams busy at once. Each waits for the
// other to have started, which only event-based ordering allows.
TEST_P(GpuEvents, CopiesOverlapComputeInAPipeline) {
  constexpr std::size_t kStages = 4;
  std::vector<Var> x, y;
  for (std::size_t k = 0; k < kStages; ++k) {
    x.push_back(e_->new_var());
    y.push_back(e_->new_var());
  }
  std::vector<std::atomic<bool>> compute_started(kStages), copy_started(kStages);
  std::vector<std::atomic<int>> produced(kStages), copied(kStages);
  std::atomic<int> overlaps{0};
  for (std::size_t k = 0; k < kStages; ++k) {
    e_->push([&, k](const RunContext& ctx) {
      ctx.stream->enqueue_host([&, k] {
        compute_started[k] = true;
        if (k > 0 && eventually([&] { return copy_started[k - 1].load(); })) overlaps.fetch_add(1);
        produced[k] = static_cast<int>(k) + 1;
      });
    }, {}, {x[k]}, on(Device::gpu(0)));
    e_->push([&, k](const RunContext& ctx) {
      ctx.stream->enqueue_host([&, k] {
        copy_started[k] = true;
        if (k + 1 < kStages) eventually([&] { return compute_started[k + 1].load(); });
        copied[k] = produced[k].load();
      });
    }, {x[k]}, {y[k]}, on(Device::gpu(0), Lane::copy_from_device));
  }
  e_->wait_all();
  for (std::size_t k = 0; k < kStages; ++k) EXPECT_EQ(copied[k].load(), static_cast<int>(k) + 1);
  EXPECT_EQ(overlaps.load(), static_cast<int>(kStages) - 1);
}

// An error raised by device work after its successors were launched still fails them, on
// the same stream, on another GPU and on the CPU, and wait_all reports it once.
TEST_P(GpuEvents, LateStreamErrorReachesSuccessorsAlreadyLaunched) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var(), d = e_->new_var();
  Gate gate;
  std::atomic<int> launched{0};
  std::atomic<bool> other_device_ran{false};
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      gate.pass();
      throw std::runtime_error("late fault");
    });
  }, {}, {a}, on(Device::gpu(0)));
  e_->push([&](const RunContext& ctx) {
    launched.fetch_add(1);
    ctx.stream->enqueue_host([&] { other_device_ran = true; });
  }, {a}, {b}, on(Device::gpu(1)));
  e_->push([&](const RunContext& ctx) {
    launched.fetch_add(1);
    ctx.stream->enqueue_host([] {});
  }, {a}, {c}, on(Device::gpu(0)));
  bool cpu_ran = false;
  e_->push([&] { cpu_ran = true; }, {b}, {d});
  const bool both_launched = eventually([&] { return launched.load() == 2; });
  gate.open();
  EXPECT_TRUE(both_launched);
  for (const Var* v : {&b, &c, &d, &a}) {
    try {
      e_->wait_to_read(*v);
      ADD_FAILURE() << "expected the stream's failure on var #" << v->id();
    } catch (const std::runtime_error& err) {
      EXPECT_STREQ(err.what(), "late fault");
    }
  }
  EXPECT_FALSE(other_device_ran.load()) << "work behind a failed event ran";
  EXPECT_FALSE(cpu_ran);
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
  EXPECT_NO_THROW(e_->wait_all());
  // The engine and the streams stay usable; a write-only access clears the failure.
  std::atomic<int> ok{0};
  e_->push([&](const RunContext& ctx) { ctx.stream->enqueue_host([&] { ok = 1; }); }, {}, {a},
           on(Device::gpu(0)));
  int got = 0;
  e_->push([&] { got = ok.load(); }, {a}, {d});
  e_->wait_to_read(d);
  EXPECT_EQ(got, 1);
}

// Many dependent ops bouncing between streams and GPUs: each needs an event, and the pool
// keeps reusing the few that are in flight.
TEST_P(GpuEvents, EventsAreReusedAcrossManyCrossStreamOps) {
  Var v = e_->new_var();
  long value = 0;
  constexpr int kOps = 600;
  for (int i = 0; i < kOps; ++i) {
    const Device d = Device::gpu(i % 2);
    const Lane lane = static_cast<Lane>((i / 2) % kLaneCount);
    e_->push([&value, i](const RunContext& ctx) {
      ctx.stream->enqueue_host([&value, i] { value = (value * 31 + i) % 1000003; });
    }, {v}, {v}, on(d, lane));
  }
  long expect = 0;
  for (int i = 0; i < kOps; ++i) expect = (expect * 31 + i) % 1000003;
  e_->wait_to_read(v);
  EXPECT_EQ(value, expect);
}

std::string workers_name(const testing::TestParamInfo<int>& p) {
  return std::to_string(p.param) + "_workers";
}

INSTANTIATE_TEST_SUITE_P(Workers, GpuEvents, testing::Values(1, 2, 4), workers_name);

// The same programs give the same results on the naive engine, which drains the stream
// after every op: the oracle for the event-based path.
TEST(GpuEventsOracle, NaiveAndThreadedAgreeOnAMixedProgram) {
  auto run = [](std::string_view kind) {
    auto e = Engine::create(kind, {.cpu_threads = 2, .sim_gpus = 2});
    std::vector<Var> vars;
    for (int i = 0; i < 6; ++i) vars.push_back(e->new_var());
    std::vector<long> value(6, 1);
    for (int i = 0; i < 300; ++i) {
      const std::size_t src = static_cast<std::size_t>(i % 6);
      const std::size_t dst = static_cast<std::size_t>((i * 7 + 2) % 6);
      auto step = [&value, src, dst, i] { value[dst] = (value[dst] * 3 + value[src] + i) % 99991; };
      if (i % 5 == 0) {
        e->push(step, {vars[src]}, {vars[dst]});
      } else {
        e->push([step](const RunContext& ctx) { ctx.stream->enqueue_host(step); }, {vars[src]},
                {vars[dst]}, on(Device::gpu(i % 2), static_cast<Lane>(i % kLaneCount)));
      }
    }
    e->wait_all();
    return value;
  };
  EXPECT_EQ(run("threaded"), run("naive"));
}

TEST(GpuEventPool, ReturnedEventsAreReused) {
  auto backend = detail::make_sim_backend(1);
  detail::EventPool pool(*backend, 0);
  auto first = pool.take();
  auto second = pool.take();
  EXPECT_EQ(pool.created(), 2u);
  detail::StreamEvent* raw = first.get();
  pool.give_back(std::move(first));
  auto again = pool.take();
  EXPECT_EQ(again.get(), raw);
  EXPECT_EQ(pool.created(), 2u);
}

TEST(GpuEventPool, UnknownDeviceIsAnError) {
  auto backend = detail::make_sim_backend(1);
  detail::EventPool pool(*backend, 3);
  EXPECT_THROW(pool.take(), Error);
}

}  // namespace
}  // namespace depengine::test
