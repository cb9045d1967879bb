// A 2D Jacobi stencil in row blocks, one block per rank, halos exchanged every step, with an
// injected per-message latency (DEPENGINE_DIST_LATENCY_US or -latency). Each block is three
// vars (top row, interior rows, bottom row), double-buffered, updated by the same three ops in
// both versions; only their dependencies differ:
//
//   overlap: the edge rows are computed first (high priority) and go to the neighbours while
//            the interior computes, so a step costs about max(compute, latency).
//   bsp:     bulk-synchronous: the edge rows are computed after the interior (they also read
//            its result) and the next interior waits for the neighbours' halos (it also reads
//            them): compute, then exchange, then the next step: compute + latency per step.
//
//   mpirun -np 2 dist_stencil [-mode overlap|bsp] [-rows 1024] [-cols 2048] [-steps 50]
//                             [-latency 1000]
// Prints (rank 0): ms per step, compute ms per step (time inside rank 0's ops), and a
// checksum, equal for both versions.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// out[i][c] = mean of the 4 neighbours (0 beyond the left/right edges) for rows [0, n) of
// `out`, where `row(i)` gives input row i (-1 and n: the rows around them).
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

static int run(int argc, char** argv) {
  std::string mode = "overlap";
  int rows = 1024, cols = 2048, steps = 50;
  long latency = -1;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (i + 1 >= argc) a = "";
    if (a == "-mode") mode = argv[i + 1];
    else if (a == "-rows") rows = std::atoi(argv[i + 1]);
    else if (a == "-cols") cols = std::atoi(argv[i + 1]);
    else if (a == "-steps") steps = std::atoi(argv[i + 1]);
    else if (a == "-latency") latency = std::atol(argv[i + 1]);
    else {
      std::fprintf(stderr, "dist_stencil: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  if ((mode != "overlap" && mode != "bsp") || rows < 3 || cols < 1 || steps < 1 || latency < -1) {
    std::fprintf(stderr, "dist_stencil: bad arguments\n");
    return 2;
  }
  const bool bsp = mode == "bsp";
  dd::Context ctx({.latency_us = latency});
  const int P = ctx.size();
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(double);
  const std::vector<double> zero_row(static_cast<std::size_t>(cols), 0.0);
  const double* zero = zero_row.data();

  // T[b][r]: top row, I[b][r]: rows 1..rows-2, B[b][r]: bottom row; b = step parity.
  std::vector<dd::DistVar> T[2], I[2], B[2];
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < P; ++r) {
      T[b].push_back(ctx.new_var(row_bytes, r));
      I[b].push_back(ctx.new_var(row_bytes * static_cast<std::size_t>(rows - 2), r));
      B[b].push_back(ctx.new_var(row_bytes, r));
    }
  for (int r = 0; r < P; ++r) {
    const auto u = static_cast<std::size_t>(r);
    ctx.push(
        [=](dd::Args a) {
          for (int k = 0; k < 3; ++k) {
            const int first = k == 0 ? 0 : k == 1 ? 1 : rows - 1, n = k == 1 ? rows - 2 : 1;
            double* d = a.write<double>(static_cast<std::size_t>(k));
            for (int i = 0; i < n; ++i)
              for (int c = 0; c < cols; ++c)
                d[static_cast<std::size_t>(i) * cols + c] = initial(r * rows + first + i, c);
          }
        },
        {}, {T[0][u], I[0][u], B[0][u]}, {.name = "init"});
  }
  ctx.wait_all();

  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    const int p = s % 2, q = 1 - p;
    for (int r = 0; r < P; ++r) {
      const auto u = static_cast<std::size_t>(r);
      const bool has_up = r > 0, has_dn = r + 1 < P;
      // The halos this block needs: the upper neighbour's bottom row, the lower one's top row.
      std::vector<dd::DistVar> halos;
      if (has_up) halos.push_back(B[p][u - 1]);
      if (has_dn) halos.push_back(T[p][u + 1]);
      auto interior = [&] {
        std::vector<dd::DistVar> rd = {T[p][u], I[p][u], B[p][u]};
        if (bsp) rd.insert(rd.end(), halos.begin(), halos.end());  // waits for the exchange
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
            rd, {I[q][u]}, {.name = "interior"});
      };
      if (bsp) interior();
      // Edge rows: reads[2] is the halo when there is one; bsp adds the new interior last.
      std::vector<dd::DistVar> rt = {T[p][u], I[p][u]}, rb = {B[p][u], I[p][u]};
      if (has_up) rt.push_back(B[p][u - 1]);
      if (has_dn) rb.push_back(T[p][u + 1]);
      if (bsp) {
        rt.push_back(I[q][u]);
        rb.push_back(I[q][u]);
      }
      ctx.push(
          [=](dd::Args a) {
            Timer tm;
            const double* up = has_up ? a.read<double>(2) : zero;
            const double* top = a.read<double>(0);
            const double* in = a.read<double>(1);
            jacobi_rows(a.write<double>(0), 1, cols,
                        [&](int i) { return i < 0 ? up : i == 0 ? top : in; });
          },
          rt, {T[q][u]}, {.name = "edge", .priority = 2});
      ctx.push(
          [=](dd::Args a) {
            Timer tm;
            const double* dn = has_dn ? a.read<double>(2) : zero;
            const double* bot = a.read<double>(0);
            const double* last_inner = a.read<double>(1) + static_cast<std::size_t>(rows - 3) * cols;
            jacobi_rows(a.write<double>(0), 1, cols,
                        [&](int i) { return i < 0 ? last_inner : i == 0 ? bot : dn; });
          },
          rb, {B[q][u]}, {.name = "edge", .priority = 2});
      if (!bsp) interior();
    }
  }
  ctx.wait_all();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double comp = static_cast<double>(compute_ns.load()) / 1e6 / steps;

  double checksum = 0;
  const int f = steps % 2;
  for (int r = 0; r < P; ++r)
    for (const dd::DistVar& v :
         {T[f][static_cast<std::size_t>(r)], I[f][static_cast<std::size_t>(r)],
          B[f][static_cast<std::size_t>(r)]}) {
      const std::vector<std::byte> bytes = ctx.get(v);
      const double* d = reinterpret_cast<const double*>(bytes.data());
      for (std::size_t i = 0; i < bytes.size() / sizeof(double); ++i)
        checksum += d[i] * static_cast<double>(i % 7 + 1);
    }
  const auto st = ctx.gather_stats();
  if (ctx.rank() == 0)
    std::printf("dist_stencil: mode %s ranks %d rows %d cols %d steps %d latency %ld us: "
                "%.3f ms/step, compute on rank 0 %.3f ms/step, messages %llu, checksum %.6e\n",
                mode.c_str(), P, rows, cols, steps, latency, secs * 1e3 / steps, comp,
                static_cast<unsigned long long>(st[0].messages_sent), checksum);
  return 0;
}

// A depengine::Error (a var too large for one message, an option out of range) ends the
// program with its text and exit 2 on every rank, rather than std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const depengine::Error& e) {
    std::fprintf(stderr, "dist_stencil: %s\n", e.what());
    return 2;
  }
}
