// A 2D Jacobi stencil in row blocks, one block per rank, halos exchanged every step, with an
// injected per-message latency (DEPENGINE_DIST_LATENCY_US or -latency). Two versions:
//
//   overlap: each block is three vars (top row, interior, bottom row), double-buffered; the
//            edge rows are computed first (high priority) and go to the neighbours while the
//            interior computes, so a step costs about max(compute, latency).
//   bsp:     bulk-synchronous: one op computes the whole block, then its edge rows are packed
//            and exchanged, and the next step starts when they arrive: compute + latency per
//            step (without a barrier per step, so that only the overlap differs).
//
//   mpirun -np 2 dist_stencil [-mode overlap|bsp] [-rows 1024] [-cols 2048] [-steps 50]
//                             [-latency 1000]
// Prints (rank 0): ms per step, compute ms per step (time inside the ops, mean over ranks),
// and a checksum, equal for both modes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "depengine/dist.h"

namespace dd = depengine::dist;

namespace {

std::atomic<long long> compute_ns{0};

struct Timer {
  std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  ~Timer() {
    compute_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - t)
                      .count();
  }
};

// out[r][c] = mean of in's 4 neighbours (fixed 0 boundary at the left/right edges), for the
// rows [0, n) of `out`, where `row(i)` gives input row i (-1 and n allowed: the halos).
template <class Row>
void jacobi_rows(double* out, int n, int cols, Row row) {
  for (int i = 0; i < n; ++i) {
    const double* up = row(i - 1);
    const double* mid = row(i);
    const double* dn = row(i + 1);
    double* o = out + static_cast<std::size_t>(i) * cols;
    for (int c = 0; c < cols; ++c) {
      const double l = c > 0 ? mid[c - 1] : 0, r = c + 1 < cols ? mid[c + 1] : 0;
      o[c] = 0.25 * (up[c] + dn[c] + l + r);
    }
  }
}

double initial(int grow, int c) { return static_cast<double>((grow * 7 + c * 13) % 101); }

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "overlap";
  int rows = 1024, cols = 2048, steps = 50;
  long latency = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-mode") mode = argv[i + 1];
    else if (a == "-rows") rows = std::atoi(argv[i + 1]);
    else if (a == "-cols") cols = std::atoi(argv[i + 1]);
    else if (a == "-steps") steps = std::atoi(argv[i + 1]);
    else if (a == "-latency") latency = std::atol(argv[i + 1]);
    else {
      std::fprintf(stderr, "dist_stencil: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if ((mode != "overlap" && mode != "bsp") || rows < 3 || cols < 1 || steps < 1) {
    std::fprintf(stderr, "dist_stencil: bad arguments\n");
    return 2;
  }
  dd::Context ctx({.latency_us = latency});
  const int P = ctx.size();
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(double);
  const std::vector<double> zero_row(static_cast<std::size_t>(cols), 0.0);
  const double* zero = zero_row.data();

  auto init_rows = [=](double* d, int block, int first, int n) {
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < cols; ++c)
        d[static_cast<std::size_t>(i) * cols + c] = initial(block * rows + first + i, c);
  };

  std::vector<dd::Var> result;  // the final block values, for the checksum
  if (mode == "overlap") {
    // T[b][r]: top row, I[b][r]: rows 1..rows-2, B[b][r]: bottom row; b = step parity.
    std::vector<dd::Var> T[2], I[2], B[2];
    for (int b = 0; b < 2; ++b)
      for (int r = 0; r < P; ++r) {
        T[b].push_back(ctx.new_var(row_bytes, r));
        I[b].push_back(ctx.new_var(row_bytes * static_cast<std::size_t>(rows - 2), r));
        B[b].push_back(ctx.new_var(row_bytes, r));
      }
    for (int r = 0; r < P; ++r)
      ctx.push(
          [=](dd::Args a) {
            init_rows(a.write<double>(0), r, 0, 1);
            init_rows(a.write<double>(1), r, 1, rows - 2);
            init_rows(a.write<double>(2), r, rows - 1, 1);
          },
          {}, {T[0][static_cast<std::size_t>(r)], I[0][static_cast<std::size_t>(r)], B[0][static_cast<std::size_t>(r)]},
          {.name = "init"});
    ctx.wait_all();
    const auto t1 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) {
      const int p = s % 2, q = 1 - p;
      for (int r = 0; r < P; ++r) {
        const auto u = static_cast<std::size_t>(r);
        const bool has_up = r > 0, has_dn = r + 1 < P;
        // Top edge row: needs the upper neighbour's bottom row.
        std::vector<dd::Var> rd = {T[p][u], I[p][u]};
        if (has_up) rd.push_back(B[p][u - 1]);
        ctx.push(
            [=](dd::Args a) {
              Timer tm;
              const double* up = has_up ? a.read<double>(2) : zero;
              jacobi_rows(a.write<double>(0), 1, cols, [&](int i) {
                return i < 0 ? up : i == 0 ? a.read<double>(0) : a.read<double>(1);
              });
            },
            rd, {T[q][u]}, {.name = "edge", .priority = 2});
        std::vector<dd::Var> rb = {B[p][u], I[p][u]};
        if (has_dn) rb.push_back(T[p][u + 1]);
        ctx.push(
            [=](dd::Args a) {
              Timer tm;
              const double* dn = has_dn ? a.read<double>(2) : zero;
              const double* last_inner =
                  a.read<double>(1) + static_cast<std::size_t>(rows - 3) * cols;
              jacobi_rows(a.write<double>(0), 1, cols, [&](int i) {
                return i < 0 ? last_inner : i == 0 ? a.read<double>(0) : dn;
              });
            },
            rb, {B[q][u]}, {.name = "edge", .priority = 2});
        ctx.push(
            [=](dd::Args a) {
              Timer tm;
              const double* top = a.read<double>(0);
              const double* in = a.read<double>(1);
              const double* bot = a.read<double>(2);
              jacobi_rows(a.write<double>(0), rows - 2, cols, [&](int i) {
                return i < 0 ? top : i >= rows - 2 ? bot : in + static_cast<std::size_t>(i) * cols;
              });
            },
            {T[p][u], I[p][u], B[p][u]}, {I[q][u]}, {.name = "interior"});
      }
    }
    ctx.wait_all();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    const int f = steps % 2;
    for (int r = 0; r < P; ++r) {
      const auto u = static_cast<std::size_t>(r);
      result.insert(result.end(), {T[f][u], I[f][u], B[f][u]});
    }
    const double comp = static_cast<double>(compute_ns.load()) / 1e6 / steps;
    double checksum = 0;
    for (const dd::Var& v : result) {
      auto bytes = ctx.get(v);
      const double* d = reinterpret_cast<const double*>(bytes.data());
      for (std::size_t i = 0; i < bytes.size() / sizeof(double); ++i) checksum += d[i] * static_cast<double>(i % 7 + 1);
    }
    const auto st = ctx.gather_stats();
    if (ctx.rank() == 0)
      std::printf("dist_stencil: mode overlap ranks %d rows %d cols %d steps %d latency %ld us: "
                  "%.3f ms/step, compute on rank 0 %.3f ms/step, messages %llu, checksum %.6e\n",
                  P, rows, cols, steps, latency, secs * 1e3 / steps, comp,
                  static_cast<unsigned long long>(st[0].messages_sent), checksum);
    return 0;
  }

  // Bulk-synchronous: one var per block, halos packed into their own vars after the compute.
  std::vector<dd::Var> X[2], top(static_cast<std::size_t>(P)), bot(static_cast<std::size_t>(P));
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < P; ++r) X[b].push_back(ctx.new_var(row_bytes * static_cast<std::size_t>(rows), r));
  for (int r = 0; r < P; ++r) {
    top[static_cast<std::size_t>(r)] = ctx.new_var(row_bytes, r);
    bot[static_cast<std::size_t>(r)] = ctx.new_var(row_bytes, r);
  }
  for (int r = 0; r < P; ++r) {
    const auto u = static_cast<std::size_t>(r);
    ctx.push([=](dd::Args a) { init_rows(a.write<double>(0), r, 0, rows); }, {}, {X[0][u]}, {.name = "init"});
    ctx.push([=](dd::Args a) {
      std::memcpy(a.write<double>(0), a.read<double>(0), row_bytes);
      std::memcpy(a.write<double>(1), a.read<double>(0) + static_cast<std::size_t>(rows - 1) * cols, row_bytes);
    }, {X[0][u]}, {top[u], bot[u]}, {.name = "pack"});
  }
  ctx.wait_all();
  const auto t1 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    const int p = s % 2, q = 1 - p;
    for (int r = 0; r < P; ++r) {
      const auto u = static_cast<std::size_t>(r);
      const bool has_up = r > 0, has_dn = r + 1 < P;
      std::vector<dd::Var> rd = {X[p][u]};
      if (has_up) rd.push_back(bot[u - 1]);
      if (has_dn) rd.push_back(top[u + 1]);
      ctx.push(
          [=](dd::Args a) {
            Timer tm;
            const double* in = a.read<double>(0);
            const double* up = has_up ? a.read<double>(1) : zero;
            const double* dn = has_dn ? a.read<double>(has_up ? 2 : 1) : zero;
            jacobi_rows(a.write<double>(0), rows, cols, [&](int i) {
              return i < 0 ? up : i >= rows ? dn : in + static_cast<std::size_t>(i) * cols;
            });
          },
          rd, {X[q][u]}, {.name = "block"});
    }
    for (int r = 0; r < P; ++r) {
      const auto u = static_cast<std::size_t>(r);
      ctx.push([=](dd::Args a) {
        std::memcpy(a.write<double>(0), a.read<double>(0), row_bytes);
        std::memcpy(a.write<double>(1), a.read<double>(0) + static_cast<std::size_t>(rows - 1) * cols, row_bytes);
      }, {X[q][u]}, {top[u], bot[u]}, {.name = "pack"});
    }
  }
  ctx.wait_all();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double comp = static_cast<double>(compute_ns.load()) / 1e6 / steps;
  double checksum = 0;
  for (int r = 0; r < P; ++r) {
    auto bytes = ctx.get(X[steps % 2][static_cast<std::size_t>(r)]);
    const double* d = reinterpret_cast<const double*>(bytes.data());
    // The same weights as the overlap version's T, I, B concatenation per block.
    const std::size_t n = bytes.size() / sizeof(double), rc = static_cast<std::size_t>(cols);
    for (std::size_t i = 0; i < rc; ++i) checksum += d[i] * static_cast<double>(i % 7 + 1);
    for (std::size_t i = rc; i < n - rc; ++i) checksum += d[i] * static_cast<double>((i - rc) % 7 + 1);
    for (std::size_t i = n - rc; i < n; ++i) checksum += d[i] * static_cast<double>((i - (n - rc)) % 7 + 1);
  }
  const auto st = ctx.gather_stats();
  if (ctx.rank() == 0)
    std::printf("dist_stencil: mode bsp ranks %d rows %d cols %d steps %d latency %ld us: "
                "%.3f ms/step, compute on rank 0 %.3f ms/step, messages %llu, checksum %.6e\n",
                P, rows, cols, steps, latency, secs * 1e3 / steps, comp,
                static_cast<unsigned long long>(st[0].messages_sent), checksum);
  return 0;
}
