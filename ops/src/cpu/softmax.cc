// CPU softmax, log-softmax and NLL: outer blocks (rows) in fixed chunks, each line by one
// task.
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

void softmax_forward(const RunContext&, bool log, const float* x, std::size_t outer,
                     std::size_t len, std::size_t inner, float* y) {
  if (len == 0 || inner == 0) return;
  const std::size_t plane = len * inner;
  detail::parallel_chunks(outer, row_grain(plane), [=](std::size_t o0, std::size_t o1) {
    for (std::size_t o = o0; o < o1; ++o) {
      for (std::size_t i = 0; i < inner; ++i) {
        const float* z = x + o * plane + i;
        float* out = y + o * plane + i;
        float zmax = z[0];
        for (std::size_t j = 1; j < len; ++j) zmax = std::max(zmax, z[j * inner]);
        double denom = 0.0;
        for (std::size_t j = 0; j < len; ++j) {
          denom += std::exp(static_cast<double>(z[j * inner] - zmax));
        }
        if (log) {
          const float shift = zmax + static_cast<float>(std::log(denom));
          for (std::size_t j = 0; j < len; ++j) out[j * inner] = z[j * inner] - shift;
        } else {
          const double inv = 1.0 / denom;
          for (std::size_t j = 0; j < len; ++j) {
            out[j * inner] =
                static_cast<float>(std::exp(static_cast<double>(z[j * inner] - zmax)) * inv);
          }
        }
      }
    }
  });
}

void softmax_backward(const RunContext&, bool log, const float* y, const float* dy,
                      std::size_t outer, std::size_t len, std::size_t inner, float* dx) {
  if (len == 0 || inner == 0) return;
  const std::size_t plane = len * inner;
  detail::parallel_chunks(outer, row_grain(plane), [=](std::size_t o0, std::size_t o1) {
    for (std::size_t o = o0; o < o1; ++o) {
      for (std::size_t i = 0; i < inner; ++i) {
        const std::size_t base = o * plane + i;
        const float* yr = y + base;
        const float* dr = dy + base;
        float* out = dx + base;
        double s = 0.0;
        for (std::size_t j = 0; j < len; ++j) {
          const std::size_t e = j * inner;
          s += log ? static_cast<double>(dr[e]) : static_cast<double>(dr[e]) * yr[e];
        }
        const float sum = static_cast<float>(s);
        for (std::size_t j = 0; j < len; ++j) {
          const std::size_t e = j * inner;
          out[e] = log ? dr[e] - std::exp(yr[e]) * sum : yr[e] * (dr[e] - sum);
        }
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
