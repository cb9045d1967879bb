// CPU convolution in oneTBB tasks of a fixed number of images each. The forward pass of a
// stride-1 convolution with few taps (in_channels·kh·kw <= 64) and output rows at least 8
// wide runs as a direct convolution vectorized along the rows (AVX2 + FMA, chosen at run
// time); the rest lowers each image to columns (im2col) and calls cblas_sgemm (one BLAS
// thread). The weight gradient keeps one partial product per chunk and adds the partials in
// chunk order.
#include "depengine/ops/conv.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "depengine/error.h"
#include "depengine/ops/gemm.h"
#include "depengine/ops/size.h"
#include "parallel.h"
#include "window.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DEPENGINE_CONV_DIRECT 1
#endif

namespace depengine::ops {

namespace {

std::string dims(std::size_t a, std::size_t b) {
  std::string s(1, '(');  // appended piece by piece, as in window.h
  s += std::to_string(a);
  s += ", ";
  s += std::to_string(b);
  s += ')';
  return s;
}

}  // namespace

void check_conv2d(const char* op, const Conv2d& g) {
  const std::string o(op);
  if (g.in_channels == 0 || g.out_channels == 0) {
    throw Error(o + ": " + std::to_string(g.in_channels) + " input and " +
                std::to_string(g.out_channels) + " output channels; both must be at least 1");
  }
  detail::check_window(op, "kernel", g.height, g.width, g.kernel_h, g.kernel_w, g.stride_h,
                       g.stride_w, g.pad_h, g.pad_w);
  // One image's columns are (in_channels·kernel_h·kernel_w) × (out_h·out_w): both sides go
  // to sgemm as int, and the buffer must be allocatable.
  const std::size_t spatial = g.out_h() * g.out_w();
  const std::size_t taps = g.kernel_h * g.kernel_w;
  if (taps > kGemmMaxDim || g.in_channels > kGemmMaxDim / taps) {
    throw Error(o + ": in_channels · kernel_h · kernel_w = " + std::to_string(g.in_channels) +
                " · " + std::to_string(taps) + " exceeds " + std::to_string(kGemmMaxDim) +
                ", the largest size cblas_sgemm and cublasSgemm take (int)");
  }
  check_gemm(op, g.out_channels, spatial, g.in_channels * taps, g.in_channels * taps, spatial,
             spatial);
  if (g.in_channels * taps > kMaxFloats / spatial / 4) {
    throw Error(o + ": the columns of one image, " + dims(g.in_channels * taps, spatial) +
                ", are too large to allocate");
  }
}

namespace cpu {
namespace {

// Multiply-adds per task below which images are grouped into one task.
constexpr std::size_t kChunkFlops = std::size_t{1} << 20;
// The most partial weight gradients (one per chunk) the weight gradient keeps.
constexpr std::size_t kMaxPartials = 16;

void sgemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
           float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

struct Geometry {
  explicit Geometry(const Conv2d& conv)
      : g(conv),
        oh(conv.out_h()),
        ow(conv.out_w()),
        spatial(oh * ow),
        taps(conv.in_channels * conv.kernel_h * conv.kernel_w),
        in_image(conv.in_channels * conv.height * conv.width),
        out_image(conv.out_channels * spatial) {}

  // A 1×1 kernel with stride 1 and no padding: the image is its own column matrix.
  bool pointwise() const noexcept {
    return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
           g.pad_h == 0 && g.pad_w == 0;
  }
  std::size_t images_per_chunk() const noexcept {
    const std::size_t flops = std::max<std::size_t>(1, g.out_channels * spatial * taps);
    return std::clamp<std::size_t>(kChunkFlops / flops, 1, std::max<std::size_t>(g.batch, 1));
  }

  // The output columns [lo, hi) of row `ow` positions whose input column ow·s + j − pad is
  // inside [0, width).
  void valid_range(std::size_t j, std::size_t& lo, std::size_t& hi) const noexcept {
    const std::size_t s = g.stride_w;
    lo = g.pad_w > j ? detail::ceil_div(g.pad_w - j, s) : 0;
    // The last ow with ow·s + j − pad <= width − 1.
    const std::size_t reach = g.width - 1 + g.pad_w;
    hi = reach < j ? 0 : std::min(ow, (reach - j) / s + 1);
    lo = std::min(lo, hi);
  }

  const Conv2d& g;
  const std::size_t oh, ow, spatial, taps, in_image, out_image;
};

// col[(c·kh + i)·kw + j][y·ow + x] = image[c][y·sh + i − ph][x·sw + j − pw], 0 outside.
void im2col(const Geometry& geo, const float* image, float* col) {
  const Conv2d& g = geo.g;
  std::size_t row = 0;
  for (std::size_t c = 0; c < g.in_channels; ++c) {
    const float* plane = image + c * g.height * g.width;
    for (std::size_t i = 0; i < g.kernel_h; ++i) {
      for (std::size_t j = 0; j < g.kernel_w; ++j, ++row) {
        float* __restrict out = col + row * geo.spatial;
        std::size_t lo, hi;
        geo.valid_range(j, lo, hi);
        for (std::size_t y = 0; y < geo.oh; ++y, out += geo.ow) {
          const std::size_t iy = y * g.stride_h + i;  // + pad
          if (iy < g.pad_h || iy - g.pad_h >= g.height) {
            std::fill(out, out + geo.ow, 0.0f);
            continue;
          }
          const float* __restrict in = plane + (iy - g.pad_h) * g.width;
          std::fill(out, out + lo, 0.0f);
          if (g.stride_w == 1) {
            if (hi > lo) std::memcpy(out + lo, in + (lo + j - g.pad_w), (hi - lo) * sizeof(float));
          } else {
            for (std::size_t x = lo; x < hi; ++x) out[x] = in[x * g.stride_w + j - g.pad_w];
          }
          std::fill(out + hi, out + geo.ow, 0.0f);
        }
      }
    }
  }
}

// The adjoint of im2col: image = 0, then image[...] += col[...] for every tap, in row order.
void col2im(const Geometry& geo, const float* col, float* image) {
  const Conv2d& g = geo.g;
  std::fill(image, image + geo.in_image, 0.0f);
  std::size_t row = 0;
  for (std::size_t c = 0; c < g.in_channels; ++c) {
    float* plane = image + c * g.height * g.width;
    for (std::size_t i = 0; i < g.kernel_h; ++i) {
      for (std::size_t j = 0; j < g.kernel_w; ++j, ++row) {
        const float* __restrict in = col + row * geo.spatial;
        std::size_t lo, hi;
        geo.valid_range(j, lo, hi);
        for (std::size_t y = 0; y < geo.oh; ++y, in += geo.ow) {
          const std::size_t iy = y * g.stride_h + i;
          if (iy < g.pad_h || iy - g.pad_h >= g.height) continue;
          float* __restrict out = plane + (iy - g.pad_h) * g.width;
          // x >= lo keeps x·s + j − pad in [0, width).
          if (g.stride_w == 1) {
            float* __restrict o = out + (lo + j - g.pad_w);  // a contiguous run: vectorizes
            const float* __restrict src = in + lo;
            for (std::size_t x = 0; x < hi - lo; ++x) o[x] += src[x];
          } else {
            for (std::size_t x = lo; x < hi; ++x) out[x * g.stride_w + j - g.pad_w] += in[x];
          }
        }
      }
    }
  }
}

// A per-thread column buffer, reused across calls (a task runs no other task meanwhile:
// sgemm starts none).
float* columns(std::size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

#if DEPENGINE_CONV_DIRECT
// ---- direct convolution (stride 1, no padding), AVX2 + FMA -------------------------------
//
// out[k][y][x] = bias[k] + Σ over (c, i, j) in that order of w[k][c][i][j] · in[c][y+i][x+j]:
// one output row of NK channels × V vectors of 8 positions stays in registers while the
// taps stream past (NK·V ≤ 12 accumulators, V row loads and NK broadcasts per tap). A row
// whose width is not a multiple of 8 ends with a vector that overlaps the one before it; the
// overlapped positions are computed twice by the same operations, so they get the same bits.
// Each output element's sum has a fixed order, whatever the thread count.

struct Direct {
  std::size_t channels, height, width;  // the input planes
  std::size_t out_channels, kh, kw;
  std::size_t oh() const noexcept { return height - kh + 1; }
  std::size_t ow() const noexcept { return width - kw + 1; }
};

// The vectors' first columns for a row of `ow` >= 8 positions: 0, 8, 16, ..., and ow − 8
// last where 8 does not divide ow.
std::vector<std::size_t> vector_starts(std::size_t ow) {
  std::vector<std::size_t> xs;
  for (std::size_t x = 0; x + 8 <= ow; x += 8) xs.push_back(x);
  if (ow % 8 != 0) xs.push_back(ow - 8);
  return xs;
}

// KW: the kernel's width when it is known at compile time (3: its taps unroll), else 0.
template <int NK, int V, int KW>
__attribute__((target("avx2,fma"))) void direct_tile(const Direct& d, const float* in,
                                                      const float* w, const float* bias,
                                                      float* out, std::size_t y,
                                                      const std::size_t* xs) {
  const std::size_t wk = d.channels * d.kh * d.kw;  // one output channel's weights
  const std::size_t plane = d.oh() * d.ow();
  // The constant loops are unrolled before scalar replacement, so that acc lives in
  // registers (otherwise g++ 12 stores it back to the stack after every tap).
  __m256 acc[NK][V];
#pragma GCC unroll 16
  for (int a = 0; a < NK; ++a) {
    const __m256 b0 = bias ? _mm256_set1_ps(bias[a]) : _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[a][v] = b0;
  }
  const std::size_t x0 = xs[0], x1 = V > 1 ? xs[V > 1 ? 1 : 0] : 0, x2 = V > 2 ? xs[V > 2 ? 2 : 0] : 0;
  for (std::size_t c = 0; c < d.channels; ++c) {
    for (std::size_t i = 0; i < d.kh; ++i) {
      const float* row = in + (c * d.height + y + i) * d.width;
      const float* wr = w + (c * d.kh + i) * d.kw;
      const std::size_t kw = KW != 0 ? KW : d.kw;
#pragma GCC unroll 4
      for (std::size_t j = 0; j < kw; ++j) {
        __m256 xv[V];
        xv[0] = _mm256_loadu_ps(row + x0 + j);
        if constexpr (V > 1) xv[V > 1 ? 1 : 0] = _mm256_loadu_ps(row + x1 + j);
        if constexpr (V > 2) xv[V > 2 ? 2 : 0] = _mm256_loadu_ps(row + x2 + j);
#pragma GCC unroll 16
        for (int a = 0; a < NK; ++a) {
          const __m256 wv = _mm256_broadcast_ss(wr + a * wk + j);
#pragma GCC unroll 16
          for (int v = 0; v < V; ++v) acc[a][v] = _mm256_fmadd_ps(wv, xv[v], acc[a][v]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int a = 0; a < NK; ++a) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + a * plane + y * d.ow() + xs[v], acc[a][v]);
  }
}

// direct_tile<nk, V> for a run-time nk in [1, NK].
template <int V, int NK>
void direct_tile_n(int nk, const Direct& d, const float* in, const float* w, const float* bias,
                   float* out, std::size_t y, const std::size_t* xs) {
  if constexpr (NK > 0) {
    if (nk == NK) {
      if (d.kw == 3) return direct_tile<NK, V, 3>(d, in, w, bias, out, y, xs);
      return direct_tile<NK, V, 0>(d, in, w, bias, out, y, xs);
    }
    direct_tile_n<V, NK - 1>(nk, d, in, w, bias, out, y, xs);
  }
}

// Output channels per tile for V vectors: 12 accumulators where they fit.
constexpr int channels_per_tile(int v) { return v == 3 ? 4 : v == 2 ? 6 : 8; }

template <int V>
void direct_rows(const Direct& d, const float* in, const float* w, const float* bias,
                 float* out, const std::size_t* xs) {
  constexpr int kNk = channels_per_tile(V);
  const std::size_t wk = d.channels * d.kh * d.kw, plane = d.oh() * d.ow();
  for (std::size_t k0 = 0; k0 < d.out_channels; k0 += kNk) {
    const int nk = static_cast<int>(std::min<std::size_t>(kNk, d.out_channels - k0));
    const float* bk = bias ? bias + k0 : nullptr;
    for (std::size_t y = 0; y < d.oh(); ++y) {
      direct_tile_n<V, kNk>(nk, d, in, w + k0 * wk, bk, out + k0 * plane, y, xs);
    }
  }
}

// One image: in (channels, height, width) → out (out_channels, oh, ow), ow >= 8; w
// (out_channels, channels, kh, kw); bias (out_channels) or nullptr. The row's vectors go
// in groups of 3 (two of 2 where 4 are left).
void direct_conv(const Direct& d, const float* in, const float* w, const float* bias,
                 float* out) {
  const std::vector<std::size_t> xs = vector_starts(d.ow());
  for (std::size_t v = 0; v < xs.size();) {
    const std::size_t left = xs.size() - v;
    const std::size_t n = left == 4 ? 2 : std::min<std::size_t>(left, 3);
    if (n == 3) direct_rows<3>(d, in, w, bias, out, xs.data() + v);
    if (n == 2) direct_rows<2>(d, in, w, bias, out, xs.data() + v);
    if (n == 1) direct_rows<1>(d, in, w, bias, out, xs.data() + v);
    v += n;
  }
}

bool have_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

// Whether the direct convolution takes this geometry: stride 1, output rows of at least 8
// (the vector width), and at most kDirectTaps taps (in_channels·kh·kw). A GEMM's inner
// dimension is the taps: short, as for a first layer on 1 or 3 channels (9 or 27 taps), the
// product is bound by streaming the columns and the direct loop is faster (MNIST's conv
// 1→32: 1.5–2.0 ms against 2.3–2.6 ms of thread CPU time for a batch of 64); long, the two
// measured the same (32→64, 288 taps: 31–36 ms either way), and the GEMM stays. The full
// convolution that would give the data gradient the same way measured slower than GEMM +
// col2im (its padded rows multiply zeros) and is not used.
constexpr std::size_t kDirectTaps = 64;

bool direct_forward(const Geometry& geo) {
#if DEPENGINE_CONV_DIRECT
  return have_avx2_fma() && geo.g.stride_h == 1 && geo.g.stride_w == 1 && geo.ow >= 8 &&
         geo.taps <= kDirectTaps && !geo.pointwise();
#else
  (void)geo;
  return false;
#endif
}

// Copies the planes (channels, height, width) into (channels, height + 2·ph, width + 2·pw)
// with zeros around them.
void pad_planes(const float* src, std::size_t channels, std::size_t height, std::size_t width,
                std::size_t ph, std::size_t pw, float* dst) {
  const std::size_t pwidth = width + 2 * pw, pheight = height + 2 * ph;
  std::fill(dst, dst + channels * pheight * pwidth, 0.0f);
  for (std::size_t c = 0; c < channels; ++c) {
    for (std::size_t y = 0; y < height; ++y) {
      std::memcpy(dst + (c * pheight + y + ph) * pwidth + pw, src + (c * height + y) * width,
                  width * sizeof(float));
    }
  }
}

// A second per-thread buffer (padded images), beside columns().
float* padded(std::size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

template <class Body>
void per_image_chunks(const Geometry& geo, std::size_t per_chunk, const Body& body) {
  detail::parallel_chunks(geo.g.batch, per_chunk, body);
}

}  // namespace

void conv2d_forward(const RunContext&, const Conv2d& g, const float* x, const float* w,
                    const float* b, float* y) {
  check_conv2d("conv2d_forward", g);
  pin_blas_threads();
  const Geometry geo(g);
#if DEPENGINE_CONV_DIRECT
  if (direct_forward(geo)) {
    const Direct d{g.in_channels, g.height + 2 * g.pad_h, g.width + 2 * g.pad_w,
                   g.out_channels, g.kernel_h, g.kernel_w};
    const bool pad = g.pad_h != 0 || g.pad_w != 0;
    per_image_chunks(geo, geo.images_per_chunk(), [&](std::size_t n0, std::size_t n1) {
      float* buf = pad ? padded(d.channels * d.height * d.width) : nullptr;
      for (std::size_t n = n0; n < n1; ++n) {
        const float* image = x + n * geo.in_image;
        if (pad) {
          pad_planes(image, g.in_channels, g.height, g.width, g.pad_h, g.pad_w, buf);
          image = buf;
        }
        direct_conv(d, image, w, b, y + n * geo.out_image);
      }
    });
    return;
  }
#endif
  per_image_chunks(geo, geo.images_per_chunk(), [&](std::size_t n0, std::size_t n1) {
    float* col = geo.pointwise() ? nullptr : columns(geo.taps * geo.spatial);
    for (std::size_t n = n0; n < n1; ++n) {
      const float* image = x + n * geo.in_image;
      float* out = y + n * geo.out_image;
      if (!geo.pointwise()) im2col(geo, image, col);
      const float* cols = geo.pointwise() ? image : col;
      sgemm(false, false, g.out_channels, geo.spatial, geo.taps, 1.0f, w, geo.taps, cols,
            geo.spatial, 0.0f, out, geo.spatial);
      if (b) {
        for (std::size_t k = 0; k < g.out_channels; ++k) {
          float* __restrict row = out + k * geo.spatial;
          const float bias = b[k];
          for (std::size_t p = 0; p < geo.spatial; ++p) row[p] += bias;
        }
      }
    }
  });
}

void conv2d_backward_data(const RunContext&, const Conv2d& g, const float* dy, const float* w,
                          float* dx) {
  check_conv2d("conv2d_backward_data", g);
  pin_blas_threads();
  const Geometry geo(g);
  per_image_chunks(geo, geo.images_per_chunk(), [&](std::size_t n0, std::size_t n1) {
    float* col = geo.pointwise() ? nullptr : columns(geo.taps * geo.spatial);
    for (std::size_t n = n0; n < n1; ++n) {
      float* image = dx + n * geo.in_image;
      float* cols = geo.pointwise() ? image : col;
      // cols = wᵀ · dy_n: (taps × K) · (K × spatial).
      sgemm(true, false, geo.taps, geo.spatial, g.out_channels, 1.0f, w, geo.taps,
            dy + n * geo.out_image, geo.spatial, 0.0f, cols, geo.spatial);
      if (!geo.pointwise()) col2im(geo, col, image);
    }
  });
}

void conv2d_backward_weight(const RunContext&, const Conv2d& g, const float* x,
                            const float* dy, float* dw) {
  check_conv2d("conv2d_backward_weight", g);
  const Geometry geo(g);
  const std::size_t size = g.out_channels * geo.taps;
  if (g.batch == 0) {
    std::fill(dw, dw + size, 0.0f);
    return;
  }
  pin_blas_threads();
  const std::size_t per_chunk =
      std::max(geo.images_per_chunk(), detail::ceil_div(g.batch, kMaxPartials));
  const std::size_t chunks = detail::ceil_div(g.batch, per_chunk);
  // The first chunk's partial goes to dw itself; the others to their own buffers.
  std::vector<float> partials((chunks - 1) * size);
  per_image_chunks(geo, per_chunk, [&](std::size_t n0, std::size_t n1) {
    const std::size_t c = n0 / per_chunk;
    float* out = c == 0 ? dw : partials.data() + (c - 1) * size;
    float* col = geo.pointwise() ? nullptr : columns(geo.taps * geo.spatial);
    for (std::size_t n = n0; n < n1; ++n) {
      const float* image = x + n * geo.in_image;
      if (!geo.pointwise()) im2col(geo, image, col);
      const float* cols = geo.pointwise() ? image : col;
      // out (+)= dy_n · colsᵀ: (K × spatial) · (spatial × taps).
      sgemm(false, true, g.out_channels, geo.taps, geo.spatial, 1.0f, dy + n * geo.out_image,
            geo.spatial, cols, geo.spatial, n == n0 ? 0.0f : 1.0f, out, geo.taps);
    }
  });
  detail::parallel_chunks(size, detail::kElementGrain, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t c = 1; c < chunks; ++c) {
      const float* __restrict p = partials.data() + (c - 1) * size;
      float* __restrict out = dw;
      for (std::size_t i = i0; i < i1; ++i) out[i] += p[i];
    }
  });
}

void conv2d_backward_bias(const RunContext&, const Conv2d& g, const float* dy, float* db) {
  check_conv2d("conv2d_backward_bias", g);
  const Geometry geo(g);
  detail::parallel_chunks(g.out_channels, 1, [&](std::size_t k0, std::size_t k1) {
    for (std::size_t k = k0; k < k1; ++k) {
      // Eight running sums (lane p % 8), combined in lane order: the additions vectorize,
      // and their order is still fixed by the shape alone.
      constexpr std::size_t kLanes = 8;
      double lanes[kLanes] = {};
      for (std::size_t n = 0; n < g.batch; ++n) {
        const float* row = dy + n * geo.out_image + k * geo.spatial;
        std::size_t p = 0;
        for (; p + kLanes <= geo.spatial; p += kLanes) {
          for (std::size_t l = 0; l < kLanes; ++l) lanes[l] += row[p + l];
        }
        for (; p < geo.spatial; ++p) lanes[p % kLanes] += row[p];
      }
      double s = 0.0;
      for (double l : lanes) s += l;
      db[k] = static_cast<float>(s);
    }
  });
}

}  // namespace cpu
}  // namespace depengine::ops
