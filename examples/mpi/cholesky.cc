// Tiled Cholesky (A = L Lᵀ, lower) over MPI ranks with depengine::dist: tiles owned
// block-cyclically on a P×Q grid; every rank pushes the whole task flow, each task runs on
// the owner of the tile it writes, and tiles move as the reads require.
//
//   mpirun -np 4 dist_cholesky [-size 3840] [-nblocks 12] [-p 2] [-check] [-trace FILE]
//
// Prints (rank 0): time, GFlop/s, messages sent (and the count the algorithm's data flow
// predicts: each tile version goes once to each other rank that reads it), and with -check
// the residual ‖A − LLᵀ‖_F / ‖A‖_F.
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "depengine/dist.h"
#include "depengine/profiler.h"

extern "C" void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
extern "C" void openblas_set_num_threads(int);

namespace dd = depengine::dist;

namespace {

// A symmetric positive definite matrix, element by element (any rank can make any tile).
double element(int i, int j, int n) {
  if (i < j) std::swap(i, j);
  unsigned h = static_cast<unsigned>(i) * 2654435761u ^ static_cast<unsigned>(j) * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (h % 1000) / 1000.0 + (i == j ? n : 0);
}

// Tiles are column-major b×b.
void fill_tile(double* t, int ti, int tj, int b, int n) {
  for (int c = 0; c < b; ++c)
    for (int r = 0; r < b; ++r) t[r + c * b] = element(ti * b + r, tj * b + c, n);
}

}  // namespace

static int run(int argc, char** argv) {
  int n = 3840, nb = 12, p = 2;
  bool check = false;
  std::string trace;
  dd::Context ctx(&argc, &argv);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-size" && i + 1 < argc) n = std::atoi(argv[++i]);
    else if (a == "-nblocks" && i + 1 < argc) nb = std::atoi(argv[++i]);
    else if (a == "-p" && i + 1 < argc) p = std::atoi(argv[++i]);
    else if (a == "-check") check = true;
    else if (a == "-trace" && i + 1 < argc) trace = argv[++i];
    else {
      if (ctx.rank() == 0) std::fprintf(stderr, "dist_cholesky: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  // n = 0 (or a -size that is not a number) would hand LAPACK empty tiles, which it aborts on.
  if (nb <= 0 || n <= 0 || n % nb != 0 || p <= 0 || ctx.size() % p != 0) {
    if (ctx.rank() == 0)
      std::fprintf(stderr,
                   "dist_cholesky: -size must be a positive multiple of -nblocks, ranks of -p\n");
    return 2;
  }
  openblas_set_num_threads(1);  // the engine's workers are the parallelism
  const int b = n / nb, q = ctx.size() / p;
  const std::size_t tile_bytes = static_cast<std::size_t>(b) * b * sizeof(double);
  auto owner = [&](int i, int j) { return (i % p) * q + (j % q); };
  std::shared_ptr<depengine::Profiler> prof;
  if (!trace.empty()) {
    prof = std::make_shared<depengine::Profiler>();
    ctx.set_observer(prof);
  }

  // Lower tiles only; tile (i, j) at index i*nb+j.
  std::vector<dd::DistVar> tile(static_cast<std::size_t>(nb * nb));
  auto T = [&](int i, int j) -> dd::DistVar& { return tile[static_cast<std::size_t>(i * nb + j)]; };
  for (int i = 0; i < nb; ++i)
    for (int j = 0; j <= i; ++j) {
      T(i, j) = ctx.new_var(tile_bytes, owner(i, j));
      ctx.push([=](dd::Args a) { fill_tile(a.write<double>(0), i, j, b, n); }, {}, {T(i, j)},
               {.name = "init"});
    }
  ctx.wait_all();
  const auto before = ctx.gather_stats();

  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < nb; ++k) {
    ctx.push(
        [=](dd::Args a) {
          int info = 0;
          dpotrf_("L", &b, a.write<double>(0), &b, &info);
          if (info != 0) throw std::runtime_error("dpotrf: info " + std::to_string(info));
        },
        {}, {T(k, k)}, {.name = "potrf", .priority = 3});
    for (int i = k + 1; i < nb; ++i)
      ctx.push(
          [=](dd::Args a) {
            cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, b, b,
                        1.0, a.read<double>(0), b, a.write<double>(0), b);
          },
          {T(k, k)}, {T(i, k)}, {.name = "trsm", .priority = 2});
    for (int i = k + 1; i < nb; ++i) {
      ctx.push(
          [=](dd::Args a) {
            cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, b, b, -1.0, a.read<double>(0), b,
                        1.0, a.write<double>(0), b);
          },
          {T(i, k)}, {T(i, i)}, {.name = "syrk", .priority = i == k + 1 ? 2 : 0});
      for (int j = k + 1; j < i; ++j)
        ctx.push(
            [=](dd::Args a) {
              cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, b, b, b, -1.0,
                          a.read<double>(0), b, a.read<double>(1), b, 1.0, a.write<double>(0), b);
            },
            {T(i, k), T(j, k)}, {T(i, j)}, {.name = "gemm", .priority = j == k + 1 ? 1 : 0});
    }
  }
  ctx.wait_all();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto after = ctx.gather_stats();

  // The count the data flow predicts: each version of a tile goes once to every other rank
  // that runs a task reading it (potrf's A_kk: the trsm owners of column k; trsm's A_ik: the
  // owners of syrk A_ii, gemm A_ij (k<j<i) and gemm A_ji (j>i)).
  std::uint64_t predicted = 0;
  for (int k = 0; k < nb; ++k) {
    std::set<int> dest;
    for (int i = k + 1; i < nb; ++i) dest.insert(owner(i, k));
    dest.erase(owner(k, k));
    predicted += dest.size();
    for (int i = k + 1; i < nb; ++i) {
      std::set<int> d;
      d.insert(owner(i, i));
      for (int j = k + 1; j < i; ++j) d.insert(owner(i, j));
      for (int j = i + 1; j < nb; ++j) d.insert(owner(j, i));
      d.erase(owner(i, k));
      predicted += d.size();
    }
  }
  std::uint64_t sent = 0, received = 0, bytes = 0;
  for (int r = 0; r < ctx.size(); ++r) {
    sent += after[static_cast<std::size_t>(r)].messages_sent - before[static_cast<std::size_t>(r)].messages_sent;
    received += after[static_cast<std::size_t>(r)].messages_received -
                before[static_cast<std::size_t>(r)].messages_received;
    bytes += after[static_cast<std::size_t>(r)].bytes_sent - before[static_cast<std::size_t>(r)].bytes_sent;
  }
  const double gflops = 1.0 * n * n * n / 3.0 / secs / 1e9;
  if (ctx.rank() == 0)
    std::printf("dist_cholesky: ranks %d (%dx%d) N %d tiles %dx%d (b=%d) time %.3f s  %.2f GFlop/s  "
                "messages %llu (predicted %llu, received %llu, %.1f MB)\n",
                ctx.size(), p, q, n, nb, nb, b, secs, gflops, static_cast<unsigned long long>(sent),
                static_cast<unsigned long long>(predicted),
                static_cast<unsigned long long>(received), static_cast<double>(bytes) / 1e6);
  if (!trace.empty()) ctx.write_trace(trace, *prof);

  int rc = sent == predicted && received == predicted ? 0 : 1;
  if (check) {
    // Every rank gets L (collective); rank 0 forms LLᵀ and compares.
    std::vector<double> L(static_cast<std::size_t>(n) * n, 0.0);
    for (int i = 0; i < nb; ++i)
      for (int j = 0; j <= i; ++j) {
        std::vector<std::byte> t = ctx.get(T(i, j));
        const double* d = reinterpret_cast<const double*>(t.data());
        if (ctx.rank() != 0) continue;
        for (int c = 0; c < b; ++c)
          for (int r = 0; r < b; ++r)
            if (i != j || r >= c)
              L[static_cast<std::size_t>(j * b + c) * n + (i * b + r)] = d[r + c * b];
      }
    if (ctx.rank() == 0) {
      std::vector<double> llt(static_cast<std::size_t>(n) * n, 0.0);
      cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, n, n, 1.0, L.data(), n, 0.0,
                  llt.data(), n);
      double diff = 0, norm = 0;
      for (int c = 0; c < n; ++c)
        for (int r = c; r < n; ++r) {
          const double a = element(r, c, n);
          const double d = a - llt[static_cast<std::size_t>(c) * n + r];
          const double w = r == c ? 1 : 2;  // the upper triangle mirrors the lower
          diff += w * d * d;
          norm += w * a * a;
        }
      const double residual = std::sqrt(diff / norm);
      std::printf("dist_cholesky: residual |A - LL^T|_F / |A|_F = %.3e\n", residual);
      if (!(residual < 1e-12)) rc = 1;
    }
  }
  if (ctx.rank() == 0 && rc) std::printf("dist_cholesky: CHECK FAILED\n");
  return rc;
}

// A depengine::Error (a var too large for one message, an option out of range) ends the
// program with its text and exit 2 on every rank, rather than std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const depengine::Error& e) {
    std::fprintf(stderr, "dist_cholesky: %s\n", e.what());
    return 2;
  }
}
