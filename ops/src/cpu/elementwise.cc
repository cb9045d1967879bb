// CPU elementwise kernels: one loop per op, so each inner loop is a plain map the compiler
// can vectorize, split into fixed chunks run in parallel.
#include "depengine/ops/elementwise.h"

#include <algorithm>
#include <cmath>

#include "parallel.h"

namespace depengine::ops {
namespace {

// NumPy's npy_divmodf: the remainder takes the divisor's sign, and the quotient is rounded
// so that x == q · y + r as nearly as float allows.
inline float numpy_mod(float x, float y) noexcept {
  float r = std::fmod(x, y);
  if (y == 0.0f) return r;
  if (r != 0.0f) {
    if ((y < 0.0f) != (r < 0.0f)) r += y;
  } else {
    r = std::copysign(0.0f, y);
  }
  return r;
}

inline float numpy_floor_div(float x, float y) noexcept {
  if (y == 0.0f) return x / y;
  float r = std::fmod(x, y);
  float q = (x - r) / y;
  if (r != 0.0f && (y < 0.0f) != (r < 0.0f)) q -= 1.0f;
  if (q == 0.0f) return std::copysign(0.0f, x / y);
  float f = std::floor(q);
  if (q - f > 0.5f) f += 1.0f;
  return f;
}

// Calls f with a functor for `op`, so each op gets its own inlined loop.
template <class F>
void with_unary(Unary op, F&& f) {
  switch (op) {
    case Unary::neg:
      return f([](float x) { return -x; });
    case Unary::exp:
      return f([](float x) { return std::exp(x); });
    case Unary::log:
      return f([](float x) { return std::log(x); });
    case Unary::relu:
      return f([](float x) { return x > 0.0f ? x : 0.0f; });
    case Unary::sigmoid:
      return f([](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    case Unary::tanh:
      return f([](float x) { return std::tanh(x); });
    case Unary::sqrt:
      return f([](float x) { return std::sqrt(x); });
    case Unary::abs:
      return f([](float x) { return std::fabs(x); });
    case Unary::square:
      return f([](float x) { return x * x; });
  }
}

template <class F>
void with_binary(Binary op, F&& f) {
  switch (op) {
    case Binary::add:
      return f([](float x, float y) { return x + y; });
    case Binary::sub:
      return f([](float x, float y) { return x - y; });
    case Binary::mul:
      return f([](float x, float y) { return x * y; });
    case Binary::div:
      return f([](float x, float y) { return x / y; });
    case Binary::pow:
      return f([](float x, float y) { return std::pow(x, y); });
    case Binary::maximum:
      return f([](float x, float y) { return std::isnan(x) || x > y ? x : y; });
    case Binary::minimum:
      return f([](float x, float y) { return std::isnan(x) || x < y ? x : y; });
    case Binary::mod:
      return f([](float x, float y) { return numpy_mod(x, y); });
    case Binary::floor_div:
      return f([](float x, float y) { return numpy_floor_div(x, y); });
    case Binary::equal:
      return f([](float x, float y) { return x == y ? 1.0f : 0.0f; });
    case Binary::not_equal:
      return f([](float x, float y) { return x != y ? 1.0f : 0.0f; });
    case Binary::less:
      return f([](float x, float y) { return x < y ? 1.0f : 0.0f; });
    case Binary::less_equal:
      return f([](float x, float y) { return x <= y ? 1.0f : 0.0f; });
    case Binary::greater:
      return f([](float x, float y) { return x > y ? 1.0f : 0.0f; });
    case Binary::greater_equal:
      return f([](float x, float y) { return x >= y ? 1.0f : 0.0f; });
  }
}

}  // namespace

const char* name(Unary op) noexcept {
  switch (op) {
    case Unary::neg:
      return "neg";
    case Unary::exp:
      return "exp";
    case Unary::log:
      return "log";
    case Unary::relu:
      return "relu";
    case Unary::sigmoid:
      return "sigmoid";
    case Unary::tanh:
      return "tanh";
    case Unary::sqrt:
      return "sqrt";
    case Unary::abs:
      return "abs";
    case Unary::square:
      return "square";
  }
  return "unary";
}

const char* name(Binary op) noexcept {
  switch (op) {
    case Binary::add:
      return "add";
    case Binary::sub:
      return "sub";
    case Binary::mul:
      return "mul";
    case Binary::div:
      return "div";
    case Binary::pow:
      return "pow";
    case Binary::maximum:
      return "maximum";
    case Binary::minimum:
      return "minimum";
    case Binary::mod:
      return "mod";
    case Binary::floor_div:
      return "floor_divide";
    case Binary::equal:
      return "equal";
    case Binary::not_equal:
      return "not_equal";
    case Binary::less:
      return "less";
    case Binary::less_equal:
      return "less_equal";
    case Binary::greater:
      return "greater";
    case Binary::greater_equal:
      return "greater_equal";
  }
  return "binary";
}

float apply(Unary op, float x) noexcept {
  float r = 0.0f;
  with_unary(op, [&](auto f) { r = f(x); });
  return r;
}

float apply(Binary op, float x, float y) noexcept {
  float r = 0.0f;
  with_binary(op, [&](auto f) { r = f(x, y); });
  return r;
}

namespace cpu {

using detail::kElementGrain;
using detail::parallel_chunks;

void unary(const RunContext&, Unary op, const float* a, float* out, std::size_t n) {
  with_unary(op, [&](auto f) {
    parallel_chunks(n, kElementGrain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) out[i] = f(a[i]);
    });
  });
}

void binary(const RunContext&, Binary op, const float* a, const float* b, float* out,
            std::size_t n) {
  with_binary(op, [&](auto f) {
    parallel_chunks(n, kElementGrain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) out[i] = f(a[i], b[i]);
    });
  });
}

void binary_scalar(const RunContext&, Binary op, const float* a, float s, bool scalar_first,
                   float* out, std::size_t n) {
  with_binary(op, [&](auto f) {
    parallel_chunks(n, kElementGrain, [&](std::size_t lo, std::size_t hi) {
      if (scalar_first) {
        for (std::size_t i = lo; i < hi; ++i) out[i] = f(s, a[i]);
      } else {
        for (std::size_t i = lo; i < hi; ++i) out[i] = f(a[i], s);
      }
    });
  });
}

void binary_broadcast(const RunContext&, Binary op, const float* a, const float* b, float* out,
                      const Broadcast& bc) {
  if (bc.ndim == 0) {
    out[0] = apply(op, a[0], b[0]);
    return;
  }
  const int last = bc.ndim - 1;
  const std::size_t cols = bc.shape[last];
  std::size_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= bc.shape[d];
  if (rows == 0 || cols == 0) return;
  const std::size_t sa = bc.a_stride[last], sb = bc.b_stride[last];
  // Rows per task: about kElementGrain elements, at least one row.
  const std::size_t grain = std::max<std::size_t>(1, kElementGrain / cols);
  with_binary(op, [&](auto f) {
    parallel_chunks(rows, grain, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        // Offsets of row r's first element in a and b: decompose r over the outer dims.
        std::size_t rem = r, oa = 0, ob = 0;
        for (int d = last - 1; d >= 0; --d) {
          const std::size_t idx = rem % bc.shape[d];
          rem /= bc.shape[d];
          oa += idx * bc.a_stride[d];
          ob += idx * bc.b_stride[d];
        }
        const float* pa = a + oa;
        const float* pb = b + ob;
        float* po = out + r * cols;
        if (sa == 1 && sb == 1) {
          for (std::size_t i = 0; i < cols; ++i) po[i] = f(pa[i], pb[i]);
        } else if (sa == 1) {
          const float y = pb[0];
          for (std::size_t i = 0; i < cols; ++i) po[i] = f(pa[i], y);
        } else if (sb == 1) {
          const float x = pa[0];
          for (std::size_t i = 0; i < cols; ++i) po[i] = f(x, pb[i]);
        } else {
          po[0] = f(pa[0], pb[0]);
          std::fill(po + 1, po + cols, po[0]);
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace depengine::ops
