// NDArray and the nd:: functions against plain reference loops on host vectors, through
// whichever engine Engine::get() gives (DEPENGINE_TYPE), and through a scoped engine.
// Integer-valued inputs are compared exactly.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "depengine/ndarray.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using depengine::test::ints;

std::size_t numel(const Shape& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

TEST(NDArray, CreationFunctions) {
  EXPECT_EQ(nd::zeros({2, 3}).to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(nd::ones({5}).to_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(nd::full({1, 3}, 7.5f).to_vector(), std::vector<float>(3, 7.5f));
  EXPECT_EQ(nd::arange(0, 5).to_vector(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(nd::arange(1, 2, 0.25).to_vector(), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  EXPECT_EQ(nd::arange(3, 0, -1).to_vector(), (std::vector<float>{3, 2, 1}));
  EXPECT_EQ(nd::arange(3, 3).size(), 0u);
  NDArray a = nd::array({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.ndim(), 2u);
  EXPECT_EQ(a.size(), 6u);
  EXPECT_TRUE(a.device().is_cpu());
  EXPECT_EQ(&a.engine(), &current_engine());
  EXPECT_EQ(a.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(nd::zeros({}).size(), 1u);
}

TEST(NDArray, ElementwiseWithArraysAndScalars) {
  const Shape shape{37, 101};
  const std::vector<float> av = ints(numel(shape), -20, 20, 1), bv = ints(numel(shape), 1, 5, 2);
  NDArray a = nd::array(av, shape), b = nd::array(bv, shape);
  auto check = [&](const NDArray& got, auto ref, const char* what) {
    ASSERT_EQ(got.shape(), shape) << what;
    const std::vector<float> g = got.to_vector();
    for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], ref(av[i], bv[i])) << what << i;
  };
  check(a + b, [](float x, float y) { return x + y; }, "a+b");
  check(a - b, [](float x, float y) { return x - y; }, "a-b");
  check(a * b, [](float x, float y) { return x * y; }, "a*b");
  check(a / b, [](float x, float y) { return x / y; }, "a/b");
  check(a + 2.0f, [](float x, float) { return x + 2.0f; }, "a+2");
  check(2.0f - a, [](float x, float) { return 2.0f - x; }, "2-a");
  check(a * 3.0f, [](float x, float) { return x * 3.0f; }, "a*3");
  check(8.0f / b, [](float, float y) { return 8.0f / y; }, "8/b");
  check(a / 4.0f, [](float x, float) { return x / 4.0f; }, "a/4");
  check(3.0f + a, [](float x, float) { return 3.0f + x; }, "3+a");
  check(-a, [](float x, float) { return -x; }, "-a");
  check(nd::pow(b, 2.0f), [](float, float y) { return y * y; }, "pow(b,2)");
  check(nd::pow(a, b), [](float x, float y) { return std::pow(x, y); }, "pow(a,b)");
  check(nd::maximum(a, b), [](float x, float y) { return std::max(x, y); }, "maximum");
  check(nd::minimum(a, b), [](float x, float y) { return std::min(x, y); }, "minimum");
  check(nd::relu(a), [](float x, float) { return x > 0 ? x : 0.0f; }, "relu");
  check(nd::abs(a), [](float x, float) { return std::fabs(x); }, "abs");
  check(nd::square(a), [](float x, float) { return x * x; }, "square");
  check(nd::sqrt(b * b), [](float, float y) { return y; }, "sqrt");
  check(nd::add(a, b) - nd::subtract(a, b), [](float, float y) { return 2 * y; }, "add-sub");
  check(nd::multiply(a, b) / nd::divide(b, b), [](float x, float y) { return x * y; }, "mul/div");
}

TEST(NDArray, TranscendentalsWithinTolerance) {
  NDArray x = nd::arange(-3, 3, 0.37);
  const std::vector<float> xv = x.to_vector();
  struct Case {
    NDArray got;
    float (*ref)(float);
  };
  const Case cases[] = {
      {nd::exp(x), [](float v) { return std::exp(v); }},
      {nd::tanh(x), [](float v) { return std::tanh(v); }},
      {nd::sigmoid(x), [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {nd::log(nd::exp(x)), [](float v) { return v; }},
      {nd::negative(x), [](float v) { return -v; }},
  };
  for (const Case& c : cases) {
    const std::vector<float> g = c.got.to_vector();
    for (std::size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c.ref(xv[i]), 1e-5) << i;
  }
}

TEST(NDArray, InPlaceOperators) {
  NDArray c = nd::array({1, 2, 3, 4}, {2, 2});
  NDArray alias = c;  // shares storage, as MXNet's NDArray handles do
  c += 1.0f;
  c *= 3.0f;
  c -= nd::array({1, 1, 1, 1}, {2, 2});
  c /= nd::array({2, 1}, {2});  // a row vector broadcast in place
  EXPECT_EQ(alias.to_vector(), (std::vector<float>{2.5f, 8, 5.5f, 14}));
  c += c;  // the same var read and written
  EXPECT_EQ(c.to_vector(), (std::vector<float>{5, 16, 11, 28}));
  c -= 1.0f;
  c /= 2.0f;
  EXPECT_EQ(c.to_vector(), (std::vector<float>{2, 7.5f, 5, 13.5f}));
}

// numpy's result for a (ra, ca) op b (rb, cb) with broadcasting, computed by index.
void check_broadcast(const Shape& sa, const Shape& sb, const Shape& expect) {
  const std::vector<float> av = ints(numel(sa), -9, 9, 3), bv = ints(numel(sb), -9, 9, 4);
  NDArray out = nd::array(av, sa) * nd::array(bv, sb) + nd::array(bv, sb);
  ASSERT_EQ(out.shape(), expect);
  const std::vector<float> got = out.to_vector();
  const std::size_t nd = expect.size();
  auto offset = [&](const Shape& s, std::size_t flat) {
    std::size_t off = 0, stride = 1;
    for (std::size_t k = 0; k < s.size(); ++k) {
      const std::size_t d = nd - 1 - k, dim = s[s.size() - 1 - k];
      std::size_t rem = flat;
      for (std::size_t e = nd - 1; e > d; --e) rem /= expect[e];
      const std::size_t idx = rem % expect[d];
      off += (dim == 1 ? 0 : idx) * stride;
      stride *= dim;
    }
    return off;
  };
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float x = av[offset(sa, i)], y = bv[offset(sb, i)];
    ASSERT_EQ(got[i], x * y + y) << shape_str(sa) << " with " << shape_str(sb) << " at " << i;
  }
}

TEST(NDArray, BroadcastingOnOddShapes) {
  check_broadcast({7, 13}, {13}, {7, 13});        // row vector
  check_broadcast({7, 13}, {1, 13}, {7, 13});     // row vector, 2-d
  check_broadcast({7, 13}, {7, 1}, {7, 13});      // column vector
  check_broadcast({7, 1}, {1, 13}, {7, 13});      // outer product shape
  check_broadcast({1}, {5, 3}, {5, 3});           // one element
  check_broadcast({}, {4}, {4});                  // 0-d
  check_broadcast({3, 1, 5}, {4, 1}, {3, 4, 5});  // three dimensions
  check_broadcast({1001, 3}, {1001, 1}, {1001, 3});
  check_broadcast({2, 40000}, {40000}, {2, 40000});
  check_broadcast({0, 3}, {3}, {0, 3});
}

TEST(NDArray, ReductionsWholeAndAlongAxes) {
  const Shape shape{3, 5, 7};
  const std::vector<float> v = ints(numel(shape), -50, 50, 5);
  NDArray a = nd::array(v, shape);
  double total = 0;
  for (float x : v) total += x;
  EXPECT_EQ(nd::sum(a).shape(), Shape{});
  EXPECT_EQ(nd::sum(a).item(), static_cast<float>(total));
  EXPECT_FLOAT_EQ(nd::mean(a).item(), static_cast<float>(total / 105));
  const float mx = *std::max_element(v.begin(), v.end());
  EXPECT_EQ(nd::max(a).item(), mx);
  EXPECT_EQ(nd::argmax(a).item(),
            static_cast<float>(std::max_element(v.begin(), v.end()) - v.begin()));
  for (int axis = -3; axis < 3; ++axis) {
    const std::size_t ax = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
    Shape out_shape;
    for (std::size_t d = 0; d < 3; ++d)
      if (d != ax) out_shape.push_back(shape[d]);
    NDArray s = nd::sum(a, axis), m = nd::mean(a, axis), x = nd::max(a, axis),
            i = nd::argmax(a, axis);
    ASSERT_EQ(s.shape(), out_shape);
    const std::vector<float> sv = s.to_vector(), mv = m.to_vector(), xv = x.to_vector(),
                             iv = i.to_vector();
    std::size_t j = 0;
    for (std::size_t p = 0; p < 3; ++p) {
      for (std::size_t q = 0; q < 5; ++q) {
        for (std::size_t r = 0; r < 7; ++r) {
          const std::size_t idx[3] = {p, q, r};
          if (idx[ax] != 0) continue;
          double sum = 0;
          float best = -1e9f;
          std::size_t at = 0;
          for (std::size_t k = 0; k < shape[ax]; ++k) {
            std::size_t id[3] = {p, q, r};
            id[ax] = k;
            const float val = v[(id[0] * 5 + id[1]) * 7 + id[2]];
            sum += val;
            if (val > best) {
              best = val;
              at = k;
            }
          }
          ASSERT_EQ(sv[j], static_cast<float>(sum)) << "axis " << axis;
          ASSERT_FLOAT_EQ(mv[j], static_cast<float>(sum / static_cast<double>(shape[ax])));
          ASSERT_EQ(xv[j], best);
          ASSERT_EQ(iv[j], static_cast<float>(at));
          ++j;
        }
      }
    }
    ASSERT_EQ(j, sv.size());
  }
}

TEST(NDArray, DotMatchesReferenceForEveryRank) {
  const std::size_t m = 301, k = 259, n = 17;
  const std::vector<float> av = ints(m * k, -3, 3, 6), bv = ints(k * n, -3, 3, 7);
  NDArray a = nd::array(av, {m, k}), b = nd::array(bv, {k, n});
  const std::vector<float> c = nd::dot(a, b).to_vector();
  ASSERT_EQ(nd::dot(a, b).shape(), (Shape{m, n}));
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float s = 0;
      for (std::size_t p = 0; p < k; ++p) s += av[i * k + p] * bv[p * n + j];
      ASSERT_EQ(c[i * n + j], s);
    }
  }
  NDArray x = nd::array(ints(k, -3, 3, 8), {k});
  EXPECT_EQ(nd::dot(a, x).shape(), Shape{m});
  EXPECT_EQ(nd::dot(x, b).shape(), Shape{n});
  EXPECT_EQ(nd::dot(x, x).shape(), Shape{});
  const std::vector<float> xv = x.to_vector();
  float xx = 0;
  for (float e : xv) xx += e * e;
  EXPECT_EQ(nd::dot(x, x).item(), xx);
  EXPECT_EQ(nd::dot(x, b).to_vector(), nd::dot(x.reshape({1, k}), b).to_vector());
}

TEST(NDArray, CopyTransposeReshape) {
  NDArray a = nd::arange(0, 6).reshape({2, 3});
  NDArray t = a.T();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(nd::transpose(nd::arange(0, 4)).to_vector(), (std::vector<float>{0, 1, 2, 3}));
  NDArray c = a.copy();
  c += 1.0f;  // a copy is independent
  EXPECT_EQ(a.to_vector(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  NDArray view = a.reshape({6});
  view *= 2.0f;  // a view shares storage and var
  EXPECT_EQ(a.to_vector(), (std::vector<float>{0, 2, 4, 6, 8, 10}));
}

TEST(NDArray, RandomFollowsSeedAndMoments) {
  nd::seed(42);
  NDArray u1 = nd::random_uniform({1000}, -1.0f, 1.0f);
  NDArray n1 = nd::random_normal({100, 100}, 2.0f, 0.5f);
  nd::seed(42);
  NDArray u2 = nd::random_uniform({1000}, -1.0f, 1.0f);
  NDArray n2 = nd::random_normal({100, 100}, 2.0f, 0.5f);
  NDArray u3 = nd::random_uniform({1000}, -1.0f, 1.0f);  // the stream continues
  EXPECT_EQ(u1.to_vector(), u2.to_vector());
  EXPECT_EQ(n1.to_vector(), n2.to_vector());
  EXPECT_NE(u1.to_vector(), u3.to_vector());
  for (float x : u1.to_vector()) {
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 1.0f);
  }
  EXPECT_NEAR(nd::mean(n1).item(), 2.0f, 0.02f);
  NDArray centered = n1 - nd::mean(n1).reshape({1});
  EXPECT_NEAR(std::sqrt(nd::mean(nd::square(centered)).item()), 0.5f, 0.02f);
}

TEST(NDArray, EngineScopeTargetsAnotherEngine) {
  auto naive = Engine::create("naive");
  Engine* before = &current_engine();
  {
    EngineScope use(*naive);
    EXPECT_EQ(&current_engine(), naive.get());
    NDArray a = nd::ones({3});
    NDArray b = a + a;  // follows its inputs' engine
    EXPECT_EQ(&b.engine(), naive.get());
    auto threaded = Engine::create("threaded", {.cpu_threads = 2});
    {
      EngineScope inner(*threaded);
      EXPECT_EQ(&nd::zeros({1}).engine(), threaded.get());
    }
    EXPECT_EQ(&current_engine(), naive.get());
    EXPECT_EQ(b.to_vector(), (std::vector<float>{2, 2, 2}));
    waitall();
  }
  EXPECT_EQ(&current_engine(), before);
}

// Scopes held in unique_ptrs and ended out of order: the inner scope, ending last, went
// back to the outer one's freed context, and the next creation function read freed memory
// (ASan: heap-use-after-free; release: arrays pushed to the wrong engine). A scope that ends
// now unlinks itself wherever it is among the thread's scopes.
TEST(NDArray, EngineScopesEndingOutOfOrderLeaveNoDanglingScope) {
  auto e0 = Engine::create("naive"), e1 = Engine::create("naive"), e2 = Engine::create("naive");
  EngineScope base(*e0);
  auto outer = std::make_unique<EngineScope>(*e1);
  auto inner = std::make_unique<EngineScope>(*e2);
  outer.reset();  // not the innermost: the inner scope stays current
  EXPECT_EQ(&current_engine(), e2.get());
  EXPECT_EQ(&nd::ones({2}).engine(), e2.get());
  inner.reset();  // returns to what was current before the outer scope
  EXPECT_EQ(&current_engine(), e0.get());
  EXPECT_EQ(nd::ones({2}).to_vector(), (std::vector<float>{1, 1}));
  EXPECT_EQ(&nd::ones({2}).engine(), e0.get());
  e2->wait_all();
}

// A null array holds nothing: its size() was 1, the element count of its empty shape (a 0-d
// array's), so `a.size() == 0` did not tell a null array from a scalar.
TEST(NDArray, NullArrayHasNoElements) {
  const NDArray null;
  EXPECT_FALSE(null.defined());
  EXPECT_EQ(null.size(), 0u);
  EXPECT_EQ(nd::full({}, 2.0f).size(), 1u);
  EXPECT_EQ(nd::zeros({3, 0}).size(), 0u);
}

// Elementwise ops on small arrays are small ops (PushOptions::small): on an idle threaded
// engine they have run when the call returns; on large arrays they are handed to a worker.
TEST(NDArray, SmallElementwiseOpsOnAnIdleEngineRunBeforeTheCallReturns) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*e);
  NDArray x = nd::ones({2, 3});
  waitall();
  NDArray y = x + 1.0f;
  EXPECT_EQ(e->pending(), 0u);
  NDArray z = y * x;
  EXPECT_EQ(e->pending(), 0u);
  NDArray w = nd::exp(z);
  EXPECT_EQ(e->pending(), 0u);
  EXPECT_EQ(w.to_vector(), std::vector<float>(6, std::exp(2.0f)));
}

TEST(NDArray, StorageIsFreedWhenTheLastHandleGoes) {
  waitall();
  const std::size_t before = nd::memory_stats().in_use;
  {
    NDArray a = nd::ones({1000});
    NDArray b = a * 2.0f;
    EXPECT_GE(nd::memory_stats().in_use, before + 8000);
    b.wait_to_read();
  }
  waitall();  // the deferred deletes have run
  EXPECT_EQ(nd::memory_stats().in_use, before);
  EXPECT_GE(nd::memory_stats().peak, before + 8000);
}

TEST(NDArray, FreedStorageIsKeptForTheNextArrayOfTheSameSize) {
  waitall();
  // A size no other test uses, so the pool holds no block of it yet.
  const std::size_t n = 12345;
  const std::size_t cached_before = nd::memory_stats().cached;
  const float* first = nullptr;
  {
    NDArray a = nd::zeros({n});
    a.wait_to_read();
    first = a.data();
  }
  waitall();  // the deferred delete has returned the block to the pool
  EXPECT_EQ(nd::memory_stats().cached, cached_before + n * sizeof(float));
  NDArray b = nd::ones({n});
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(nd::memory_stats().cached, cached_before);
  EXPECT_EQ(b.to_vector(), std::vector<float>(n, 1.0f));  // reused storage, new contents
}

// The address space this process has mapped (/proc/self/statm, in pages).
std::size_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// An allocation that fails while freed blocks wait in the pool (its cap set to 256 MiB) gives them
// back and tries again, as MXNet's pooled storage manager does: it failed with "out of
// memory" while the memory it needed sat in the cache. In a child process whose address
// space is capped 96 MiB above what it has mapped, 128 MiB of them cached: a 160 MiB array
// fits only once the cache is released.
TEST(NDArrayDeathTest, AFailedAllocationReleasesThePoolAndRetries) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under an address-space cap";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        constexpr std::size_t kMiB = std::size_t{1} << 20;
        auto e = Engine::create("naive");
        EngineScope use(*e);
        nd::set_pool_cap(256 * kMiB);
        { (void)nd::zeros({128 * kMiB / sizeof(float)}); }
        e->wait_all();
        if (nd::memory_stats().cached < 128 * kMiB) std::_Exit(2);
        rlimit cap{};
        cap.rlim_cur = cap.rlim_max = mapped_bytes() + 96 * kMiB;
        if (setrlimit(RLIMIT_AS, &cap) != 0) std::_Exit(3);
        try {
          NDArray b = nd::zeros({160 * kMiB / sizeof(float)});
          b.wait_to_read();
          if (nd::memory_stats().cached != 0) std::_Exit(4);  // the cache was given back
        } catch (const Error&) {
          std::_Exit(1);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Resident memory (/proc/self/statm, in pages).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// Issue 27: after a burst of results that all lived at once (a loop running ahead of the
// engine) and were dropped, the pool kept up to 256 MiB, and memory freed beyond it stayed
// resident in malloc's heaps. Now at most pool_cap() stays, the rest goes back.
TEST(NDArray, AfterABurstThePoolKeepsAtMostItsCapAndTheRestGoesBack) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const std::size_t cap = nd::pool_cap();
  EXPECT_EQ(cap, 64 * kMiB);  // the default (the tests run without DEPENGINE_POOL_CAP_MB)
  waitall();
  nd::set_pool_cap(0);  // start from an empty pool
  nd::set_pool_cap(cap);
  const std::size_t before = resident_bytes();
  {
    std::vector<NDArray> burst;
    const NDArray x = nd::ones({1000, 1000});
    for (int i = 0; i < 48; ++i) burst.push_back(x + 1.0f);  // 192 MB alive at once
    waitall();
    EXPECT_GE(resident_bytes(), before + 150 * kMiB);
  }
  waitall();
  EXPECT_LE(nd::memory_stats().cached, cap);
  // A sanitizer's allocator keeps freed blocks in quarantine (resident) to catch late uses.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LE(resident_bytes(), before + cap + 16 * kMiB);
#endif
  nd::set_pool_cap(0);
  EXPECT_EQ(nd::memory_stats().cached, 0u);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LE(resident_bytes(), before + 16 * kMiB);
#endif
  nd::set_pool_cap(cap);
}

}  // namespace
}  // namespace depengine
