// The shuffle and batch-assembly ops. Both run on the CPU's copy_to_device lane, so the
// profiler tells data preparation apart from the model's compute lane.
#include "fashion_mnist/pipeline.h"

#include <algorithm>
#include <string>
#include <utility>

namespace depengine::fashion_mnist {
namespace {

// splitmix64: a seeded stream that is the same on every platform, unlike the standard
// library's distributions.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr std::size_t kMaxExamples = std::size_t{1} << 24;

}  // namespace

BatchPipeline::BatchPipeline(std::shared_ptr<const Dataset> data, std::size_t batch, int slots,
                             Normalization norm)
    : data_(std::move(data)), batch_(batch), norm_(norm) {
  if (!data_ || data_->size() == 0) throw Error("BatchPipeline: the data set is empty");
  if (data_->size() > kMaxExamples) {
    throw Error("BatchPipeline: " + std::to_string(data_->size()) +
                " examples is more than the 2^24 that float indices hold exactly");
  }
  if (data_->labels.size() != data_->size()) {
    throw Error("BatchPipeline: the data set has " + std::to_string(data_->size()) +
                " images but " + std::to_string(data_->labels.size()) + " labels");
  }
  if (batch_ == 0) throw Error("BatchPipeline: the batch size must be positive");
  if (slots < 1) throw Error("BatchPipeline: at least one buffer slot is needed");
  if (!(norm_.stddev > 0.0f)) throw Error("BatchPipeline: the normalization stddev must be > 0");
  const std::size_t pixels = data_->images.pixels_per_image();
  const std::size_t rows = std::min(batch_, data_->size());
  order_ = nd::zeros({data_->size()});
  for (int s = 0; s < slots; ++s) slots_.push_back({nd::zeros({rows, pixels}), nd::zeros({rows})});
  if (const std::size_t rem = data_->size() % batch_; rem != 0 && data_->size() > batch_) {
    tail_ = {nd::zeros({rem, pixels}), nd::zeros({rem})};
  }
}

void BatchPipeline::begin_epoch(std::uint64_t seed, int epoch, bool shuffle) {
  float* order = order_.data();
  const std::size_t n = data_->size();
  order_.engine().push(
      [=] {
        std::vector<std::uint32_t> idx(n);
        for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(i);
        if (shuffle) {
          std::uint64_t state =
              seed ^ (0xd1b54a32d192ed03ull * static_cast<std::uint64_t>(epoch + 1));
          for (std::size_t i = n - 1; i > 0; --i) {
            const std::size_t j = static_cast<std::size_t>(splitmix64(state) % (i + 1));
            std::swap(idx[i], idx[j]);
          }
        }
        for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<float>(idx[i]);
      },
      {}, {order_.var()}, {.lane = Lane::copy_to_device, .name = "shuffle"});
}

BatchPipeline::Batch BatchPipeline::assemble(std::size_t k) {
  if (k >= batches()) {
    throw Error("BatchPipeline::assemble: batch " + std::to_string(k) + " of " +
                std::to_string(batches()));
  }
  const std::size_t first = k * batch_;
  const std::size_t rows = std::min(batch_, data_->size() - first);
  const Batch& slot = rows == batch_ || !tail_.x.defined() ? slots_[k % slots_.size()] : tail_;
  const float* order = order_.data();
  float* x = slot.x.data();
  float* y = slot.y.data();
  const float scale = 1.0f / (255.0f * norm_.stddev);
  const float shift = -norm_.mean / norm_.stddev;
  std::shared_ptr<const Dataset> data = data_;
  order_.engine().push(
      [=] {
        const std::size_t pixels = data->images.pixels_per_image();
        const std::uint8_t* images = data->images.pixels.data();
        for (std::size_t r = 0; r < rows; ++r) {
          const auto i = static_cast<std::size_t>(order[first + r]);
          // Local __restrict pointers let g++ vectorize the conversion (at -O3, CMakeLists.txt).
          const std::uint8_t* __restrict src = images + i * pixels;
          float* __restrict dst = x + r * pixels;
          for (std::size_t p = 0; p < pixels; ++p) {
            dst[p] = static_cast<float>(src[p]) * scale + shift;
          }
          y[r] = static_cast<float>(data->labels[i]);
        }
      },
      {order_.var()}, {slot.x.var(), slot.y.var()},
      {.lane = Lane::copy_to_device, .name = "assemble_batch"});
  return slot;
}

}  // namespace depengine::fashion_mnist
