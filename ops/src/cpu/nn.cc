// CPU kernels for training: row-parallel softmax cross-entropy, elementwise ReLU gradient
// and SGD update, and a correct-prediction count.
#include "depengine/ops/nn.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "depengine/error.h"
#include "parallel.h"

namespace depengine::ops::cpu {
namespace {

// Rows per task of a row-parallel kernel: a 256-row batch of 10 classes is one task, wide
// rows spread.
constexpr std::size_t kRowElements = 16 * 1024;

std::size_t row_grain(std::size_t n) {
  return std::max<std::size_t>(1, kRowElements / std::max<std::size_t>(n, 1));
}

std::size_t label_index(float label, std::size_t n, std::size_t row) {
  if (!(label >= 0.0f) || label >= static_cast<float>(n) || label != std::floor(label)) {
    // The shortest text that reads back as the label: std::to_string printed 1e-7 as
    // "0.000000", a valid index.
    char text[32];
    const std::string given(text, std::to_chars(text, text + sizeof text, label).ptr);
    throw Error("softmax_xent: label " + given + " of row " +
                std::to_string(row) + " is not a class index in [0, " + std::to_string(n) + ")");
  }
  return static_cast<std::size_t>(label);
}

}  // namespace

void softmax_xent(const RunContext&, const float* logits, const float* labels, std::size_t m,
                  std::size_t n, float* loss, float* grad) {
  if (m == 0) {
    loss[0] = 0.0f;
    return;
  }
  for (std::size_t r = 0; r < m; ++r) label_index(labels[r], n, r);
  std::vector<double> row_loss(m);
  const float inv_m = 1.0f / static_cast<float>(m);
  detail::parallel_chunks(m, row_grain(n), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* z = logits + r * n;
      float* g = grad + r * n;
      float zmax = z[0];
      for (std::size_t j = 1; j < n; ++j) zmax = std::max(zmax, z[j]);
      double denom = 0.0;
      for (std::size_t j = 0; j < n; ++j) {
        g[j] = std::exp(z[j] - zmax);
        denom += g[j];
      }
      const float inv = static_cast<float>(1.0 / denom);
      for (std::size_t j = 0; j < n; ++j) g[j] *= inv * inv_m;
      const std::size_t y = static_cast<std::size_t>(labels[r]);
      g[y] -= inv_m;
      row_loss[r] = std::log(denom) - static_cast<double>(z[y] - zmax);
    }
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
  loss[0] = static_cast<float>(total / static_cast<double>(m));
}

void bias_activation(const RunContext&, float* c, const float* bias, std::size_t m,
                     std::size_t n, bool relu) {
  detail::parallel_chunks(m, row_grain(n), [=](std::size_t r0, std::size_t r1) {
    const float* __restrict b = bias;
    for (std::size_t r = r0; r < r1; ++r) {
      float* __restrict row = c + r * n;
      if (relu) {
        for (std::size_t j = 0; j < n; ++j) {
          const float v = row[j] + b[j];
          row[j] = v > 0.0f ? v : 0.0f;
        }
      } else {
        for (std::size_t j = 0; j < n; ++j) row[j] += b[j];
      }
    }
  });
}

// The elementwise loops below take their pointers as local __restrict copies and load
// both sides of a select unconditionally: otherwise g++ reloads the pointers through the
// lambda's references every iteration, vectorizes nothing, and relu_backward's select is a
// branch that mispredicts on half the elements (~3 ns per element in the MLP step).
void relu_backward(const RunContext&, const float* y, const float* dy, float* dx, std::size_t n) {
  detail::parallel_chunks(n, detail::kElementGrain, [y, dy, dx](std::size_t i0, std::size_t i1) {
    const float* __restrict ys = y + i0;
    const float* __restrict dys = dy + i0;
    float* __restrict out = dx + i0;
    const std::size_t len = i1 - i0;
    for (std::size_t i = 0; i < len; ++i) {
      const float d = dys[i];  // loaded unconditionally, so the select is branch-free
      out[i] = ys[i] > 0.0f ? d : 0.0f;
    }
  });
}

void sgd_update(const RunContext&, float* w, const float* g, std::size_t n, float lr,
                float weight_decay) {
  detail::parallel_chunks(n, detail::kElementGrain, [=](std::size_t i0, std::size_t i1) {
    float* __restrict ws = w + i0;
    const float* __restrict gs = g + i0;
    const std::size_t len = i1 - i0;
    for (std::size_t i = 0; i < len; ++i) ws[i] -= lr * (gs[i] + weight_decay * ws[i]);
  });
}

namespace {

std::size_t correct_rows(const float* logits, const float* labels, std::size_t m,
                         std::size_t n) {
  std::size_t correct = 0;
  for (std::size_t r = 0; r < m && n > 0; ++r) {
    const float* z = logits + r * n;
    std::size_t best = 0;
    for (std::size_t j = 1; j < n; ++j) {
      if (z[j] > z[best] || (std::isnan(z[j]) && !std::isnan(z[best]))) best = j;
    }
    if (static_cast<float>(best) == labels[r]) ++correct;
  }
  return correct;
}

}  // namespace

void count_correct(const RunContext&, const float* logits, const float* labels, std::size_t m,
                   std::size_t n, float* out) {
  out[0] = static_cast<float>(correct_rows(logits, labels, m, n));
}

void add_count_correct(const RunContext&, const float* logits, const float* labels,
                       std::size_t m, std::size_t n, float* out) {
  out[0] = static_cast<float>(static_cast<double>(out[0]) +
                              static_cast<double>(correct_rows(logits, labels, m, n)));
}

void add_sum(const RunContext&, const float* x, std::size_t n, float* out) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  out[0] = static_cast<float>(static_cast<double>(out[0]) + s);
}

}  // namespace depengine::ops::cpu
