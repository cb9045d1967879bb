// How much CPU a waiting rank burns: rank 0 computes for about -seconds (default 2) while
// every other rank waits in wait_all with a receive outstanding (an op that reads rank 0's
// result). Prints each rank's process CPU time over that wait; a busy-polling progress
// thread would show about the wall time.
//
//   mpirun -np 2 dist_idle [-seconds 2]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "depengine/dist.h"

namespace dd = depengine::dist;

namespace {
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  dd::Context ctx(&argc, &argv);
  if (argc == 3 && std::string(argv[1]) == "-seconds") seconds = std::atof(argv[2]);
  dd::DistVar work = ctx.new_var(sizeof(double), 0);
  std::vector<dd::DistVar> out;
  for (int r = 0; r < ctx.size(); ++r) out.push_back(ctx.new_var(sizeof(double), r));
  ctx.wait_all();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  ctx.push(
      [seconds](dd::Args a) {
        // Real work until the time is up (a spin on rank 0 only: the waiting ranks are measured).
        double x = 0;
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (std::chrono::steady_clock::now() < end)
          for (int i = 0; i < 1000; ++i) x += 1e-9 * i;
        a.write<double>(0)[0] = x;
      },
      {}, {work}, {.name = "compute"});
  for (int r = 1; r < ctx.size(); ++r)
    ctx.push([](dd::Args a) { a.write<double>(0)[0] = a.read<double>(0)[0]; }, {work},
             {out[static_cast<std::size_t>(r)]}, {.name = "use"});
  ctx.wait_all();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  // One line per rank, in rank order.
  for (int r = 0; r < ctx.size(); ++r) {
    if (r == ctx.rank())
      std::printf("dist_idle: rank %d wall %.3f s cpu %.3f s (%.1f%% of a core)\n", r, wall, cpu,
                  100.0 * cpu / wall);
    std::fflush(stdout);
    ctx.wait_all();
  }
  return 0;
}
