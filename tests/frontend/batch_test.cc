// nd::BatchGather (depengine/batch.h): a batch gathered and converted by one op on the CPU's
// copy lane is bitwise the per-value computation NumPy does (float(v), / divisor,
// (· − mean) / stddev), with ToTensor's (H, W, C) → (C, H, W), negative indices counted from
// the end; the same bits on every engine; errors name the field or the index.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "depengine/batch.h"
#include "depengine/ndarray.h"
#include "depengine/observer.h"
#include "support/test_support.h"

namespace depengine {
namespace {

using test::expect_error;

constexpr std::size_t kRows = 7, kH = 3, kW = 4, kC = 2;

std::vector<std::uint8_t> pixels() {
  std::vector<std::uint8_t> v(kRows * kH * kW * kC);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  return v;
}

std::vector<float> labels() { return {3, 1, 4, 1, 5, 9, 2}; }

nd::BatchGather image_gather() {
  auto images = std::make_shared<const nd::HostTable>(pixels(), Shape{kRows, kH, kW, kC});
  auto classes = std::make_shared<const nd::HostTable>(labels(), Shape{kRows});
  return nd::BatchGather({{images, {.to_chw = true, .divisor = 255.0f, .mean = {0.25f, 0.5f},
                                    .stddev = {0.5f, 0.3f}}},
                          {classes, {}}});
}

// The batch as NumPy computes ToTensor then Normalize on a gathered (n, H, W, C) batch.
std::vector<float> reference(const std::vector<std::int64_t>& idx) {
  const std::vector<std::uint8_t> p = pixels();
  const float mean[] = {0.25f, 0.5f}, stddev[] = {0.5f, 0.3f};
  std::vector<float> out;
  for (std::int64_t i : idx) {
    const std::size_t r = static_cast<std::size_t>(i < 0 ? i + kRows : i);
    for (std::size_t c = 0; c < kC; ++c) {
      for (std::size_t h = 0; h < kH; ++h) {
        for (std::size_t w = 0; w < kW; ++w) {
          const float v = static_cast<float>(p[((r * kH + h) * kW + w) * kC + c]) / 255.0f;
          out.push_back((v - mean[c]) / stddev[c]);
        }
      }
    }
  }
  return out;
}

// Records the lane and name of every op pushed.
struct Lanes : Observer {
  std::mutex m;
  std::vector<std::pair<std::string, Lane>> seen;
  std::vector<std::thread::id> ran_on;
  void on_push(const OpInfo& op) override {
    std::lock_guard lock(m);
    seen.emplace_back(std::string(op.name), op.lane);
  }
  void on_ready(std::uint64_t) override {}
  void on_start(std::uint64_t, int) override {
    std::lock_guard lock(m);
    ran_on.push_back(std::this_thread::get_id());
  }
  void on_end(std::uint64_t, bool, bool) override {}
};

TEST(BatchGather, IsTheNumpyComputationOnEveryEngine) {
  const std::vector<std::int64_t> idx{6, 0, -1, 2, 2};
  for (auto [kind, workers] : {std::pair{"naive", 0}, {"threaded", 1}, {"threaded", 2},
                               {"threaded", 4}}) {
    SCOPED_TRACE(std::string(kind) + " " + std::to_string(workers));
    auto e = Engine::create(kind, {.cpu_threads = workers});
    EngineScope use(*e);
    const std::vector<NDArray> b = image_gather()(idx);
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[0].shape(), (Shape{5, kC, kH, kW}));
    EXPECT_EQ(b[0].to_vector(), reference(idx));
    EXPECT_EQ(b[1].to_vector(), (std::vector<float>{2, 3, 2, 4, 4}));
  }
}

TEST(BatchGather, PlainFieldsAreConvertedAsIs) {
  auto t = std::make_shared<const nd::HostTable>(pixels(), Shape{kRows, kH * kW * kC});
  const nd::BatchGather g({{t, {}}});
  const std::vector<float> row = g(std::vector<std::int64_t>{3})[0].to_vector();
  const std::vector<std::uint8_t> p = pixels();
  ASSERT_EQ(row.size(), kH * kW * kC);
  for (std::size_t i = 0; i < row.size(); ++i) EXPECT_EQ(row[i], static_cast<float>(p[3 * row.size() + i]));
  EXPECT_EQ(g(std::vector<std::int64_t>{})[0].shape(), (Shape{0, kH * kW * kC}));
}

TEST(BatchGather, IsOneOpOnTheCopyLaneRunByAWorker) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  auto lanes = std::make_shared<Lanes>();
  e->set_observer(lanes);
  EngineScope use(*e);
  const std::vector<NDArray> b = image_gather()(std::vector<std::int64_t>{1, 2});
  // Pushed, not run by the caller: a worker runs it while this thread only looks. (Not
  // wait_all, whose thread may run queued ops itself.)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto started = [&] {
    std::lock_guard lock(lanes->m);
    return !lanes->ran_on.empty();
  };
  while (!started() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  e->wait_all();
  e->set_observer(nullptr);
  ASSERT_EQ(lanes->seen.size(), 1u);
  EXPECT_EQ(lanes->seen[0].first, "gather_batch");
  EXPECT_EQ(lanes->seen[0].second, Lane::copy_to_device);
  ASSERT_EQ(lanes->ran_on.size(), 1u);
  EXPECT_NE(lanes->ran_on[0], std::this_thread::get_id());
}

TEST(BatchGather, ErrorsNameTheFieldOrTheIndex) {
  const nd::BatchGather g = image_gather();
  expect_error([&] { g(std::vector<std::int64_t>{0, 7}); },
               "gather_batch: index 7 is out of range for 7 samples");
  expect_error([&] { g(std::vector<std::int64_t>{-8}); },
               "gather_batch: index -8 is out of range for 7 samples");
  auto images = std::make_shared<const nd::HostTable>(pixels(), Shape{kRows, kH, kW, kC});
  auto flat = std::make_shared<const nd::HostTable>(pixels(), Shape{kRows, kH * kW * kC});
  auto three = std::make_shared<const nd::HostTable>(std::vector<float>{1, 2, 3}, Shape{3});
  expect_error([&] { nd::BatchGather({{images, {}}, {three, {}}}); },
               "BatchGather: field 1 has 3 rows, field 0 has 7");
  expect_error([&] { nd::BatchGather({{flat, {.to_chw = true, .mean = {}, .stddev = {}}}}); },
               "BatchGather: field 0: a (H, W, C) to (C, H, W) conversion needs 3-d samples, got (24,)");
  expect_error([&] { nd::BatchGather({{images, {.mean = {1, 2}, .stddev = {1}}}}); },
               "BatchGather: field 0: mean has 2 values, stddev 1");
  expect_error([&] { nd::BatchGather({{images, {.to_chw = true, .mean = {1, 2, 3}, .stddev = {1, 2, 3}}}}); },
               "mean and stddev have 3 values (one per channel, or one for all) but the sample "
               "(2, 3, 4) has 2 channels");
  expect_error([&] { nd::HostTable(std::vector<float>{1, 2, 3}, Shape{2, 2}); },
               "HostTable: 3 values do not fill shape (2, 2)");
  expect_error([&] { nd::BatchGather({}); }, "BatchGather: no field to gather");
}

}  // namespace
}  // namespace depengine
