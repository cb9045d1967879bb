// CPU kernels of depengine/ops/loss.h: row-parallel, max-shifted softmax cross-entropy.
#include "depengine/ops/loss.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "depengine/error.h"
#include "parallel.h"

namespace depengine::ops::cpu {
namespace {

constexpr std::size_t kRowElements = 16 * 1024;

std::size_t row_grain(std::size_t n) {
  return std::max<std::size_t>(1, kRowElements / std::max<std::size_t>(n, 1));
}

void check_labels(const float* labels, std::size_t m, std::size_t n) {
  for (std::size_t r = 0; r < m; ++r) {
    const float label = labels[r];
    if (!(label >= 0.0f) || label >= static_cast<float>(n) || label != std::floor(label)) {
      char text[32];
      const std::string given(text, std::to_chars(text, text + sizeof text, label).ptr);
      throw Error("softmax_cross_entropy: label " + given + " of sample " + std::to_string(r) +
                  " is not a class index in [0, " + std::to_string(n) + ")");
    }
  }
}

// The row's max and log of the sum of exp(z - max), in double.
std::pair<float, double> log_sum_exp(const float* z, std::size_t n) {
  float zmax = z[0];
  for (std::size_t j = 1; j < n; ++j) zmax = std::max(zmax, z[j]);
  double denom = 0.0;
  for (std::size_t j = 0; j < n; ++j) denom += std::exp(static_cast<double>(z[j] - zmax));
  return {zmax, std::log(denom)};
}

}  // namespace

void softmax_xent_rows(const RunContext&, const float* logits, const float* labels,
                       std::size_t m, std::size_t n, bool from_logits, float* loss) {
  check_labels(labels, m, n);
  detail::parallel_chunks(m, row_grain(n), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* z = logits + r * n;
      const std::size_t y = static_cast<std::size_t>(labels[r]);
      if (from_logits) {
        loss[r] = -z[y];
        continue;
      }
      const auto [zmax, lse] = log_sum_exp(z, n);
      loss[r] = static_cast<float>(lse - static_cast<double>(z[y] - zmax));
    }
  });
}

void softmax_xent_rows_backward(const RunContext&, const float* logits, const float* labels,
                                const float* dloss, std::size_t m, std::size_t n,
                                bool from_logits, float* grad) {
  check_labels(labels, m, n);
  detail::parallel_chunks(m, row_grain(n), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* z = logits + r * n;
      float* g = grad + r * n;
      const float d = dloss[r];
      const std::size_t y = static_cast<std::size_t>(labels[r]);
      if (from_logits) {
        std::fill_n(g, n, 0.0f);
        g[y] = -d;
        continue;
      }
      const auto [zmax, lse] = log_sum_exp(z, n);
      for (std::size_t j = 0; j < n; ++j) {
        g[j] = static_cast<float>(std::exp(static_cast<double>(z[j] - zmax) - lse)) * d;
      }
      g[y] -= d;
    }
  });
}

}  // namespace depengine::ops::cpu
