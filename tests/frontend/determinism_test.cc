// Sequential consistency of the frontend: one random program of NDArray ops (broadcasts,
// in-place updates, reductions, GEMMs large enough to be tiled, random arrays, reseeds)
// gives bitwise the same arrays on the naive engine and on the threaded engine with
// 1, 2, 3 and 8 workers. Kernels chunk their work independently of the thread count, and
// random numbers come from a counter-based generator ordered by an engine var.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "depengine/ndarray.h"

namespace depengine {
namespace {

// Shapes that broadcast against each other and straddle the kernels' chunk sizes.
const Shape kShapes[] = {{300, 257}, {257}, {300, 1}, {1, 257}, {17, 5}, {5}, {17, 1}};

std::vector<std::vector<float>> run_program(Engine& engine, unsigned seed, int ops) {
  EngineScope use(engine);
  std::mt19937 g(seed);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(g() % n); };
  std::vector<NDArray> pool;
  nd::seed(seed);
  for (const Shape& s : kShapes) pool.push_back(nd::random_normal(s, 0.0f, 1.0f));
  pool.push_back(nd::random_uniform({257, 300}, -1.0f, 1.0f));
  auto any = [&]() -> NDArray& { return pool[pick(pool.size())]; };
  // An array of the same shape as `a`, or one that broadcasts to it.
  auto partner = [&](const NDArray& a) -> NDArray {
    for (int tries = 0; tries < 20; ++tries) {
      const NDArray& b = any();
      if (b.ndim() <= a.ndim() && (b.size() == 1 || b.shape().back() == a.shape().back() ||
                                   b.shape().back() == 1)) {
        if (b.ndim() < 2 || a.ndim() < 2 || b.shape()[0] == a.shape()[0] || b.shape()[0] == 1)
          return b;
      }
    }
    return nd::full(a.shape(), 0.5f);
  };
  for (int i = 0; i < ops; ++i) {
    NDArray& a = any();
    NDArray out;
    switch (pick(12)) {
      case 0:
        out = a + partner(a);
        break;
      case 1:
        out = a * partner(a) - 0.25f;
        break;
      case 2:
        a += partner(a);
        break;
      case 3:
        a *= 0.5f;
        break;
      case 4:
        out = nd::tanh(a) / (1.0f + nd::abs(a));
        break;
      case 5:
        out = nd::sigmoid(a) + nd::relu(a);
        break;
      case 6:
        out = a.ndim() == 2 ? nd::sum(a, static_cast<int>(pick(2))) : nd::mean(a);
        break;
      case 7:
        out = nd::max(a) + nd::argmax(a) + nd::sum(a);
        break;
      case 8:
        if (a.ndim() == 2) out = nd::dot(a, a.T());
        break;
      case 9:
        out = nd::random_normal(a.shape(), 0.0f, 1.0f) * a;
        break;
      case 10:
        if (pick(4) == 0) nd::seed(g());
        out = nd::random_uniform(a.shape()) + a;
        break;
      case 11:
        out = nd::pow(nd::square(a) + 1.0f, 0.5f);
        break;
    }
    // Keep magnitudes bounded so GEMM chains do not overflow to inf everywhere.
    if (out.defined()) pool.push_back(nd::tanh(out));
    if (pool.size() > 24) pool.erase(pool.begin() + static_cast<long>(pick(pool.size())));
  }
  std::vector<std::vector<float>> result;
  for (const NDArray& a : pool) result.push_back(a.to_vector());
  waitall();
  return result;
}

bool same_bits(const std::vector<std::vector<float>>& x, const std::vector<std::vector<float>>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i].size() != y[i].size()) return false;
    if (std::memcmp(x[i].data(), y[i].data(), x[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

class FrontendDeterminism : public ::testing::TestWithParam<int> {};

TEST_P(FrontendDeterminism, ThreadedMatchesNaiveBitwise) {
  const unsigned seed = 1000u + static_cast<unsigned>(GetParam());
  auto naive = Engine::create("naive");
  const auto expect = run_program(*naive, seed, 150);
  for (int workers : {1, 2, 3, 8}) {
    auto threaded = Engine::create("threaded", {.cpu_threads = workers});
    const auto got = run_program(*threaded, seed, 150);
    EXPECT_TRUE(same_bits(expect, got)) << "seed " << seed << ", " << workers << " workers";
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, FrontendDeterminism, ::testing::Range(0, 3));

TEST(FrontendDeterminism, SameSeedSameRandomArraysOnEveryEngine) {
  auto naive = Engine::create("naive");
  auto threaded = Engine::create("threaded", {.cpu_threads = 3});
  auto draw = [](Engine& e) {
    EngineScope use(e);
    nd::seed(7);
    NDArray u = nd::random_uniform({100001});
    NDArray n = nd::random_normal({999, 7});
    return std::vector<std::vector<float>>{u.to_vector(), n.to_vector()};
  };
  EXPECT_TRUE(same_bits(draw(*naive), draw(*threaded)));
}

}  // namespace
}  // namespace depengine
