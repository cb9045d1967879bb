// The data loader's batch gather (depengine/ops/gather.h).
#include "depengine/ops/gather.h"

namespace depengine::ops::cpu {
namespace {

// One channel's `count` values, read `stride` apart from src, converted into dst. The
// per-value steps are NumPy's: float(v), v / divisor, (v − mean) / stddev (no fused
// multiply-add can form: only divisions and a subtraction).
template <class T>
void convert(const T* __restrict src, std::size_t stride, float* __restrict dst,
             std::size_t count, float divisor, bool normalize, float mean, float stddev) {
  if (stride == 1 && divisor > 0.0f && normalize) {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = (static_cast<float>(src[i]) / divisor - mean) / stddev;
    }
  } else if (stride == 1 && divisor > 0.0f) {
    for (std::size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]) / divisor;
  } else if (stride == 1 && normalize) {
    for (std::size_t i = 0; i < count; ++i) dst[i] = (static_cast<float>(src[i]) - mean) / stddev;
  } else if (stride == 1) {
    for (std::size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      float v = static_cast<float>(src[i * stride]);
      if (divisor > 0.0f) v = v / divisor;
      if (normalize) v = (v - mean) / stddev;
      dst[i] = v;
    }
  }
}

template <class T>
void gather(const GatherRows& g, const T* table, const std::int64_t* indices, std::size_t n,
            float* out) {
  if (g.row_elements == 0) return;
  const std::size_t per_channel = g.row_elements / g.channels;
  for (std::size_t r = 0; r < n; ++r) {
    const T* row = table + static_cast<std::size_t>(indices[r]) * g.row_elements;
    float* dst = out + r * g.row_elements;
    for (std::size_t c = 0; c < g.channels; ++c) {
      const std::size_t k = g.norm_values == 1 ? 0 : c;
      const float mean = g.norm_values ? g.mean[k] : 0.0f;
      const float stddev = g.norm_values ? g.stddev[k] : 1.0f;
      // (H, W, C) rows: channel c is every C-th value from c; else a contiguous block.
      const T* src = g.hwc_channels ? row + c : row + c * per_channel;
      convert(src, g.hwc_channels ? g.hwc_channels : 1, dst + c * per_channel, per_channel,
              g.divisor, g.norm_values != 0, mean, stddev);
    }
  }
}

}  // namespace

void gather_rows(const GatherRows& g, const std::int64_t* indices, std::size_t n, float* out) {
  if (g.u8) {
    gather(g, static_cast<const std::uint8_t*>(g.table), indices, n, out);
  } else {
    gather(g, static_cast<const float*>(g.table), indices, n, out);
  }
}

}  // namespace depengine::ops::cpu
