// GPU convolution: a chunk of images is lowered to one column matrix (taps × images·spatial)
// in stream-ordered scratch memory, so that each direction is a single cuBLAS GEMM per
// chunk; the column-to-image step gathers (one thread per input element), so no atomics and
// the same sums on every run.
#include <algorithm>

#include "block_reduce.cuh"
#include "common.cuh"
#include "depengine/ops/cuda.h"

namespace depengine::ops::cuda {
namespace {

// Scratch per chunk: at most this many floats (256 MiB), but always one image.
constexpr std::size_t kScratchFloats = std::size_t{64} << 20;

struct Geo {
  std::size_t c, h, w, k, kh, kw, sh, sw, ph, pw, oh, ow, spatial, taps;
};

Geo geo_of(const Conv2d& g) {
  return {g.in_channels, g.height,   g.width,    g.out_channels, g.kernel_h,
          g.kernel_w,    g.stride_h, g.stride_w, g.pad_h,        g.pad_w,
          g.out_h(),     g.out_w(),  g.out_h() * g.out_w(),
          g.in_channels * g.kernel_h * g.kernel_w};
}

// col[t][m·spatial + p] for the images [n0, n0 + m): t = (c·kh + i)·kw + j.
__global__ void im2col_kernel(Geo g, const float* x, std::size_t n0, std::size_t m, float* col) {
  const std::size_t cols = m * g.spatial, total = g.taps * cols;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = e / cols, q = e % cols;
    const std::size_t n = n0 + q / g.spatial, p = q % g.spatial;
    const std::size_t c = t / (g.kh * g.kw), i = t / g.kw % g.kh, j = t % g.kw;
    const std::size_t iy = p / g.ow * g.sh + i, ix = p % g.ow * g.sw + j;  // + pad
    float v = 0.0f;
    if (iy >= g.ph && iy - g.ph < g.h && ix >= g.pw && ix - g.pw < g.w) {
      v = x[((n * g.c + c) * g.h + iy - g.ph) * g.w + ix - g.pw];
    }
    col[e] = v;
  }
}

// dx[n][c][y][x] = Σ over the taps (i, j) whose output lands on it, in tap order.
__global__ void col2im_kernel(Geo g, const float* col, std::size_t n0, std::size_t m, float* dx) {
  const std::size_t cols = m * g.spatial, total = m * g.c * g.h * g.w;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t xx = e % g.w, yy = e / g.w % g.h, c = e / (g.w * g.h) % g.c;
    const std::size_t q = e / (g.w * g.h * g.c);
    float s = 0.0f;
    for (std::size_t i = 0; i < g.kh; ++i) {
      const std::size_t ty = yy + g.ph;  // = oy·sh + i
      if (ty < i || (ty - i) % g.sh != 0 || (ty - i) / g.sh >= g.oh) continue;
      const std::size_t oy = (ty - i) / g.sh;
      for (std::size_t j = 0; j < g.kw; ++j) {
        const std::size_t tx = xx + g.pw;
        if (tx < j || (tx - j) % g.sw != 0 || (tx - j) / g.sw >= g.ow) continue;
        const std::size_t ox = (tx - j) / g.sw;
        s += col[((c * g.kh + i) * g.kw + j) * cols + q * g.spatial + oy * g.ow + ox];
      }
    }
    dx[(n0 * g.c) * g.h * g.w + e] = s;
  }
}

// y[n0 + q][k][p] = ym[k][q·spatial + p] (+ b[k]), and the inverse gather for dy.
__global__ void scatter_kernel(Geo g, const float* ym, const float* b, std::size_t n0,
                               std::size_t m, float* y) {
  const std::size_t total = m * g.k * g.spatial;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t p = e % g.spatial, k = e / g.spatial % g.k, q = e / (g.spatial * g.k);
    y[n0 * g.k * g.spatial + e] = ym[k * m * g.spatial + q * g.spatial + p] + (b ? b[k] : 0.0f);
  }
}

__global__ void gather_kernel(Geo g, const float* dy, std::size_t n0, std::size_t m, float* dym) {
  const std::size_t total = m * g.k * g.spatial;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total;
       e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t p = e % g.spatial, k = e / g.spatial % g.k, q = e / (g.spatial * g.k);
    dym[k * m * g.spatial + q * g.spatial + p] = dy[n0 * g.k * g.spatial + e];
  }
}

__global__ void bias_grad_kernel(Geo g, std::size_t batch, const float* dy, float* db) {
  __shared__ double shared[detail::kReduceThreads];
  const std::size_t k = blockIdx.x, per_channel = batch * g.spatial;
  double s = 0.0;
  for (std::size_t e = threadIdx.x; e < per_channel; e += blockDim.x) {
    s += dy[(e / g.spatial * g.k + k) * g.spatial + e % g.spatial];
  }
  s = detail::block_sum(s, shared);
  if (threadIdx.x == 0) db[k] = static_cast<float>(s);
}

std::size_t images_per_chunk(const Conv2d& g, const Geo& geo) {
  const std::size_t per_image = (geo.taps + geo.k) * geo.spatial;
  return std::clamp<std::size_t>(kScratchFloats / std::max<std::size_t>(per_image, 1), 1,
                                 std::max<std::size_t>(g.batch, 1));
}

// Stream-ordered scratch, freed on the stream when it goes out of scope.
class Scratch {
 public:
  Scratch(const RunContext& ctx, std::size_t n) : ctx_(ctx), p_(allocate(ctx, n)) {}
  ~Scratch() {
    try {
      deallocate(ctx_, p_);
    } catch (...) {  // a failed free leaves the block to the pool; the op's error stands
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const noexcept { return p_; }

 private:
  const RunContext& ctx_;
  float* p_;
};

// Calls f(n0, m) for each chunk of m images, with `col` (taps × m·spatial) and `ym`
// (K × m·spatial) scratch.
template <class F>
void chunks(const RunContext& ctx, const Conv2d& g, const Geo& geo, F&& f) {
  const std::size_t per = images_per_chunk(g, geo);
  Scratch col(ctx, geo.taps * per * geo.spatial), ym(ctx, geo.k * per * geo.spatial);
  for (std::size_t n0 = 0; n0 < g.batch; n0 += per) {
    f(n0, std::min(per, g.batch - n0), col.get(), ym.get());
  }
}

}  // namespace

void conv2d_forward(const RunContext& ctx, const Conv2d& g, const float* x, const float* w,
                    const float* b, float* y) {
  cudaStream_t s = detail::stream_of(ctx, "conv2d_forward");
  check_conv2d("conv2d_forward", g);
  if (g.batch == 0) return;
  const Geo geo = geo_of(g);
  chunks(ctx, g, geo, [&](std::size_t n0, std::size_t m, float* col, float* ym) {
    const std::size_t cols = m * geo.spatial;
    im2col_kernel<<<detail::blocks_for(geo.taps * cols), detail::kThreads, 0, s>>>(geo, x, n0, m,
                                                                                    col);
    detail::check_launch(ctx, "conv2d_forward");
    gemm(ctx, false, false, geo.k, cols, geo.taps, 1.0f, w, geo.taps, col, cols, 0.0f, ym, cols);
    scatter_kernel<<<detail::blocks_for(geo.k * cols), detail::kThreads, 0, s>>>(geo, ym, b, n0, m,
                                                                                  y);
    detail::check_launch(ctx, "conv2d_forward");
  });
}

void conv2d_backward_data(const RunContext& ctx, const Conv2d& g, const float* dy,
                          const float* w, float* dx) {
  cudaStream_t s = detail::stream_of(ctx, "conv2d_backward_data");
  check_conv2d("conv2d_backward_data", g);
  if (g.batch == 0) return;
  const Geo geo = geo_of(g);
  chunks(ctx, g, geo, [&](std::size_t n0, std::size_t m, float* col, float* dym) {
    const std::size_t cols = m * geo.spatial;
    gather_kernel<<<detail::blocks_for(geo.k * cols), detail::kThreads, 0, s>>>(geo, dy, n0, m,
                                                                                 dym);
    detail::check_launch(ctx, "conv2d_backward_data");
    gemm(ctx, true, false, geo.taps, cols, geo.k, 1.0f, w, geo.taps, dym, cols, 0.0f, col, cols);
    col2im_kernel<<<detail::blocks_for(m * geo.c * geo.h * geo.w), detail::kThreads, 0, s>>>(
        geo, col, n0, m, dx);
    detail::check_launch(ctx, "conv2d_backward_data");
  });
}

void conv2d_backward_weight(const RunContext& ctx, const Conv2d& g, const float* x,
                            const float* dy, float* dw) {
  cudaStream_t s = detail::stream_of(ctx, "conv2d_backward_weight");
  check_conv2d("conv2d_backward_weight", g);
  const Geo geo = geo_of(g);
  if (g.batch == 0) {
    detail::check(cudaMemsetAsync(dw, 0, geo.k * geo.taps * sizeof(float), s), ctx,
                  "conv2d_backward_weight");
    return;
  }
  chunks(ctx, g, geo, [&](std::size_t n0, std::size_t m, float* col, float* dym) {
    const std::size_t cols = m * geo.spatial;
    im2col_kernel<<<detail::blocks_for(geo.taps * cols), detail::kThreads, 0, s>>>(geo, x, n0, m,
                                                                                    col);
    gather_kernel<<<detail::blocks_for(geo.k * cols), detail::kThreads, 0, s>>>(geo, dy, n0, m,
                                                                                 dym);
    detail::check_launch(ctx, "conv2d_backward_weight");
    gemm(ctx, false, true, geo.k, geo.taps, cols, 1.0f, dym, cols, col, cols, n0 == 0 ? 0.0f : 1.0f,
         dw, geo.taps);
  });
}

void conv2d_backward_bias(const RunContext& ctx, const Conv2d& g, const float* dy, float* db) {
  cudaStream_t s = detail::stream_of(ctx, "conv2d_backward_bias");
  check_conv2d("conv2d_backward_bias", g);
  const Geo geo = geo_of(g);
  bias_grad_kernel<<<static_cast<unsigned>(geo.k), detail::kReduceThreads, 0, s>>>(geo, g.batch,
                                                                                  dy, db);
  detail::check_launch(ctx, "conv2d_backward_bias");
}

}  // namespace depengine::ops::cuda
