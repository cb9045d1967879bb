// GPU scheduling on the host-simulated device (DEPENGINE_SIM_GPUS): every path that a CUDA
// device takes — same-stream chains, cross-stream and cross-device dependencies, CPU ops and
// waits on GPU work, copies overlapping compute, errors raised on the stream, event reuse —
// runs here without a GPU.
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "device/device_backend.h"
#include "test_util.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

class SimGpu : public testing::TestWithParam<EngineParam> {
 protected:
  std::unique_ptr<Engine> e_ = make_engine(GetParam(), {.sim_gpus = 2});
};

PushOptions on(Device d, Lane lane = Lane::compute, const char* name = "") {
  return PushOptions{.device = d, .lane = lane, .priority = 0, .name = name};
}

TEST_P(SimGpu, OpsSeeTheirDeviceLaneAndStream) {
  Var v = e_->new_var();
  Device seen_device;
  Lane seen_lane = Lane::compute;
  bool has_stream = false;
  e_->push([&](const RunContext& ctx) {
    seen_device = ctx.device;
    seen_lane = ctx.lane;
    has_stream = ctx.stream != nullptr && ctx.stream->device() == Device::gpu(1) &&
                 ctx.stream->lane() == Lane::copy_to_device;
  }, {}, {v}, on(Device::gpu(1), Lane::copy_to_device));
  e_->wait_to_read(v);
  EXPECT_EQ(seen_device, Device::gpu(1));
  EXPECT_EQ(seen_lane, Lane::copy_to_device);
  EXPECT_TRUE(has_stream);
}

// An op completes when its stream work completes, not when its launch function returns.
TEST_P(SimGpu, SameStreamChainCompletesInOrder) {
  Var v = e_->new_var();
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) {
    e_->push([&order, i](const RunContext& ctx) {
      ctx.stream->enqueue_host([&order, i] {
        if (i % 10 == 0) std::this_thread::sleep_for(1ms);
        order.push_back(i);
      });
    }, {v}, {v}, on(Device::gpu(0)));
  }
  e_->wait_to_read(v);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST_P(SimGpu, CrossStreamAndCrossDeviceDependencies) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var();
  std::atomic<int> av{0}, bv{0}, cv{0};
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      std::this_thread::sleep_for(20ms);
      av = 5;
    });
  }, {}, {a}, on(Device::gpu(0)));
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] { bv = av.load() * 2; });
  }, {a}, {b}, on(Device::gpu(0), Lane::copy_from_device));
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] { cv = bv.load() + 1; });
  }, {b}, {c}, on(Device::gpu(1)));
  e_->wait_to_read(c);
  EXPECT_EQ(av.load(), 5);
  EXPECT_EQ(bv.load(), 10);
  EXPECT_EQ(cv.load(), 11);
}

TEST_P(SimGpu, CpuOpAndWaitToReadWaitForGpuWork) {
  Var g = e_->new_var(), h = e_->new_var();
  std::atomic<int> gv{0};
  int hv = 0;
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] {
      std::this_thread::sleep_for(20ms);
      gv = 42;
    });
  }, {}, {g}, on(Device::gpu(0)));
  e_->push([&] { hv = gv.load() + 1; }, {g}, {h});
  e_->wait_to_read(g);
  EXPECT_EQ(gv.load(), 42);
  e_->wait_to_read(h);
  EXPECT_EQ(hv, 43);
}

// Independent work on the copy and compute lanes runs at the same time (two streams busy).
TEST_P(SimGpu, CopiesOverlapCompute) {
  if (GetParam().kind == "naive") GTEST_SKIP() << "the naive engine serializes everything";
  Var x = e_->new_var(), y = e_->new_var();
  std::atomic<int> arrived{0};
  std::atomic<bool> met{true};
  auto meet = [&] {
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (arrived.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        met = false;
        return;
      }
      std::this_thread::yield();
    }
  };
  e_->push([&](const RunContext& ctx) { ctx.stream->enqueue_host(meet); }, {}, {x},
           on(Device::gpu(0), Lane::compute));
  e_->push([&](const RunContext& ctx) { ctx.stream->enqueue_host(meet); }, {}, {y},
           on(Device::gpu(0), Lane::copy_to_device));
  e_->wait_all();
  EXPECT_TRUE(met.load());
}

TEST_P(SimGpu, ErrorRaisedOnTheStreamFailsTheOp) {
  Var a = e_->new_var(), b = e_->new_var(), c = e_->new_var();
  bool downstream_ran = false;
  e_->push([](const RunContext& ctx) {
    ctx.stream->enqueue_host([] { throw std::runtime_error("kernel fault"); });
  }, {}, {a}, on(Device::gpu(0)));
  e_->push([&](const RunContext& ctx) {
    ctx.stream->enqueue_host([&] { downstream_ran = true; });
  }, {a}, {b}, on(Device::gpu(1)));
  e_->push([&] {}, {b}, {c});
  try {
    e_->wait_to_read(c);
    FAIL() << "expected the stream's failure";
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "kernel fault");
  }
  EXPECT_FALSE(downstream_ran);
  EXPECT_THROW(e_->wait_all(), std::runtime_error);
  // The stream stays usable, and a later write clears the failure.
  int ok = 0;
  e_->push([&](const RunContext& ctx) { ctx.stream->enqueue_host([&] { ok = 1; }); }, {}, {a},
           on(Device::gpu(0)));
  e_->wait_to_read(a);
  EXPECT_EQ(ok, 1);
}

TEST_P(SimGpu, ErrorThrownByTheLaunchFunctionFailsTheOp) {
  Var a = e_->new_var();
  e_->push([](const RunContext&) { throw std::invalid_argument("bad launch"); }, {}, {a},
           on(Device::gpu(0)));
  EXPECT_THROW(e_->wait_to_read(a), std::invalid_argument);
  EXPECT_THROW(e_->wait_all(), std::invalid_argument);
}

TEST_P(SimGpu, AsyncGpuOp) {
  Var a = e_->new_var();
  std::atomic<int> av{0};
  e_->push_async([&](const RunContext& ctx, Completion done) {
    ctx.stream->enqueue_host([&av, done] {
      av = 9;
      done();
    });
  }, {}, {a}, on(Device::gpu(1)));
  e_->wait_to_read(a);
  EXPECT_EQ(av.load(), 9);
}

TEST_P(SimGpu, ManySmallOpsAcrossDevicesAndLanes) {
  std::vector<Var> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(e_->new_var());
  std::vector<long> value(8, 0);
  long expect_sum = 0;
  for (int i = 0; i < 400; ++i) {
    const int src = i % 8, dst = (i * 5 + 3) % 8;
    const Device d = Device::gpu(i % 2);
    const Lane lane = static_cast<Lane>(i % kLaneCount);
    e_->push([&value, src, dst, i](const RunContext& ctx) {
      ctx.stream->enqueue_host([&value, src, dst, i] { value[dst] = (value[dst] + value[src] + i) % 100003; });
    }, {vars[static_cast<std::size_t>(src)]}, {vars[static_cast<std::size_t>(dst)]}, on(d, lane));
  }
  std::vector<long> ref(8, 0);
  for (int i = 0; i < 400; ++i) {
    const int src = i % 8, dst = (i * 5 + 3) % 8;
    ref[dst] = (ref[dst] + ref[src] + i) % 100003;
  }
  e_->wait_all();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(value[static_cast<std::size_t>(i)], ref[static_cast<std::size_t>(i)]) << i;
    expect_sum += ref[static_cast<std::size_t>(i)];
  }
  EXPECT_GT(expect_sum, 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, SimGpu, kAllEngines, param_name);

// The stream/event layer itself: in-order streams, events recorded and awaited across
// streams, and an event reused for many records.
TEST(SimStreams, EventsOrderWorkAcrossStreamsAndAreReusable) {
  auto backend = detail::make_sim_backend(1);
  auto producer = backend->make_stream(0, Lane::compute);
  auto consumer = backend->make_stream(0, Lane::copy_from_device);
  auto event = backend->make_event(0);
  EXPECT_TRUE(event->query());
  std::atomic<int> produced{0};
  std::vector<int> consumed;
  for (int round = 0; round < 20; ++round) {
    producer->enqueue_host([&] {
      std::this_thread::sleep_for(200us);
      produced.fetch_add(1);
    });
    producer->record(*event);
    consumer->wait(*event, detail::WaitKind::data);
    consumer->enqueue_host([&, round] {
      // The event guarantees the producer's first round+1 steps have run.
      consumed.push_back(produced.load() > round ? round : -1);
    });
  }
  consumer->synchronize();
  event->synchronize();
  EXPECT_TRUE(event->query());
  ASSERT_EQ(consumed.size(), 20u);
  for (int r = 0; r < 20; ++r) EXPECT_EQ(consumed[static_cast<std::size_t>(r)], r);
}

TEST(SimStreams, NotifyReportsTheFirstErrorOnce) {
  auto backend = detail::make_sim_backend(1);
  auto s = backend->make_stream(0, Lane::compute);
  s->enqueue_host([] { throw std::runtime_error("one"); });
  s->enqueue_host([] { throw std::runtime_error("two"); });
  std::promise<std::exception_ptr> first, second;
  s->notify_when_done([&](std::exception_ptr e) { first.set_value(e); });
  s->notify_when_done([&](std::exception_ptr e) { second.set_value(e); });
  std::exception_ptr e1 = first.get_future().get();
  ASSERT_TRUE(e1);
  try {
    std::rethrow_exception(e1);
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "one");
  }
  EXPECT_FALSE(second.get_future().get());
}

TEST(SimStreams, UnknownDeviceIsAnError) {
  auto backend = detail::make_sim_backend(2);
  EXPECT_THROW(backend->make_stream(2, Lane::compute), Error);
  EXPECT_THROW(backend->make_event(-1), Error);
}

TEST(NoCuda, ReportsNoDevicesAndAClearError) {
  if (Device::gpu_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto backend = detail::make_cuda_backend();
  EXPECT_EQ(backend->device_count(), 0);
  try {
    backend->make_stream(0, Lane::compute);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("gpu(0)"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace depengine::test
