// CPU Philox4x32-10. Element i of a call comes from block counter + i/4, word i%4, so the
// parallel chunks (multiples of four elements) can be computed in any order.
#include "depengine/ops/random.h"

#include <cmath>
#include <numbers>

#include "parallel.h"

namespace depengine::ops {
namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32(const std::array<std::uint32_t, 4>& counter,
                                        const std::array<std::uint32_t, 2>& key) noexcept {
  std::uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  std::uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter) noexcept {
  return philox4x32({static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
                     0u, 0u},
                    {static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32)});
}

namespace cpu {
namespace {

// Elements per task; a multiple of four so that tasks start on block boundaries.
constexpr std::size_t kGrain = 16 * 1024;

template <class Block>
void generate(std::uint64_t counter, float* out, std::size_t n, const Block& block) {
  detail::parallel_chunks(n, kGrain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; i += 4) {
      float v[4];
      block(counter + i / 4, v);
      for (std::size_t j = 0; j < 4 && i + j < e; ++j) out[i + j] = v[j];
    }
  });
}

}  // namespace

void random_uniform(const RunContext&, std::uint64_t key, std::uint64_t counter, float low,
                    float high, float* out, std::size_t n) {
  const float span = high - low;
  generate(counter, out, n, [&](std::uint64_t c, float* v) {
    const auto w = philox4x32(key, c);
    for (int j = 0; j < 4; ++j) v[j] = low + span * philox_unit(w[j]);
  });
}

void random_normal(const RunContext&, std::uint64_t key, std::uint64_t counter, float mean,
                   float stddev, float* out, std::size_t n) {
  constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;
  generate(counter, out, n, [&](std::uint64_t c, float* v) {
    const auto w = philox4x32(key, c);
    for (int j = 0; j < 4; j += 2) {
      // u1 in (0, 1] keeps the log finite.
      const float u1 = philox_unit(w[j]) + 1.0f / 16777216.0f;
      const float u2 = philox_unit(w[j + 1]);
      const float r = std::sqrt(-2.0f * std::log(u1));
      v[j] = mean + stddev * r * std::cos(kTwoPi * u2);
      v[j + 1] = mean + stddev * r * std::sin(kTwoPi * u2);
    }
  });
}

}  // namespace cpu
}  // namespace depengine::ops
