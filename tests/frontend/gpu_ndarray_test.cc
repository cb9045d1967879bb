// NDArray on GPUs, through the host-simulated device (EngineOptions::sim_gpus = 2), so that
// every frontend GPU path runs without a GPU: each op on GPU arrays against the same op on
// CPU arrays (bitwise, integer-valued inputs), copy_to between the CPU and both GPUs, mixed
// devices rejected at the call, arrays dropped while their GPU ops are pending, failures of
// GPU work reaching the blockers, and copies running while the compute stream is busy.
// The "cuda" instantiation runs the same tests on CUDA devices (up to two; one GPU stands in
// for both) and skips when none is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "depengine/ndarray.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::ints;
using depengine::test::PushCounter;
using depengine::test::expect_error;

constexpr Device kGpu0 = Device::gpu(0);

// Same shape, same device as expected, and the same bits as the CPU result; or, when
// `rounding` (a CUDA device's transcendental functions), equal to float rounding.
void expect_same(const NDArray& got, Device device, const NDArray& want, const std::string& what,
                 bool rounding = false) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(got.device(), device) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  if (g.empty()) return;
  if (!rounding) {
    EXPECT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(float)), 0) << what;
    return;
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " at " << i;
    } else if (g[i] != w[i]) {  // equal infinities have no finite difference to bound
      ASSERT_NEAR(g[i], w[i], 1e-5f * std::max(1.0f, std::abs(w[i]))) << what << " at " << i;
    }
  }
}

// An engine kind, and its simulated GPUs (0: CUDA devices).
struct Setup {
  const char* kind;
  int sim_gpus;
};

void PrintTo(const Setup& s, std::ostream* os) {
  *os << s.kind << (s.sim_gpus ? " simulated" : " cuda");
}

class GpuNDArray : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    if (GetParam().sim_gpus == 0 && Device::gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
    engine_ = Engine::create(GetParam().kind, {.cpu_threads = 2, .sim_gpus = GetParam().sim_gpus});
    gpus_ = engine_->sim_gpus() > 0 ? engine_->sim_gpus() : Device::gpu_count();
    counter_ = std::make_shared<PushCounter>();
    engine_->set_observer(counter_);
    scope_ = std::make_unique<EngineScope>(*engine_);
  }
  void TearDown() override {
    scope_.reset();
    if (engine_) engine_->wait_all();
  }
  bool threaded() const { return std::string(GetParam().kind) == "threaded"; }
  // CUDA's exp, log, tanh, pow, ... may differ from the host's in the last bits.
  bool rounding() const { return engine_->sim_gpus() == 0; }
  // gpu(1), or gpu(0) on a machine with one GPU.
  Device second_gpu() const { return Device::gpu(gpus_ > 1 ? 1 : 0); }

  std::unique_ptr<Engine> engine_;
  int gpus_ = 0;
  std::shared_ptr<PushCounter> counter_;
  std::unique_ptr<EngineScope> scope_;
};

using Binary = std::function<NDArray(const NDArray&, const NDArray&)>;
using Unary = std::function<NDArray(const NDArray&)>;

TEST_P(GpuNDArray, EveryOpOnGpuArraysEqualsTheCpuResult) {
  const Shape shape{19, 33};
  constexpr std::size_t n = 19 * 33;
  const std::vector<float> av = ints(n, -9, 9, 1), bv = ints(n, 1, 4, 2), pv = ints(n, 1, 9, 3);
  const std::vector<float> rowv = ints(33, 1, 3, 4), colv = ints(19, -3, 3, 5);
  for (Device gpu : {kGpu0, second_gpu()}) {
    SCOPED_TRACE(gpu.str());
    const NDArray a = nd::array(av, shape), b = nd::array(bv, shape), p = nd::array(pv, shape);
    const NDArray row = nd::array(rowv, {33}), col = nd::array(colv, {19, 1});
    const NDArray ga = nd::array(av, shape, gpu), gb = b.copy_to(gpu), gp = p.copy_to(gpu);
    const NDArray grow = row.copy_to(gpu), gcol = col.copy_to(gpu);
    EXPECT_EQ(ga.device(), gpu);

    const std::vector<std::pair<const char*, Binary>> binaries = {
        {"+", [](auto& x, auto& y) { return x + y; }},
        {"-", [](auto& x, auto& y) { return x - y; }},
        {"*", [](auto& x, auto& y) { return x * y; }},
        {"/", [](auto& x, auto& y) { return x / y; }},
        {"pow", [](auto& x, auto& y) { return nd::pow(x, y); }},
        {"maximum", [](auto& x, auto& y) { return nd::maximum(x, y); }},
        {"minimum", [](auto& x, auto& y) { return nd::minimum(x, y); }},
    };
    for (const auto& [name, f] : binaries) {
      const bool r = rounding() && std::string(name) == "pow";
      expect_same(f(ga, gb), gpu, f(a, b), name, r);
      expect_same(f(ga, grow), gpu, f(a, row), std::string(name) + " row", r);
      expect_same(f(gcol, gb), gpu, f(col, b), std::string(name) + " col", r);
    }

    const std::vector<std::pair<const char*, Unary>> unaries = {
        {"a+2", [](auto& x) { return x + 2.0f; }},   {"2-a", [](auto& x) { return 2.0f - x; }},
        {"a*3", [](auto& x) { return x * 3.0f; }},   {"6/a", [](auto& x) { return 6.0f / x; }},
        {"a/4", [](auto& x) { return x / 4.0f; }},   {"-a", [](auto& x) { return -x; }},
        {"pow2", [](auto& x) { return nd::pow(x, 2.0f); }},
        {"exp", [](auto& x) { return nd::exp(x); }}, {"log", [](auto& x) { return nd::log(x); }},
        {"relu", [](auto& x) { return nd::relu(x); }},
        {"sigmoid", [](auto& x) { return nd::sigmoid(x); }},
        {"tanh", [](auto& x) { return nd::tanh(x); }},
        {"sqrt", [](auto& x) { return nd::sqrt(x); }},
        {"abs", [](auto& x) { return nd::abs(x); }},
        {"square", [](auto& x) { return nd::square(x); }},
        {"sum", [](auto& x) { return nd::sum(x); }},
        {"sum0", [](auto& x) { return nd::sum(x, 0); }},
        {"sum-1", [](auto& x) { return nd::sum(x, -1); }},
        {"mean", [](auto& x) { return nd::mean(x); }},
        {"mean1", [](auto& x) { return nd::mean(x, 1); }},
        {"max", [](auto& x) { return nd::max(x); }},
        {"max0", [](auto& x) { return nd::max(x, 0); }},
        {"argmax", [](auto& x) { return nd::argmax(x); }},
        {"argmax1", [](auto& x) { return nd::argmax(x, 1); }},
        {"copy", [](auto& x) { return x.copy(); }},
        {"T", [](auto& x) { return x.T(); }},
        {"transpose", [](auto& x) { return nd::transpose(x); }},
        {"reshape", [](auto& x) { return x.reshape({33, 19}) * 1.0f; }},
        {"dot", [](auto& x) { return nd::dot(x, x.T()); }},
        {"dot 1-d", [](auto& x) { return nd::dot(x.reshape({n}), x.reshape({n})); }},
        {"dot (k,)(k,n)", [](auto& x) { return nd::dot(nd::sum(x, 1), x); }},
        {"dot (m,k)(k,)", [](auto& x) { return nd::dot(x, nd::sum(x, 0)); }},
    };
    const std::vector<std::string> transcendental = {"pow2", "exp", "log", "sigmoid", "tanh"};
    for (const auto& [name, f] : unaries) {
      const bool r = rounding() && std::ranges::count(transcendental, name) > 0;
      expect_same(f(gp), gpu, f(p), name, r);
    }
    expect_same(nd::log(ga), gpu, nd::log(a), "log of negatives (NaN)", rounding());

    NDArray ia = a.copy(), gia = ga.copy();
    ia += b;
    gia += gb;
    ia -= row;
    gia -= grow;
    ia *= col;
    gia *= gcol;
    ia /= b;
    gia /= gb;
    ia += 1.0f;
    gia += 1.0f;
    ia -= 2.0f;
    gia -= 2.0f;
    ia *= 3.0f;
    gia *= 3.0f;
    ia /= 4.0f;
    gia /= 4.0f;
    expect_same(gia, gpu, ia, "in place");

    expect_same(nd::zeros({3, 4}, gpu), gpu, nd::zeros({3, 4}), "zeros");
    expect_same(nd::ones({5}, gpu), gpu, nd::ones({5}), "ones");
    expect_same(nd::full({2, 2}, 7.5f, gpu), gpu, nd::full({2, 2}, 7.5f), "full");
    expect_same(nd::arange(3, -4, -0.5, gpu), gpu, nd::arange(3, -4, -0.5), "arange");
    expect_same(nd::zeros({0}, gpu), gpu, nd::zeros({0}), "empty");
    nd::seed(11);
    const NDArray u = nd::random_uniform({1001}, -2.0f, 5.0f);
    const NDArray z = nd::random_normal({333}, 1.0f, 2.0f);
    nd::seed(11);
    expect_same(nd::random_uniform({1001}, -2.0f, 5.0f, gpu), gpu, u, "random_uniform");
    expect_same(nd::random_normal({333}, 1.0f, 2.0f, gpu), gpu, z, "random_normal", rounding());
  }
}

TEST_P(GpuNDArray, CopyToRoundTripsThroughBothGpus) {
  const Device kGpu1 = second_gpu();
  const std::vector<float> v = ints(4097, -1000, 1000, 7);
  const NDArray host = nd::array(v, {4097});
  const NDArray g0 = host.copy_to(kGpu0);
  const NDArray g1 = g0.copy_to(kGpu1);
  const NDArray back = g1.copy_to(Device::cpu());
  EXPECT_EQ(g0.device(), kGpu0);
  EXPECT_EQ(g1.device(), kGpu1);
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_EQ(back.to_vector(), v);
  EXPECT_EQ(g1.to_vector(), v);
  EXPECT_EQ(g1.copy_to(kGpu0).to_vector(), v);

  // A copy to the array's own device is a new array.
  NDArray same = g0.copy_to(kGpu0);
  same += 1.0f;
  EXPECT_EQ(g0.to_vector(), v);
  EXPECT_EQ(same.device(), kGpu0);
  EXPECT_EQ(same.to_vector()[0], v[0] + 1.0f);

  // Implicit blockers on GPU arrays.
  EXPECT_EQ(nd::sum(nd::ones({10}, kGpu1)).item(), 10.0f);
  std::ostringstream on_gpu, on_cpu;
  const NDArray m = nd::arange(0, 6, 1, kGpu0).reshape({2, 3});
  on_gpu << m;
  on_cpu << nd::arange(0, 6).reshape({2, 3});
  EXPECT_EQ(on_gpu.str(), on_cpu.str());
  EXPECT_EQ(on_gpu.str(), "array([[0., 1., 2.],\n       [3., 4., 5.]])");
}

TEST_P(GpuNDArray, MixedDevicesThrowNamingBothDevicesAndTheOpAndPushNothing) {
  NDArray c = nd::ones({2, 2}), g0 = nd::ones({2, 2}, kGpu0);
  NDArray g1 = nd::ones({2, 2}, second_gpu());
  const Device missing = Device::gpu(gpus_);
  const std::string missing_name = missing.str();
  waitall();
  const int before = counter_->pushes.load();
  expect_error([&] { (void)(c + g0); }, {"add", "cpu", "gpu(0)"});
  expect_error([&] { (void)nd::dot(g0, c); }, {"dot", "gpu(0)", "cpu"});
  expect_error([&] { c -= g1; }, {"sub", "cpu", "gpu("});
  if (gpus_ > 1) {
    expect_error([&] { (void)nd::maximum(g1, g0); }, {"maximum", "gpu(1)", "gpu(0)"});
    expect_error([&] { g0 *= g1; }, {"mul", "gpu(0)", "gpu(1)"});
  }
  expect_error([&] { (void)nd::zeros({2}, missing); }, {"zeros", missing_name.c_str()});
  expect_error([&] { (void)g0.copy_to(missing); }, {"copy_to", missing_name.c_str()});
  expect_error([&] { (void)nd::array({1, 2}, {2}, Device::gpu(-1)); }, {"array", "gpu(-1)"});
  EXPECT_EQ(counter_->pushes.load(), before);
}

// An op on `gpu`'s compute stream that holds the stream until `open` is set.
void push_gate(Engine& e, Device gpu, const NDArray& written, std::atomic<bool>& open) {
  e.push(
      [&open](const RunContext& ctx) {
        ctx.stream->enqueue_host([&open] {
          while (!open.load()) std::this_thread::yield();
        });
      },
      {}, {written.var()}, {.device = gpu, .name = "gate"});
}

TEST_P(GpuNDArray, ArraysDroppedWhilePendingOnAGpuAreSafe) {
  waitall();
  const std::size_t base = nd::memory_stats().in_use;
  std::atomic<bool> open{!threaded()};
  NDArray gate = nd::zeros({1000}, kGpu0);
  // Under the naive engine the gate would hold the pushing thread: it is open from the start.
  push_gate(*engine_, kGpu0, gate, open);
  NDArray result;
  {
    NDArray x = gate + 1.0f;
    NDArray y = nd::dot(x.reshape({10, 100}), nd::ones({100, 10}, kGpu0));
    NDArray z = (nd::sum(y) * 2.0f).copy_to(second_gpu());
    gate = NDArray();
    result = z.copy_to(Device::cpu());
  }
  NDArray dropped = result.copy_to(kGpu0) + 1.0f;
  dropped = NDArray();
  open.store(true);
  EXPECT_EQ(result.item(), 2.0f * 1000.0f * 10.0f);
  result = NDArray();
  waitall();
  EXPECT_EQ(nd::memory_stats().in_use, base);
}

TEST_P(GpuNDArray, FailuresOfGpuWorkSurfaceAtEveryBlocker) {
  NDArray a = nd::ones({4, 4}, kGpu0);
  engine_->push(
      [](const RunContext& ctx) {
        ctx.stream->enqueue_host([] { throw std::runtime_error("kernel exploded"); });
      },
      {}, {a.var()}, {.device = kGpu0, .name = "custom"});
  NDArray b = a + 1.0f;
  NDArray c = nd::dot(b, b).copy_to(second_gpu());
  NDArray s = nd::sum(c);
  NDArray h = s.copy_to(Device::cpu());
  NDArray unrelated = nd::full({2}, 3.0f, kGpu0);
  auto expect_original = [](auto&& f) {
    depengine::test::expect_runtime_error(f, "kernel exploded");
  };
  expect_original([&] { b.wait_to_read(); });
  expect_original([&] { (void)b.to_vector(); });
  expect_original([&] { (void)s.item(); });
  expect_original([&] { (void)h.to_vector(); });
  expect_original([&] {
    std::ostringstream os;
    os << c;
  });
  expect_original([&] { waitall(); });
  waitall();
  EXPECT_EQ((unrelated * 2.0f).to_vector(), (std::vector<float>{6, 6}));
  // A new array on the failed array's device is unaffected.
  a = nd::zeros({4, 4}, kGpu0);
  EXPECT_EQ(nd::sum(a + 1.0f).item(), 16.0f);
}

// Copies in and out of gpu(0) finish while its compute stream is held by a long op: the
// copy lanes are other streams. Serialized behind the compute op, they could finish only
// after the gate gave up waiting for them.
// The threaded engine only: the naive one drains each op's stream before the next op.
TEST(GpuNDArrayThreaded, CopiesOverlapComputeOnTheSimulatedDevice) {
  auto engine = Engine::create("threaded", {.cpu_threads = 2, .sim_gpus = 2});
  EngineScope use(*engine);
  const std::vector<float> v = ints(1 << 16, -50, 50, 9);
  NDArray on_gpu = nd::array(v, {1 << 16}, kGpu0);
  NDArray on_host = nd::array(v, {1 << 16});
  on_gpu.wait_to_read();
  NDArray busy = nd::zeros({1}, kGpu0);
  std::promise<void> copies_done;
  std::shared_future<void> done = copies_done.get_future().share();
  std::atomic<bool> released_by_copies{false};
  engine->push(
      [done, &released_by_copies](const RunContext& ctx) {
        ctx.stream->enqueue_host([done, &released_by_copies] {
          released_by_copies =
              done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
        });
      },
      {}, {busy.var()}, {.device = kGpu0, .lane = Lane::compute, .name = "long kernel"});
  NDArray down = on_gpu.copy_to(Device::cpu());
  NDArray up = on_host.copy_to(kGpu0);
  down.wait_to_read();
  up.wait_to_read();
  copies_done.set_value();
  busy.wait_to_read();
  EXPECT_TRUE(released_by_copies.load());
  EXPECT_EQ(down.to_vector(), v);
  EXPECT_EQ(up.to_vector(), v);
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuNDArray,
                         ::testing::Values(Setup{"naive", 2}, Setup{"threaded", 2},
                                           Setup{"threaded", 0}),
                         [](const ::testing::TestParamInfo<Setup>& p) {
                           return std::string(p.param.kind) +
                                  (p.param.sim_gpus ? "_simulated" : "_cuda");
                         });

}  // namespace
}  // namespace depengine
