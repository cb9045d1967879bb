// depengine/ops/gather.h — a data loader's batch gather: rows of a host table picked by
// index and converted to float32 in one pass, with ToTensor's layout change and division and
// Normalize's per-channel shift and scale (MXNet Gluon's vision transforms).
//
//   ops::cpu::GatherRows g{.table = pixels, .u8 = true, .row_elements = 784,
//                          .hwc_channels = 1, .divisor = 255.0f};
//   ops::cpu::gather_rows(g, indices, n, out);              // out: n × 784 floats
//
// Each value is computed in float32 in the order NumPy computes the same transforms
// (float(v), then / divisor, then (· − mean) / stddev), so the results are NumPy's bits.
// Single-threaded; thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>

namespace depengine::ops::cpu {

struct GatherRows {
  // `rows` × `row_elements` values, row-major: uint8 when `u8`, else float32.
  const void* table = nullptr;
  bool u8 = false;
  std::size_t row_elements = 0;
  // > 0: each row is (H, W, C) with C = hwc_channels and is written as (C, H, W).
  std::size_t hwc_channels = 0;
  // > 0: every value is divided by it.
  float divisor = 0.0f;
  // > 0: value = (value − mean[c]) / stddev[c], with c the channel (the written row's first
  // axis, `channels` of them) when norm_values == channels, or c = 0 when norm_values == 1.
  std::size_t norm_values = 0;
  const float* mean = nullptr;
  const float* stddev = nullptr;
  // The written row's first-axis length (1 when the row has no channels): row_elements is a
  // multiple of it.
  std::size_t channels = 1;
};

// out[r] = converted table row indices[r], for r < n. Each index must be in [0, rows).
void gather_rows(const GatherRows& g, const std::int64_t* indices, std::size_t n, float* out);

}  // namespace depengine::ops::cpu
