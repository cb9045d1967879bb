// GPU kernels on a real CUDA device, checked against the CPU kernels through the threaded
// engine (event completion, copy lanes). Every test that needs a device reports "skipped"
// when Device::gpu_count() == 0; the one that checks the no-device error runs only then.
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "depengine/ops/cuda.h"
#include "depengine/engine.h"
#include "depengine/ops/elementwise.h"
#include "depengine/ops/fill.h"
#include "depengine/ops/gemm.h"
#include "depengine/ops/random.h"
#include "depengine/ops/reduce.h"
#include "depengine/ops/transpose.h"

namespace depengine::test {
namespace {

PushOptions on_gpu(Lane lane = Lane::compute) {
  return PushOptions{.device = Device::gpu(0), .lane = lane, .priority = 0, .name = "gpu test"};
}

TEST(GpuRuntime, NoDeviceIsAClearErrorAtPush) {
  if (Device::gpu_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto e = Engine::create("threaded", {.cpu_threads = 1});
  Var v = e->new_var();
  try {
    e->push([] {}, {}, {v}, on_gpu());
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("gpu(0)"), std::string::npos) << err.what();
  }
  auto naive = Engine::create("naive");
  Var w = naive->new_var();
  EXPECT_THROW(naive->push([] {}, {}, {w}, on_gpu()), Error);
}

// A device array on gpu(0) owned by the test: uploaded on the copy-to-device lane,
// downloaded on the copy-from-device lane, freed on its stream.
class GpuOps : public testing::Test {
 protected:
  void SetUp() override {
    if (Device::gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
    e_ = Engine::create("threaded", {.cpu_threads = 2});
  }

  struct Buf {
    Var var;
    float* p = nullptr;
    std::size_t n = 0;
  };

  // The device pointer is set by the upload op: kernels read it inside their ops, which
  // declare the buffer's var. Elements of a deque keep their addresses.
  Buf& upload(const std::vector<float>& host) {
    auto staged = std::make_shared<std::vector<float>>(host);
    Buf* out = &bufs_.emplace_back(Buf{e_->new_var(), nullptr, host.size()});
    e_->push([out, staged](const RunContext& ctx) {
      out->p = ops::cuda::allocate(ctx, out->n);
      ops::cuda::copy_to_device(ctx, staged->data(), out->p, out->n);
      ctx.stream->enqueue_host([staged] {});  // keeps the host copy alive until the copy ran
    }, {}, {out->var}, on_gpu(Lane::copy_to_device));
    return *out;
  }

  Buf& empty(std::size_t n) { return upload(std::vector<float>(n, 0.f)); }

  std::vector<float> download(const Buf& b) {
    std::vector<float> host(b.n);
    Var done = e_->new_var();
    e_->push([&host, &b](const RunContext& ctx) {
      ops::cuda::copy_to_host(ctx, b.p, host.data(), b.n);
    }, {b.var}, {done}, on_gpu(Lane::copy_from_device));
    e_->wait_to_read(done);
    return host;
  }

  void TearDown() override {
    if (!e_) return;
    for (Buf& b : bufs_) {
      e_->push([&b](const RunContext& ctx) { ops::cuda::deallocate(ctx, b.p); }, {}, {b.var},
               on_gpu());
    }
    e_->wait_all();
  }

  static std::vector<float> integers(std::size_t n, int mod) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i * 7 % mod) - mod / 2);
    return v;
  }

  std::unique_ptr<Engine> e_;
  std::deque<Buf> bufs_;
  RunContext cpu_{Device::cpu(), Lane::compute, 0, nullptr};
};

TEST_F(GpuOps, ElementwiseMatchesCpuExactlyOnIntegers) {
  const std::size_t n = 10007;
  const std::vector<float> a = integers(n, 41), b = integers(n, 13);
  Buf &da = upload(a), &db = upload(b), &dout = empty(n);
  for (ops::Binary op : {ops::Binary::add, ops::Binary::sub, ops::Binary::mul,
                         ops::Binary::maximum, ops::Binary::minimum, ops::Binary::equal,
                         ops::Binary::not_equal, ops::Binary::less, ops::Binary::less_equal,
                         ops::Binary::greater, ops::Binary::greater_equal}) {
    e_->push([&, op](const RunContext& ctx) { ops::cuda::binary(ctx, op, da.p, db.p, dout.p, n); },
             {da.var, db.var}, {dout.var}, on_gpu());
    std::vector<float> want(n);
    ops::cpu::binary(cpu_, op, a.data(), b.data(), want.data(), n);
    EXPECT_EQ(download(dout), want) << ops::name(op);
  }
  for (ops::Unary op : {ops::Unary::neg, ops::Unary::relu, ops::Unary::abs, ops::Unary::square}) {
    e_->push([&, op](const RunContext& ctx) { ops::cuda::unary(ctx, op, da.p, dout.p, n); },
             {da.var}, {dout.var}, on_gpu());
    std::vector<float> want(n);
    ops::cpu::unary(cpu_, op, a.data(), want.data(), n);
    EXPECT_EQ(download(dout), want) << ops::name(op);
  }
}

TEST_F(GpuOps, TranscendentalsAgreeToRounding) {
  const std::size_t n = 4096;
  std::vector<float> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = 0.01f + static_cast<float>(i) / 512.f;
  Buf &da = upload(a), &dout = empty(n);
  for (ops::Unary op : {ops::Unary::exp, ops::Unary::log, ops::Unary::sigmoid, ops::Unary::tanh,
                        ops::Unary::sqrt}) {
    e_->push([&, op](const RunContext& ctx) { ops::cuda::unary(ctx, op, da.p, dout.p, n); },
             {da.var}, {dout.var}, on_gpu());
    std::vector<float> want(n);
    ops::cpu::unary(cpu_, op, a.data(), want.data(), n);
    const std::vector<float> got = download(dout);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], 4e-6f * std::max(1.f, std::fabs(want[i]))) << ops::name(op) << " at " << i;
    }
  }
}

TEST_F(GpuOps, BroadcastScalarFillAndArangeMatchCpu) {
  const std::size_t rows = 123, cols = 77;
  const std::vector<float> m = integers(rows * cols, 29), row = integers(cols, 11);
  Buf &dm = upload(m), &drow = upload(row), &dout = empty(rows * cols);
  ops::Broadcast bc;
  bc.ndim = 2;
  bc.shape[0] = rows;
  bc.shape[1] = cols;
  bc.a_stride[0] = cols;
  bc.a_stride[1] = 1;
  bc.b_stride[0] = 0;
  bc.b_stride[1] = 1;
  e_->push([&](const RunContext& ctx) {
    ops::cuda::binary_broadcast(ctx, ops::Binary::sub, dm.p, drow.p, dout.p, bc);
  }, {dm.var, drow.var}, {dout.var}, on_gpu());
  std::vector<float> want(rows * cols);
  ops::cpu::binary_broadcast(cpu_, ops::Binary::sub, m.data(), row.data(), want.data(), bc);
  EXPECT_EQ(download(dout), want);
  e_->push([&](const RunContext& ctx) {
    ops::cuda::binary_scalar(ctx, ops::Binary::sub, dm.p, 3.f, true, dout.p, rows * cols);
  }, {dm.var}, {dout.var}, on_gpu());
  ops::cpu::binary_scalar(cpu_, ops::Binary::sub, m.data(), 3.f, true, want.data(), rows * cols);
  EXPECT_EQ(download(dout), want);
  e_->push([&](const RunContext& ctx) { ops::cuda::arange(ctx, dout.p, rows * cols, -5.0, 0.25); },
           {}, {dout.var}, on_gpu());
  ops::cpu::arange(cpu_, want.data(), rows * cols, -5.0, 0.25);
  EXPECT_EQ(download(dout), want);
  e_->push([&](const RunContext& ctx) { ops::cuda::fill(ctx, dout.p, rows * cols, 2.5f); }, {},
           {dout.var}, on_gpu());
  EXPECT_EQ(download(dout), std::vector<float>(rows * cols, 2.5f));
}

TEST_F(GpuOps, GemmAndTransposeMatchCpuOnIntegers) {
  const std::size_t m = 67, k = 45, n = 53;
  const std::vector<float> a = integers(m * k, 7), b = integers(k * n, 5);
  Buf &da = upload(a), &db = upload(b), &dc = empty(m * n), &dt = empty(m * k);
  for (bool tb : {false, true}) {
    // With tb, B is read as stored n×k.
    std::vector<float> bt(k * n);
    ops::cpu::transpose(cpu_, b.data(), k, n, bt.data());
    Buf& src = tb ? upload(bt) : db;
    e_->push([&, tb](const RunContext& ctx) {
      ops::cuda::gemm(ctx, false, tb, m, n, k, 1.f, da.p, k, src.p, tb ? k : n, 0.f, dc.p, n);
    }, {da.var, src.var}, {dc.var}, on_gpu());
    std::vector<float> want(m * n);
    ops::cpu::gemm(cpu_, false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, want.data(), n);
    EXPECT_EQ(download(dc), want) << "trans_b " << tb;
  }
  e_->push([&](const RunContext& ctx) { ops::cuda::transpose(ctx, da.p, m, k, dt.p); }, {da.var},
           {dt.var}, on_gpu());
  std::vector<float> want(m * k);
  ops::cpu::transpose(cpu_, a.data(), m, k, want.data());
  EXPECT_EQ(download(dt), want);
}

TEST_F(GpuOps, ReductionsMatchCpuExactlyOnIntegers) {
  const std::size_t outer = 37, len = 300, inner = 11, n = outer * len * inner;
  std::vector<float> a = integers(n, 97);
  a[n / 3] = 1000.f;
  a[2 * n / 3] = 1000.f;  // argmax keeps the first
  Buf &da = upload(a), &d1 = empty(1), &dax = empty(outer * inner);
  for (ops::Reduce op : {ops::Reduce::sum, ops::Reduce::mean, ops::Reduce::max, ops::Reduce::argmax}) {
    e_->push([&, op](const RunContext& ctx) { ops::cuda::reduce_all(ctx, op, da.p, n, d1.p); },
             {da.var}, {d1.var}, on_gpu());
    float want = 0;
    ops::cpu::reduce_all(cpu_, op, a.data(), n, &want);
    EXPECT_EQ(download(d1)[0], want) << ops::name(op);
    e_->push([&, op](const RunContext& ctx) {
      ops::cuda::reduce_axis(ctx, op, da.p, outer, len, inner, dax.p);
    }, {da.var}, {dax.var}, on_gpu());
    std::vector<float> want_axis(outer * inner);
    ops::cpu::reduce_axis(cpu_, op, a.data(), outer, len, inner, want_axis.data());
    EXPECT_EQ(download(dax), want_axis) << ops::name(op) << " along an axis";
  }
}

// Divisors without 0 (integers(n, 13) has some), whose quotients and remainders are exact.
TEST_F(GpuOps, ModAndFloorDivideMatchCpuExactly) {
  const std::size_t n = 10007;
  std::vector<float> a = integers(n, 41), b = integers(n, 13);
  for (float& x : b) x = x >= 0.0f ? x + 1.0f : x;
  Buf &da = upload(a), &db = upload(b), &dout = empty(n);
  for (ops::Binary op : {ops::Binary::mod, ops::Binary::floor_div}) {
    e_->push([&, op](const RunContext& ctx) { ops::cuda::binary(ctx, op, da.p, db.p, dout.p, n); },
             {da.var, db.var}, {dout.var}, on_gpu());
    std::vector<float> want(n);
    ops::cpu::binary(cpu_, op, a.data(), b.data(), want.data(), n);
    EXPECT_EQ(download(dout), want) << ops::name(op);
  }
}

TEST_F(GpuOps, StridedCopyAndReduceAxesMatchCpu) {
  const std::vector<float> a = integers(2 * 3 * 4, 29);
  Buf &da = upload(a), &dout = empty(a.size()), &dred = empty(3);
  ops::Strided t;  // (2, 3, 4) -> (4, 2, 3)
  t.ndim = 3;
  const std::size_t shape[] = {4, 2, 3};
  const std::ptrdiff_t src[] = {1, 12, 4}, dst[] = {6, 3, 1};
  for (int d = 0; d < 3; ++d) {
    t.shape[d] = shape[d];
    t.src_stride[d] = src[d];
    t.dst_stride[d] = dst[d];
  }
  e_->push([&](const RunContext& ctx) { ops::cuda::strided_copy(ctx, da.p, 0, dout.p, 0, t); },
           {da.var}, {dout.var}, on_gpu());
  std::vector<float> want(a.size());
  ops::cpu::strided_copy(cpu_, a.data(), 0, want.data(), 0, t);
  EXPECT_EQ(download(dout), want);
  ops::ReduceAxes r;  // over axes 0 and 2 of (2, 3, 4)
  r.out_ndim = 1;
  r.out_shape[0] = 3;
  r.out_stride[0] = 4;
  r.red_ndim = 2;
  r.red_shape[0] = 2;
  r.red_stride[0] = 12;
  r.red_shape[1] = 4;
  r.red_stride[1] = 1;
  for (ops::Reduce op : {ops::Reduce::sum, ops::Reduce::mean, ops::Reduce::max}) {
    e_->push([&, op](const RunContext& ctx) { ops::cuda::reduce_axes(ctx, op, da.p, r, dred.p); },
             {da.var}, {dred.var}, on_gpu());
    std::vector<float> w(3);
    ops::cpu::reduce_axes(cpu_, op, a.data(), r, w.data());
    EXPECT_EQ(download(dred), w) << ops::name(op);
  }
}

TEST_F(GpuOps, PhiloxUniformsEqualTheCpuStream) {
  const std::size_t n = 100003;
  Buf& d = empty(n);
  e_->push([&](const RunContext& ctx) {
    ops::cuda::random_uniform(ctx, 42, 7, -1.f, 3.f, d.p, n);
  }, {}, {d.var}, on_gpu());
  std::vector<float> want(n);
  ops::cpu::random_uniform(cpu_, 42, 7, -1.f, 3.f, want.data(), n);
  EXPECT_EQ(download(d), want);
  e_->push([&](const RunContext& ctx) { ops::cuda::random_normal(ctx, 42, 7, 0.f, 1.f, d.p, n); },
           {}, {d.var}, on_gpu());
  ops::cpu::random_normal(cpu_, 42, 7, 0.f, 1.f, want.data(), n);
  const std::vector<float> got = download(d);
  for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << i;
}

}  // namespace
}  // namespace depengine::test
