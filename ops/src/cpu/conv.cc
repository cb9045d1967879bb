// CPU convolution in oneTBB tasks of a fixed number of images each. The forward pass of a
// stride-1 convolution with at most 512 taps (in_channels·kh·kw) and output rows at least 8
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
// one output row of NK channels × V adjacent vectors of 8 positions stays in registers
// while the taps stream past (NK·V ≤ 12 accumulators, V row loads and NK broadcasts per
// tap). The weights are packed per tile of NK channels, tap by tap ([c][i][j][a]), so that
// every address in the loop is a base plus a constant. A row whose width is not a multiple
// of 8 ends with a group of vectors that overlaps the group before it; the overlapped
// positions are computed twice by the same operations, so they get the same bits. Each
// output element's sum has a fixed order, whatever the thread count.

struct Direct {
  std::size_t channels, height, width;  // the input planes
  std::size_t out_channels, kh, kw;
  std::size_t oh() const noexcept { return height - kh + 1; }
  std::size_t ow() const noexcept { return width - kw + 1; }
  std::size_t taps() const noexcept { return channels * kh * kw; }
};

// Output channels per tile for V vectors: 12 accumulators where they fit.
constexpr int channels_per_tile(int v) { return v == 3 ? 4 : v == 2 ? 6 : 8; }

// A group of V adjacent vectors starting at column x0.
struct Group {
  int vectors;
  std::size_t x0;
};

// The groups covering a row of ow >= 8 positions: ⌈ow/8⌉ vectors in groups of 3 (two of 2
// where 4 are left; none wider than the row), each group starting 8·(vectors before it) or,
// for the last, where it ends at ow.
std::vector<Group> row_groups(std::size_t ow) {
  const std::size_t vectors = detail::ceil_div(ow, 8);
  std::vector<Group> groups;
  for (std::size_t v = 0; v < vectors;) {
    const std::size_t left = vectors - v;
    const std::size_t fit = std::min<std::size_t>(left == 4 ? 2 : std::min<std::size_t>(left, 3),
                                                  ow / 8);
    const int n = static_cast<int>(fit);
    groups.push_back({n, std::min(8 * v, ow - 8 * static_cast<std::size_t>(n))});
    v += static_cast<std::size_t>(n);
  }
  return groups;
}

// w (out_channels, taps) as tiles of NK channels, each [tap][a] (a tile past the last
// channel padded with zeros).
std::vector<float> pack_weights(const Direct& d, const float* w, int nk) {
  const std::size_t taps = d.taps(), tiles = detail::ceil_div(d.out_channels, nk);
  std::vector<float> packed(tiles * taps * nk, 0.0f);
  for (std::size_t k = 0; k < d.out_channels; ++k) {
    float* tile = packed.data() + (k / nk) * taps * nk + k % nk;
    for (std::size_t t = 0; t < taps; ++t) tile[t * nk] = w[k * taps + t];
  }
  return packed;
}

// One row y of a tile: NK channels (nk of them real) × V vectors from column x0. The
// constant loops are unrolled before scalar replacement, so that acc stays in registers
// (otherwise g++ 12 stores it back to the stack after every tap); the loop over a kernel
// row's taps is not (unrolled, g++ interleaves the taps and spills: 40 against 47 GFLOP/s).
template <int NK, int V>
__attribute__((target("avx2,fma"))) void direct_tile(const Direct& d, const float* in,
                                                      const float* wp, const float* bias,
                                                      int nk, float* out, std::size_t y,
                                                      std::size_t x0, bool relu) {
  __m256 acc[NK][V];
#pragma GCC unroll 16
  for (int a = 0; a < NK; ++a) {
    const __m256 b0 = bias && a < nk ? _mm256_set1_ps(bias[a]) : _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[a][v] = b0;
  }
  for (std::size_t c = 0; c < d.channels; ++c) {
    for (std::size_t i = 0; i < d.kh; ++i) {
      const float* row = in + (c * d.height + y + i) * d.width + x0;
#pragma GCC unroll 1
      for (std::size_t j = 0; j < d.kw; ++j, wp += NK) {
        __m256 xv[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) xv[v] = _mm256_loadu_ps(row + j + 8 * v);
#pragma GCC unroll 16
        for (int a = 0; a < NK; ++a) {
          const __m256 wv = _mm256_broadcast_ss(wp + a);
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) acc[a][v] = _mm256_fmadd_ps(wv, xv[v], acc[a][v]);
        }
      }
    }
  }
  const std::size_t plane = d.oh() * d.ow();
  float* o = out + y * d.ow() + x0;
  // max(acc, 0) is acc > 0 ? acc : 0 (MAXPS returns its second operand unless the first is
  // greater), the elementwise relu's select, NaN and −0 included.
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int a = 0; a < NK; ++a) {
    if (a >= nk) break;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __m256 r = relu ? _mm256_max_ps(acc[a][v], zero) : acc[a][v];
      _mm256_storeu_ps(o + a * plane + 8 * v, r);
    }
  }
}

template <int V>
void direct_rows(const Direct& d, const float* in, const float* wp, const float* bias,
                 float* out, std::size_t x0, bool relu) {
  constexpr int kNk = channels_per_tile(V);
  const std::size_t plane = d.oh() * d.ow();
  for (std::size_t k0 = 0; k0 < d.out_channels; k0 += kNk) {
    const int nk = static_cast<int>(std::min<std::size_t>(kNk, d.out_channels - k0));
    const float* bk = bias ? bias + k0 : nullptr;
    const float* wk = wp + (k0 / kNk) * d.taps() * kNk;
    for (std::size_t y = 0; y < d.oh(); ++y) {
      direct_tile<kNk, V>(d, in, wk, bk, nk, out + k0 * plane, y, x0, relu);
    }
  }
}

// The weights packed for each tile width a row's groups use.
struct PackedWeights {
  PackedWeights(const Direct& d, const float* w) : groups(row_groups(d.ow())) {
    for (const Group& g : groups) {
      std::vector<float>& p = by_vectors[g.vectors - 1];
      if (p.empty()) p = pack_weights(d, w, channels_per_tile(g.vectors));
    }
  }
  std::vector<Group> groups;
  std::vector<float> by_vectors[3];
};

// One image: in (channels, height, width) → out (out_channels, oh, ow), ow >= 8; bias
// (out_channels) or nullptr; relu applied as each output is stored.
void direct_conv(const Direct& d, const PackedWeights& w, const float* in, const float* bias,
                 float* out, bool relu) {
  for (const Group& g : w.groups) {
    const float* wp = w.by_vectors[g.vectors - 1].data();
    if (g.vectors == 3) direct_rows<3>(d, in, wp, bias, out, g.x0, relu);
    if (g.vectors == 2) direct_rows<2>(d, in, wp, bias, out, g.x0, relu);
    if (g.vectors == 1) direct_rows<1>(d, in, wp, bias, out, g.x0, relu);
  }
}

bool have_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// Whether the direct convolution takes this geometry: stride 1, output rows of at least 8
// (the vector width), and at most kDirectTaps taps (in_channels·kh·kw; measured at 9 and
// 288, the two layers of MNIST's CNN). Thread CPU time of one thread, medians, the same
// binary: conv 1→32 on 64 images 1.5–2.0 ms against 2.3–2.6 ms for im2col + sgemm (whose
// inner dimension, 9, leaves the product bound by streaming the columns); conv 32→64 on 8
// images 46–51 GFLOP/s against 35–50 (4 rounds). A direct full convolution for the data
// gradient (dy padded, the kernel flipped) measured slower than GEMM + col2im with an
// earlier version of this loop (its padded rows multiply zeros) and is not used.
constexpr std::size_t kDirectTaps = 512;

bool direct_forward(const Geometry& geo) {
  return have_avx2_fma() && geo.g.stride_h == 1 && geo.g.stride_w == 1 && geo.ow >= 8 &&
         geo.taps <= kDirectTaps && !geo.pointwise();
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
#endif

template <class Body>
void per_image_chunks(const Geometry& geo, std::size_t per_chunk, const Body& body) {
  detail::parallel_chunks(geo.g.batch, per_chunk, body);
}

}  // namespace

void conv2d_forward(const RunContext&, const Conv2d& g, const float* x, const float* w,
                    const float* b, float* y, bool relu) {
  check_conv2d("conv2d_forward", g);
  pin_blas_threads();
  const Geometry geo(g);
#if DEPENGINE_CONV_DIRECT
  if (direct_forward(geo)) {
    const Direct d{g.in_channels, g.height + 2 * g.pad_h, g.width + 2 * g.pad_w,
                   g.out_channels, g.kernel_h, g.kernel_w};
    const bool pad = g.pad_h != 0 || g.pad_w != 0;
    const PackedWeights packed(d, w);
    per_image_chunks(geo, geo.images_per_chunk(), [&](std::size_t n0, std::size_t n1) {
      float* buf = pad ? padded(d.channels * d.height * d.width) : nullptr;
      for (std::size_t n = n0; n < n1; ++n) {
        const float* image = x + n * geo.in_image;
        if (pad) {
          pad_planes(image, g.in_channels, g.height, g.width, g.pad_h, g.pad_w, buf);
          image = buf;
        }
        direct_conv(d, packed, image, b, y + n * geo.out_image, relu);
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
      if (relu) {
        float* __restrict o = out;
        for (std::size_t p = 0; p < geo.out_image; ++p) o[p] = o[p] > 0.0f ? o[p] : 0.0f;
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
