// CPU reductions. Whole-array sums: fixed blocks summed in double (four interleaved
// accumulators, always combined the same way), block results added in block order.
// Axis reductions: each output element folds its `len` inputs in index order. Neither
// depends on how the blocks are spread over threads.
#include "depengine/ops/reduce.h"

#include <cmath>
#include <limits>
#include <vector>

#include "parallel.h"

namespace depengine::ops {

const char* name(Reduce op) noexcept {
  switch (op) {
    case Reduce::sum:
      return "sum";
    case Reduce::mean:
      return "mean";
    case Reduce::max:
      return "max";
    case Reduce::argmax:
      return "argmax";
  }
  return "reduce";
}

namespace cpu {
namespace {

constexpr std::size_t kBlock = 16 * 1024;

double block_sum(const float* a, std::size_t n) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s[0] += a[i];
    s[1] += a[i + 1];
    s[2] += a[i + 2];
    s[3] += a[i + 3];
  }
  for (; i < n; ++i) s[i % 4] += a[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// True when x should replace the running maximum `best` (NaN wins and stays).
bool beats(float x, float best) { return x > best || (std::isnan(x) && !std::isnan(best)); }

struct MaxAt {
  float value;
  std::size_t index;
};

MaxAt block_max(const float* a, std::size_t n, std::size_t offset) {
  MaxAt m{a[0], offset};
  for (std::size_t i = 1; i < n; ++i) {
    if (beats(a[i], m.value)) m = {a[i], offset + i};
  }
  return m;
}

}  // namespace

void reduce_all(const RunContext&, Reduce op, const float* a, std::size_t n, float* out) {
  const std::size_t blocks = detail::ceil_div(n, kBlock);
  if (op == Reduce::sum || op == Reduce::mean) {
    std::vector<double> part(blocks);
    detail::parallel_chunks(n, kBlock, [&](std::size_t b, std::size_t e) {
      part[b / kBlock] = block_sum(a + b, e - b);
    });
    double s = 0.0;
    for (double p : part) s += p;
    if (op == Reduce::mean) s /= static_cast<double>(n);
    *out = n == 0 && op == Reduce::mean ? std::numeric_limits<float>::quiet_NaN()
                                        : static_cast<float>(s);
    return;
  }
  std::vector<MaxAt> part(blocks);
  detail::parallel_chunks(n, kBlock, [&](std::size_t b, std::size_t e) {
    part[b / kBlock] = block_max(a + b, e - b, b);
  });
  MaxAt m = part[0];
  for (std::size_t i = 1; i < blocks; ++i) {
    if (beats(part[i].value, m.value)) m = part[i];
  }
  *out = op == Reduce::max ? m.value : static_cast<float>(m.index);
}

void reduce_axis(const RunContext&, Reduce op, const float* a, std::size_t outer,
                 std::size_t len, std::size_t inner, float* out) {
  const std::size_t outputs = outer * inner;
  if (outputs == 0) return;
  // Outputs per task: about kBlock inputs' worth of work.
  const std::size_t grain = std::max<std::size_t>(1, kBlock / std::max<std::size_t>(len, 1));
  const double scale = op == Reduce::mean ? 1.0 / static_cast<double>(len) : 1.0;
  detail::parallel_chunks(outputs, grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t j = b; j < e; ++j) {
      const std::size_t o = j / inner, i = j % inner;
      const float* p = a + o * len * inner + i;
      if (op == Reduce::sum || op == Reduce::mean) {
        double s = 0.0;
        if (inner == 1) {
          s = block_sum(p, len);
        } else {
          for (std::size_t k = 0; k < len; ++k) s += p[k * inner];
        }
        out[j] = len == 0 && op == Reduce::mean ? std::numeric_limits<float>::quiet_NaN()
                                                : static_cast<float>(s * scale);
      } else {
        MaxAt m{p[0], 0};
        for (std::size_t k = 1; k < len; ++k) {
          if (beats(p[k * inner], m.value)) m = {p[k * inner], k};
        }
        out[j] = op == Reduce::max ? m.value : static_cast<float>(m.index);
      }
    }
  });
}

}  // namespace cpu
}  // namespace depengine::ops
