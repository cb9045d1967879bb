// depengine/ops/random.h — counter-based random numbers (Philox4x32-10, Salmon et al.,
// SC'11). Output element i is a pure function of (key, counter + i/4): any thread may
// compute any part, so results never depend on scheduling or thread count, and a GPU
// kernel using the same function produces the same uniforms.
//
//   std::uint64_t blocks = depengine::ops::philox_blocks(n);
//   depengine::ops::cpu::random_uniform(ctx, key, counter, 0.f, 1.f, out, n);
//   counter += blocks;  // the next call continues the stream
//
// Thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "depengine/stream.h"

namespace depengine::ops {

// One Philox4x32-10 block: four 32-bit words from a 128-bit counter and a 64-bit key,
// least significant word first (Random123's layout, so its known-answer vectors apply).
std::array<std::uint32_t, 4> philox4x32(const std::array<std::uint32_t, 4>& counter,
                                        const std::array<std::uint32_t, 2>& key) noexcept;

// The block the kernels use for (key, counter): the counter's high 64 bits are zero.
std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter) noexcept;

// Counter values consumed by n outputs: one block per four numbers, ⌈n / 4⌉ (computed so
// that it does not wrap for n near SIZE_MAX).
constexpr std::uint64_t philox_blocks(std::size_t n) noexcept { return n / 4 + (n % 4 != 0); }

// A word's top 24 bits as a float in [0, 1).
constexpr float philox_unit(std::uint32_t word) noexcept {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

namespace cpu {

// out[i] = low + (high - low) · u_i, u_i uniform in [0, 1).
void random_uniform(const RunContext& ctx, std::uint64_t key, std::uint64_t counter, float low,
                    float high, float* out, std::size_t n);

// out[i] = mean + stddev · z_i, z_i standard normal (Box–Muller on each pair of words).
void random_normal(const RunContext& ctx, std::uint64_t key, std::uint64_t counter, float mean,
                   float stddev, float* out, std::size_t n);

}  // namespace cpu
}  // namespace depengine::ops
