// depengine_histogram: the histogram benchmark (histogram.h) on every runtime and access,
// regular and irregular chunk durations, side by side. Each point is the median of --reps
// timed runs after one warm-up; every run's histogram is checked against the serial loop's.
//
//   depengine_histogram [--threads N] [--reps K] [--log2-values L] [--chunks C]
//                       [--runtimes a,b] [--csv OUT.csv] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "histogram.h"

namespace depengine::histogram {

const char* access_name(Access a) {
  switch (a) {
    case Access::rw:
      return "rw";
    case Access::commute:
      return "commute";
    case Access::reduce:
      return "reduce";
  }
  return "?";
}

namespace {
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
}  // namespace

unsigned Problem::rounds(std::size_t c) const {
  return irregular ? 1 + static_cast<unsigned>(mix(c + 12345) % 8) : 1;
}

void fill_chunk(const Problem& p, std::size_t c, std::uint32_t* out) {
  const std::size_t n = p.chunk_size();
  const unsigned r = p.rounds(c);
  const std::uint64_t base = static_cast<std::uint64_t>(c) * n;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x = base + i;
    for (unsigned k = 0; k < r; ++k) x = mix(x + k);
    out[i] = static_cast<std::uint32_t>(x >> 32);
  }
}

void count_chunk(const Problem& p, const std::uint32_t* in, std::uint64_t* hist) {
  const std::size_t n = p.chunk_size();
  for (std::size_t i = 0; i < n; ++i) ++hist[in[i] >> 22];
}

Runtime serial_runtime() {
  Runtime r{"serial", {Access::rw}, "", {}};
  r.run = [](const Problem& p, Access, std::uint32_t* data, std::uint64_t* hist) {
    for (std::size_t c = 0; c < p.chunks; ++c) {
      std::uint32_t* out = data + c * p.chunk_size();
      fill_chunk(p, c, out);
      count_chunk(p, out, hist);
    }
  };
  return r;
}

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

struct Options {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int reps = 5;
  int log2_values = 26;
  std::size_t chunks = 256;
  // The runtimes this build has (serial first: the others are measured against it).
  std::vector<std::string> runtimes = split(DEPENGINE_HISTOGRAM_RUNTIMES);
  std::string csv;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = std::stoi(value());
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--log2-values") {
      o.log2_values = std::stoi(value());
    } else if (a == "--chunks") {
      o.chunks = std::stoul(value());
    } else if (a == "--runtimes") {
      o.runtimes = split(value());
    } else if (a == "--csv") {
      o.csv = value();
    } else if (a == "--quick") {
      o.log2_values = 18;
      o.reps = 1;
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  if (o.threads < 1 || o.reps < 1 || o.log2_values < 10 || o.log2_values > 30 || o.chunks == 0 ||
      (std::size_t{1} << o.log2_values) % o.chunks != 0) {
    throw std::invalid_argument("bad sizes: threads >= 1, reps >= 1, 10 <= log2-values <= 30, "
                                "chunks dividing 2^log2-values");
  }
  return o;
}

Runtime make(const std::string& name, int threads) {
  if (name == "serial") return serial_runtime();
  if (name == "depengine") return depengine_runtime(threads);
  if (name == "openmp") return openmp_runtime(threads);
  if (name == "starpu") return starpu_runtime(threads);
  if (name == "tbb_ets") return tbb_runtime(threads);
  throw std::invalid_argument("unknown runtime " + name);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int run_all(const Options& o) {
  std::vector<std::uint32_t> data(std::size_t{1} << o.log2_values);
  std::vector<std::uint64_t> expect(kBins, 0), hist(kBins);
  std::printf("histogram: 2^%d values, %zu chunks, %zu bins, %d threads, median of %d runs\n",
              o.log2_values, o.chunks, kBins, o.threads, o.reps);
  std::printf("%-10s %-10s %-8s %10s %8s\n", "durations", "runtime", "access", "ms", "speedup");
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    csv << "durations,runtime,access,threads,median_ms,speedup_vs_serial\n";
  }
  int failures = 0;
  for (bool irregular : {false, true}) {
    Problem p;
    p.values = data.size();
    p.chunks = o.chunks;
    p.irregular = irregular;
    std::fill(expect.begin(), expect.end(), 0);
    serial_runtime().run(p, Access::rw, data.data(), expect.data());
    double serial_ms = 0;
    for (const std::string& name : o.runtimes) {
      Runtime r = make(name, o.threads);
      for (Access a : r.accesses) {
        std::vector<double> ms;
        bool ok = true;
        for (int rep = 0; rep <= o.reps; ++rep) {
          std::fill(hist.begin(), hist.end(), 0);
          const auto t0 = std::chrono::steady_clock::now();
          r.run(p, a, data.data(), hist.data());
          const auto t1 = std::chrono::steady_clock::now();
          if (hist != expect) ok = false;
          if (rep > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        const double m = median(ms);
        if (name == "serial") serial_ms = m;
        const double speedup = serial_ms > 0 ? serial_ms / m : 0;
        std::printf("%-10s %-10s %-8s %10.2f %8.2f%s\n", irregular ? "irregular" : "regular",
                    name.c_str(), access_name(a), m, speedup, ok ? "" : "  FAIL: wrong histogram");
        if (!ok) ++failures;
        if (csv) {
          csv << (irregular ? "irregular" : "regular") << ',' << name << ',' << access_name(a)
              << ',' << o.threads << ',' << m << ',' << speedup << '\n';
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace depengine::histogram

int main(int argc, char** argv) {
  try {
    return depengine::histogram::run_all(depengine::histogram::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "depengine_histogram: %s\n", e.what());
    return 2;
  }
}
