// CPU softmax, log-softmax and NLL: rows in fixed chunks, each row by one task.
#include "depengine/ops/softmax.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "depengine/error.h"
#include "parallel.h"

namespace depengine::ops::cpu {
namespace {

constexpr std::size_t kRowElements = 16 * 1024;

std::size_t row_grain(std::size_t cols) {
  return std::max<std::size_t>(1, kRowElements / std::max<std::size_t>(cols, 1));
}

void check_labels(const char* op, const float* labels, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float label = labels[r];
    if (!(label >= 0.0f) || label >= static_cast<float>(cols) || label != std::floor(label)) {
      char text[32];
      const std::string given(text, std::to_chars(text, text + sizeof text, label).ptr);
      throw Error(std::string(op) + ": label " + given + " of row " + std::to_string(r) +
                  " is not a class index in [0, " + std::to_string(cols) + ")");
    }
  }
}

}  // namespace

void softmax_forward(const RunContext&, bool log, const float* x, std::size_t rows,
                     std::size_t cols, float* y) {
  if (cols == 0) return;
  detail::parallel_chunks(rows, row_grain(cols), [=](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* z = x + r * cols;
      float* out = y + r * cols;
      const float zmax = *std::max_element(z, z + cols);
      double denom = 0.0;
      for (std::size_t j = 0; j < cols; ++j) denom += std::exp(static_cast<double>(z[j] - zmax));
      if (log) {
        const float shift = zmax + static_cast<float>(std::log(denom));
        for (std::size_t j = 0; j < cols; ++j) out[j] = z[j] - shift;
      } else {
        const double inv = 1.0 / denom;
        for (std::size_t j = 0; j < cols; ++j) {
          out[j] = static_cast<float>(std::exp(static_cast<double>(z[j] - zmax)) * inv);
        }
      }
    }
  });
}

void softmax_backward(const RunContext&, bool log, const float* y, const float* dy,
                      std::size_t rows, std::size_t cols, float* dx) {
  detail::parallel_chunks(rows, row_grain(cols), [=](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* yr = y + r * cols;
      const float* dr = dy + r * cols;
      float* out = dx + r * cols;
      double s = 0.0;
      for (std::size_t j = 0; j < cols; ++j) {
        s += log ? static_cast<double>(dr[j]) : static_cast<double>(dr[j]) * yr[j];
      }
      const float sum = static_cast<float>(s);
      for (std::size_t j = 0; j < cols; ++j) {
        out[j] = log ? dr[j] - std::exp(yr[j]) * sum : yr[j] * (dr[j] - sum);
      }
    }
  });
}

void nll_loss_forward(const RunContext&, const float* logp, const float* labels,
                      std::size_t rows, std::size_t cols, float* loss) {
  check_labels("nll_loss", labels, rows, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    loss[r] = -logp[r * cols + static_cast<std::size_t>(labels[r])];
  }
}

void nll_loss_backward(const RunContext&, const float* dloss, const float* labels,
                       std::size_t rows, std::size_t cols, float* dlogp) {
  check_labels("nll_loss_backward", labels, rows, cols);
  detail::parallel_chunks(rows, row_grain(cols), [=](std::size_t r0, std::size_t r1) {
    std::fill(dlogp + r0 * cols, dlogp + r1 * cols, 0.0f);
    for (std::size_t r = r0; r < r1; ++r) {
      dlogp[r * cols + static_cast<std::size_t>(labels[r])] = -dloss[r];
    }
  });
}

}  // namespace depengine::ops::cpu
