// CPU batch normalization: channels in fixed chunks; each channel's statistics summed in
// double by one task, in (outer, inner) order.
#include "depengine/ops/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "parallel.h"

namespace depengine::ops::cpu {
namespace {

// Channels per task: about 32 Ki elements.
std::size_t channel_grain(const BatchNorm& g) {
  return std::max<std::size_t>(1, detail::kElementGrain /
                                      std::max<std::size_t>(1, g.outer * g.inner));
}

// Calls f(o, row) for each of channel c's `outer` rows of `inner` elements.
template <class F>
void rows_of(const BatchNorm& g, std::size_t c, F&& f) {
  const std::size_t stride = g.channels * g.inner;
  for (std::size_t o = 0; o < g.outer; ++o) f(o * stride + c * g.inner);
}

template <class Body>
void per_channel(const BatchNorm& g, const Body& body) {
  detail::parallel_chunks(g.channels, channel_grain(g), [&](std::size_t c0, std::size_t c1) {
    for (std::size_t c = c0; c < c1; ++c) body(c);
  });
}

// y = x·scale + shift over channel c.
void affine(const BatchNorm& g, std::size_t c, const float* x, float scale, float shift,
            float* y) {
  rows_of(g, c, [&](std::size_t at) {
    const float* __restrict in = x + at;
    float* __restrict out = y + at;
    for (std::size_t i = 0; i < g.inner; ++i) out[i] = in[i] * scale + shift;
  });
}

struct Sums {
  double dy = 0.0, dy_xhat = 0.0;
};

// Σ dy and Σ dy·(x − mean)·inv_std over channel c.
Sums grad_sums(const BatchNorm& g, std::size_t c, const float* x, const float* dy, double mean,
               double inv_std) {
  Sums s;
  rows_of(g, c, [&](std::size_t at) {
    for (std::size_t i = 0; i < g.inner; ++i) {
      s.dy += dy[at + i];
      s.dy_xhat += static_cast<double>(dy[at + i]) * (static_cast<double>(x[at + i]) - mean);
    }
  });
  s.dy_xhat *= inv_std;
  return s;
}

}  // namespace

void batch_norm_train(const RunContext&, const BatchNorm& g, const float* x, const float* gamma,
                      const float* beta, float eps, float* y, float* mean, float* var,
                      float* inv_std) {
  const double count = static_cast<double>(g.outer * g.inner);
  per_channel(g, [&](std::size_t c) {
    double s = 0.0;
    rows_of(g, c, [&](std::size_t at) {
      for (std::size_t i = 0; i < g.inner; ++i) s += x[at + i];
    });
    const double m = count > 0 ? s / count : 0.0;
    double q = 0.0;
    rows_of(g, c, [&](std::size_t at) {
      for (std::size_t i = 0; i < g.inner; ++i) {
        const double d = x[at + i] - m;
        q += d * d;
      }
    });
    const double v = count > 0 ? q / count : 0.0;
    const double inv = 1.0 / std::sqrt(v + static_cast<double>(eps));
    mean[c] = static_cast<float>(m);
    var[c] = static_cast<float>(v);
    inv_std[c] = static_cast<float>(inv);
    const double scale = (gamma ? gamma[c] : 1.0) * inv;
    affine(g, c, x, static_cast<float>(scale), static_cast<float>(beta[c] - m * scale), y);
  });
}

void batch_norm_infer(const RunContext&, const BatchNorm& g, const float* x, const float* gamma,
                      const float* beta, const float* running_mean, const float* running_var,
                      float eps, float* y) {
  per_channel(g, [&](std::size_t c) {
    const double inv = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps);
    const double scale = (gamma ? gamma[c] : 1.0) * inv;
    affine(g, c, x, static_cast<float>(scale),
           static_cast<float>(beta[c] - running_mean[c] * scale), y);
  });
}

void batch_norm_backward(const RunContext&, const BatchNorm& g, const float* x, const float* dy,
                         const float* gamma, const float* mean, const float* inv_std, float* dx,
                         float* dgamma, float* dbeta) {
  const double count = static_cast<double>(g.outer * g.inner);
  per_channel(g, [&](std::size_t c) {
    const double m = mean[c], inv = inv_std[c];
    const Sums s = grad_sums(g, c, x, dy, m, inv);
    if (dgamma) dgamma[c] = static_cast<float>(s.dy_xhat);
    dbeta[c] = static_cast<float>(s.dy);
    if (count == 0) return;
    // dx = gamma·inv/M · (M·dy − Σdy − xhat·Σ(dy·xhat)), as a·dy + b·x + d per element.
    const double k = (gamma ? gamma[c] : 1.0) * inv;
    const double a = k;
    const double b = -k * inv * s.dy_xhat / count;
    const double d = -k * s.dy / count - b * m;
    rows_of(g, c, [&](std::size_t at) {
      const float fa = static_cast<float>(a), fb = static_cast<float>(b), fd = static_cast<float>(d);
      for (std::size_t i = 0; i < g.inner; ++i) dx[at + i] = fa * dy[at + i] + fb * x[at + i] + fd;
    });
  });
}

void batch_norm_update_running(const RunContext&, const BatchNorm& g, float momentum,
                               const float* mean, const float* var, float* running_mean,
                               float* running_var) {
  for (std::size_t c = 0; c < g.channels; ++c) {
    running_mean[c] = momentum * running_mean[c] + (1.0f - momentum) * mean[c];
    running_var[c] = momentum * running_var[c] + (1.0f - momentum) * var[c];
  }
}

void batch_norm_infer_backward(const RunContext&, const BatchNorm& g, const float* x,
                               const float* dy, const float* gamma, const float* running_mean,
                               const float* running_var, float eps, float* dx, float* dgamma,
                               float* dbeta) {
  per_channel(g, [&](std::size_t c) {
    const double inv = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps);
    const Sums s = grad_sums(g, c, x, dy, running_mean[c], inv);
    if (dgamma) dgamma[c] = static_cast<float>(s.dy_xhat);
    dbeta[c] = static_cast<float>(s.dy);
    const float scale = static_cast<float>((gamma ? gamma[c] : 1.0) * inv);
    rows_of(g, c, [&](std::size_t at) {
      for (std::size_t i = 0; i < g.inner; ++i) dx[at + i] = scale * dy[at + i];
    });
  });
}

}  // namespace depengine::ops::cpu
