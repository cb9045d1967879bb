// depengine_peers: runs Task Bench's patterns on depengine and its peers, side by side, and
// reports ns per empty task, efficiency against the serial loop, and METG(50%).
//
//   depengine_peers                     # the full sweep (about 10 minutes on 2 cores)
//   depengine_peers --quick             # a small sweep that checks every runtime's results
//   depengine_peers --csv out.csv --md docs/benchmarks.md --plot-script out.gp
//
// Every run of every runtime is checked against the serial loop's final values; the exit
// status is 1 when one differs (or a runtime fails), so the quick mode is a test.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/utsname.h>

#include "machine.h"
#include "runtime.h"

namespace depengine::peers {
namespace {

using Clock = std::chrono::steady_clock;

// Ends the process, naming the run, when one run takes far longer than it may: a runtime
// that loses a task would otherwise hang the sweep (and the smoke test) without a culprit.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) : limit_(limit), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(std::string what) {
    std::lock_guard lk(mu_);
    what_ = std::move(what);
    deadline_ = Clock::now() + limit_;
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard lk(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lk);
      } else if (cv_.wait_until(lk, deadline_) == std::cv_status::timeout && armed_ &&
                 Clock::now() >= deadline_) {
        std::cout << "FAIL " << what_ << ": no result after " << limit_.count()
                  << " s (a lost task or a deadlock)" << std::endl;
        std::_Exit(1);
      }
    }
  }
  const std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  Clock::time_point deadline_;
  std::string what_;
  std::thread thread_;
};

struct Options {
  bool quick = false;
  int threads = 0;
  int reps = 5;
  int warmup = 1;
  double budget_ms = 25;     // serial work per point at sizes > 0
  std::size_t max_tasks = 10000;
  // A runtime whose runs at one point add up to more than this stops repeating there once
  // it has 3 measured runs (such points are far from 50% efficiency anyway).
  double max_point_s = 2;
  std::size_t min_tasks = 64;
  std::vector<double> sizes_us = {0, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000};
  std::vector<Pattern> patterns{std::begin(kPatterns), std::end(kPatterns)};
  std::vector<std::string> runtimes;  // empty: all
  int watchdog_s = 120;               // a single run longer than this fails the sweep
  std::string csv, md, plot_script, plot_dir = "benchmarks";
  // Raw samples: written after a run (one line per timed run), or read instead of running,
  // so that several processes' runs can be merged (each process has its own thread
  // placement, which on a small shared machine can shift a whole run by 2-4x).
  std::string raw_out;
  std::vector<std::string> raw_in;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "depengine_peers: " << why << "\n"
            << "usage: depengine_peers [--quick] [--threads N] [--reps N] [--warmup N]\n"
               "         [--budget-ms MS] [--max-tasks N] [--sizes US,US,...]\n"
               "         [--patterns a,b,...] [--runtimes a,b,...]\n"
               "         [--csv FILE] [--md FILE] [--plot-script FILE] [--plot-dir DIR]\n"
               "         [--raw-out FILE] [--raw-in FILE,FILE,...]\n";
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  std::optional<int> reps;
  std::optional<std::vector<double>> sizes;
  std::optional<double> budget;
  std::optional<std::size_t> max_tasks;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--quick") {
        o.quick = true;
      } else if (a == "--threads") {
        o.threads = std::stoi(value());
      } else if (a == "--reps") {
        reps = std::stoi(value());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(value());
      } else if (a == "--budget-ms") {
        budget = std::stod(value());
      } else if (a == "--max-tasks") {
        max_tasks = std::stoul(value());
      } else if (a == "--sizes") {
        sizes.emplace();
        for (const std::string& s : split(value())) sizes->push_back(std::stod(s));
      } else if (a == "--patterns") {
        o.patterns.clear();
        for (const std::string& s : split(value())) o.patterns.push_back(parse_pattern(s));
      } else if (a == "--runtimes") {
        o.runtimes = split(value());
      } else if (a == "--csv") {
        o.csv = value();
      } else if (a == "--md") {
        o.md = value();
      } else if (a == "--plot-script") {
        o.plot_script = value();
      } else if (a == "--plot-dir") {
        o.plot_dir = value();
      } else if (a == "--raw-out") {
        o.raw_out = value();
      } else if (a == "--raw-in") {
        o.raw_in = split(value());
      } else {
        usage("unknown argument " + a);
      }
    } catch (const std::logic_error& e) {
      usage("bad value for " + a + ": " + e.what());
    }
  }
  if (o.quick) {
    o.reps = 3;
    o.warmup = 0;
    o.budget_ms = 2;
    o.max_tasks = 1000;
    o.min_tasks = 32;
    o.sizes_us = {0, 2, 16};
    o.watchdog_s = 20;
  }
  if (reps) o.reps = *reps;
  if (sizes) o.sizes_us = *sizes;
  if (budget) o.budget_ms = *budget;
  if (max_tasks) o.max_tasks = *max_tasks;
  if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.reps < 1 || o.warmup < 0 || o.sizes_us.empty()) usage("need reps >= 1 and some sizes");
  std::sort(o.sizes_us.begin(), o.sizes_us.end());
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One (pattern, size): the graph and the serial loop's final values.
struct Point {
  Pattern pattern;
  double size_us;
  std::uint64_t iters;
  std::unique_ptr<Graph> graph;
  std::vector<Slot> reference;
  std::size_t span;
};

struct Sample {
  std::vector<double> wall;  // this runtime's timed runs, seconds
  std::string error;                 // first failure or mismatch
};

// Results by runtime name, then point index.
using Results = std::map<std::string, std::map<std::size_t, Sample>>;

// The 1-minute load average, or "?".
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  return in >> first ? first : "?";
}

std::string machine_line(int threads, const std::vector<RuntimeEntry>& entries) {
  std::string cpu = "unknown CPU";
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("model name", 0) == 0) {
        cpu = line.substr(line.find(':') + 2);
        break;
      }
    }
  }
  std::string os;
  {
    std::ifstream in("/etc/os-release");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("PRETTY_NAME=", 0) == 0) {
        os = line.substr(12);
        os.erase(std::remove(os.begin(), os.end(), '"'), os.end());
      }
    }
  }
  utsname u{};
  uname(&u);
  std::ostringstream s;
  s << cpu << ", " << std::thread::hardware_concurrency() << " cores, " << threads
    << " worker threads; " << (os.empty() ? u.sysname : os) << " (Linux " << u.release
    << "), g++ " << __VERSION__;
  for (const RuntimeEntry& e : entries) {
    if (!e.version.empty() && e.missing.empty() && s.str().find(e.version) == std::string::npos) {
      s << ", " << e.version;
    }
  }
  return s.str();
}

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)), watchdog_(std::chrono::seconds(o_.watchdog_s)) {}

  int run() {
    collect_runtimes();
    const double rate = busy_rounds_per_ns();
    std::cout << "depengine_peers: " << o_.threads << " threads, " << o_.reps << " reps (+"
              << o_.warmup << " warm-up), busy loop " << std::fixed << std::setprecision(3)
              << rate << " rounds/ns\n";
    build_points(rate);
    for (const RuntimeEntry& e : entries_) {
      if (!e.missing.empty()) std::cout << "  " << e.name << ": missing (" << e.missing << ")\n";
    }
    if (!o_.raw_in.empty()) {
      for (const std::string& f : o_.raw_in) read_raw(f);
    } else {
      load_start_ = load_average();
      // Between two cores only: on one CPU the probe would time context switches.
      const bool probe = bench::usable_cpus() >= 2;
      if (probe) handoff_start_ = std::to_string(std::lround(bench::line_transfer_ns()));
      for (const std::vector<const RuntimeEntry*>& phase : phases()) run_phase(phase);
      if (probe) handoff_end_ = std::to_string(std::lround(bench::line_transfer_ns()));
      load_end_ = load_average();
      if (!o_.raw_out.empty()) write_raw();
    }
    if (!handoff_start_.empty()) {
      std::cout << "cache-line hand-off between two threads (workloads/machine.h): "
                << handoff_start_ << " ns at the start, " << handoff_end_ << " ns at the end\n";
    }
    std::cout << "load average (1 min): " << load_start_ << " at the start, " << load_end_
              << " at the end\n";
    report();
    return failures_ == 0 ? 0 : 1;
  }

 private:
  void collect_runtimes() {
    std::vector<RuntimeEntry> all;
    for (auto* f : {depengine_runtimes, serial_runtimes, openmp_runtimes, tbb_flow_runtimes,
                    taskflow_runtimes, starpu_runtimes}) {
      for (RuntimeEntry& e : f()) all.push_back(std::move(e));
    }
    for (const std::string& want : o_.runtimes) {
      if (std::none_of(all.begin(), all.end(), [&](const RuntimeEntry& e) { return e.name == want; })) {
        usage("unknown runtime '" + want + "'");
      }
    }
    for (RuntimeEntry& e : all) {
      const bool wanted = o_.runtimes.empty() || e.name == "serial" ||
                          std::find(o_.runtimes.begin(), o_.runtimes.end(), e.name) != o_.runtimes.end();
      if (wanted) entries_.push_back(std::move(e));
    }
  }

  // The non-exclusive runtimes together (the serial loop among them, so that the baseline
  // of every efficiency is measured beside the runtimes whose idle threads sleep), then each
  // exclusive one alone. Idle StarPU workers slow a serial loop beside them down by up to
  // 5x, even paused, which would flatter StarPU's efficiency; so its phase has no serial run.
  std::vector<std::vector<const RuntimeEntry*>> phases() const {
    std::vector<const RuntimeEntry*> shared;
    std::vector<std::vector<const RuntimeEntry*>> out;
    for (const RuntimeEntry& e : entries_) {
      if (!e.missing.empty()) continue;
      if (!e.exclusive) {
        shared.push_back(&e);
      } else {
        out.push_back({&e});
      }
    }
    out.insert(out.begin(), shared);
    return out;
  }

  void build_points(double rate) {
    for (Pattern p : o_.patterns) {
      for (double us : o_.sizes_us) {
        std::size_t tasks = o_.max_tasks;
        if (us > 0) {
          tasks = static_cast<std::size_t>(o_.budget_ms * 1e3 / us);
          tasks = std::clamp(tasks, o_.min_tasks, o_.max_tasks);
        }
        Point pt{p, us, static_cast<std::uint64_t>(std::llround(us * 1e3 * rate)),
                 std::make_unique<Graph>(p, tasks, o_.threads), {}, 0};
        pt.reference = pt.graph->initial_values();
        const std::vector<Task>& ts = pt.graph->tasks();
        for (std::size_t k = 0; k < ts.size(); ++k) run_task(ts[k], k, pt.reference.data(), pt.iters);
        pt.span = pt.graph->span();
        points_.push_back(std::move(pt));
      }
    }
  }

  void run_phase(const std::vector<const RuntimeEntry*>& phase) {
    std::vector<std::unique_ptr<Runtime>> rts;
    std::vector<const RuntimeEntry*> live;
    std::string names;
    for (const RuntimeEntry* e : phase) {
      try {
        rts.push_back(e->make(o_.threads));
        live.push_back(e);
        names += " " + e->name;
      } catch (const std::exception& ex) {
        fail(e->name, "failed to start: " + std::string(ex.what()));
      }
    }
    std::cout << "phase:" << names << "\n" << std::flush;
    const auto t0 = Clock::now();
    for (std::size_t pi = 0; pi < points_.size(); ++pi) {
      const Point& pt = points_[pi];
      std::vector<Slot> values;
      for (int rep = 0; rep < o_.warmup + o_.reps; ++rep) {
        std::vector<double> walls(live.size(), -1);
        for (std::size_t r = 0; r < live.size(); ++r) {
          Sample& s = results_[live[r]->name][pi];
          if (!s.error.empty()) continue;
          if (s.wall.size() >= 3 && sum(s.wall) > o_.max_point_s) continue;
          // Lets the previous runtime's idle threads stop spinning before the next starts:
          // libgomp's spin for 300,000 pauses (GOMP_SPINCOUNT) lasts ~7 ms on this CPU, and a
          // 2 ms gap let it take a core from the next runtime (depengine's tree pattern after
          // OpenMP: 406 ns per empty task against 233 with the spin cut short).
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          values = pt.graph->initial_values();
          watchdog_.arm(live[r]->name + ": " + point_name(pt));
          try {
            rts[r]->prepare(*pt.graph, values.data(), pt.iters);
            const auto start = Clock::now();
            rts[r]->run(*pt.graph, values.data(), pt.iters);
            walls[r] = std::chrono::duration<double>(Clock::now() - start).count();
            rts[r]->release();
            watchdog_.disarm();
          } catch (const std::exception& ex) {
            watchdog_.disarm();
            fail(live[r]->name, point_name(pt) + ": " + ex.what());
            s.error = ex.what();
            continue;
          }
          if (!same(values, pt.reference)) {
            s.error = "final values differ from the serial loop's";
            fail(live[r]->name, point_name(pt) + ": " + s.error);
          }
        }
        if (rep < o_.warmup) continue;
        for (std::size_t r = 0; r < live.size(); ++r) {
          if (walls[r] >= 0) results_[live[r]->name][pi].wall.push_back(walls[r]);
        }
      }
      if (pt.size_us == o_.sizes_us.back()) {
        std::cout << "  " << pattern_name(pt.pattern) << " done at "
                  << std::chrono::duration<double>(Clock::now() - t0).count() << " s; timed s:";
        for (const RuntimeEntry* e : live) {
          double total = 0;
          for (std::size_t pj = 0; pj <= pi; ++pj) {
            if (points_[pj].pattern == pt.pattern) {
              if (const Sample* s = sample(e->name, pj)) total += sum(s->wall);
            }
          }
          std::cout << " " << e->name << " " << std::setprecision(2) << total;
        }
        std::cout << "\n" << std::flush;
      }
    }
    // Runtimes are destroyed here, before the next phase starts its own.
  }

  static double sum(const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return t;
  }

  static bool same(const std::vector<Slot>& a, const std::vector<Slot>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const Slot& x, const Slot& y) { return x.value == y.value; });
  }

  static std::string point_name(const Point& pt) {
    std::ostringstream s;
    s << pattern_name(pt.pattern) << " @ " << pt.size_us << " us";
    return s.str();
  }

  void fail(const std::string& runtime, const std::string& what) {
    ++failures_;
    std::cout << "FAIL " << runtime << ": " << what << "\n" << std::flush;
  }

  // Efficiency of `runtime` at point pi, or nullopt (size 0, no data, or serial missing).
  std::optional<double> efficiency(const std::string& runtime, std::size_t pi) const {
    if (points_[pi].size_us == 0) return std::nullopt;
    const Sample* s = sample(runtime, pi);
    const Sample* base = sample("serial", pi);
    if (!s || s->wall.empty() || !s->error.empty() || !base || base->wall.empty()) {
      return std::nullopt;
    }
    return median(base->wall) / (o_.threads * median(s->wall));
  }

  const Sample* sample(const std::string& runtime, std::size_t pi) const {
    auto it = results_.find(runtime);
    if (it == results_.end()) return nullptr;
    auto jt = it->second.find(pi);
    return jt == it->second.end() ? nullptr : &jt->second;
  }

  // METG(50%) in microseconds: the smallest task size from which on efficiency stays >= 50%,
  // interpolated (log-linearly) between the two sizes where it crosses. nullopt: not reached
  // at the largest size. `bounded` is set when it holds already at the smallest size.
  std::optional<double> metg(const std::string& runtime, Pattern p, bool& bounded) const {
    std::vector<std::pair<double, double>> curve;  // size, efficiency
    for (std::size_t pi = 0; pi < points_.size(); ++pi) {
      if (points_[pi].pattern != p || points_[pi].size_us == 0) continue;
      auto e = efficiency(runtime, pi);
      if (!e) return std::nullopt;
      curve.emplace_back(points_[pi].size_us, *e);
    }
    bounded = false;
    if (curve.empty() || curve.back().second < 0.5) return std::nullopt;
    std::size_t k = curve.size() - 1;
    while (k > 0 && curve[k - 1].second >= 0.5) --k;
    if (k == 0) {
      bounded = true;
      return curve[0].first;
    }
    const auto [s0, e0] = curve[k - 1];
    const auto [s1, e1] = curve[k];
    const double f = (0.5 - e0) / (e1 - e0);
    return std::exp(std::log(s0) + f * (std::log(s1) - std::log(s0)));
  }

  std::optional<double> ns_per_task(const std::string& runtime, Pattern p) const {
    for (std::size_t pi = 0; pi < points_.size(); ++pi) {
      if (points_[pi].pattern != p || points_[pi].size_us != 0) continue;
      const Sample* s = sample(runtime, pi);
      if (!s || s->wall.empty() || !s->error.empty()) return std::nullopt;
      return median(s->wall) * 1e9 / static_cast<double>(points_[pi].graph->tasks().size());
    }
    return std::nullopt;
  }

  // Runtimes whose efficiency can exceed 1/threads: METG is meaningful for them only.
  static bool parallel(const std::string& name) {
    return name != "serial" && name != "depengine-naive";
  }

  const RuntimeEntry& entry(const std::string& name) const {
    for (const RuntimeEntry& e : entries_) {
      if (e.name == name) return e;
    }
    throw std::logic_error("no runtime " + name);
  }

  std::string cell_ns(const std::string& rt, Pattern p) const {
    if (!entry(rt).missing.empty()) return "missing";
    auto v = ns_per_task(rt, p);
    if (!v) return "failed";
    std::ostringstream s;
    s << std::fixed << std::setprecision(0) << *v;
    return s.str();
  }

  std::string cell_metg(const std::string& rt, Pattern p) const {
    if (!entry(rt).missing.empty()) return "missing";
    if (!parallel(rt)) return "n/a";
    bool bounded = false;
    auto v = metg(rt, p, bounded);
    std::ostringstream s;
    if (!v) {
      s << "> " << o_.sizes_us.back();
    } else {
      s << (bounded ? "<= " : "");
      if (*v < 10) {
        s << std::setprecision(2) << *v;
      } else {
        s << std::fixed << std::setprecision(0) << *v;
      }
    }
    return s.str();
  }

  void report() const {
    std::vector<std::string> names;
    for (const RuntimeEntry& e : entries_) names.push_back(e.name);
    auto table = [&](const char* title, auto cell, bool markdown) {
      std::ostringstream s;
      if (markdown) {
        s << "| " << title << " | parallelism |";
        for (const auto& n : names) s << " " << n << " |";
        s << "\n|---|---:|";
        for (std::size_t i = 0; i < names.size(); ++i) s << "---:|";
        s << "\n";
      } else {
        s << std::left << std::setw(12) << title << std::right << std::setw(12) << "parallel.";
        for (const auto& n : names) s << std::setw(16) << n;
        s << "\n";
      }
      for (Pattern p : o_.patterns) {
        std::string par = parallelism(p);
        if (markdown) {
          s << "| " << pattern_name(p) << " | " << par << " |";
          const std::string best = best_of(p, cell);
          for (const auto& n : names) {
            const std::string c = cell(n, p);
            s << " " << (n == best ? "**" + c + "**" : c) << " |";
          }
        } else {
          s << std::left << std::setw(12) << pattern_name(p) << std::right << std::setw(12) << par;
          for (const auto& n : names) s << std::setw(16) << cell(n, p);
        }
        s << "\n";
      }
      return s.str();
    };
    auto ns = [&](const std::string& n, Pattern p) { return cell_ns(n, p); };
    auto mg = [&](const std::string& n, Pattern p) { return cell_metg(n, p); };
    std::cout << "\nns per task at size 0 (median of " << o_.reps << ")\n"
              << table("pattern", ns, false) << "\nMETG(50%) in us\n"
              << table("pattern", mg, false) << std::flush;
    if (!o_.csv.empty()) write_csv();
    if (!o_.md.empty()) write_md(table("pattern", ns, true), table("pattern", mg, true));
    if (!o_.plot_script.empty()) write_plot_script();
    if (failures_) std::cout << "\n" << failures_ << " FAILURES\n";
  }

  // The parallelism of the pattern's graph at the largest task count: tasks / span.
  std::string parallelism(Pattern p) const {
    for (const Point& pt : points_) {
      if (pt.pattern == p && pt.size_us == 0) {
        std::ostringstream s;
        s << std::fixed << std::setprecision(1)
          << static_cast<double>(pt.graph->tasks().size()) / static_cast<double>(pt.span);
        return s.str();
      }
    }
    return "?";
  }

  // The parallel runtime with the smallest value in the row (for bold), "" if none.
  template <class Cell>
  std::string best_of(Pattern p, Cell cell) const {
    std::string best;
    double best_v = 0;
    for (const RuntimeEntry& e : entries_) {
      if (!parallel(e.name) || !e.missing.empty()) continue;
      const std::string c = cell(e.name, p);
      if (c.empty() || !(std::isdigit(static_cast<unsigned char>(c[0])) || c[0] == '<')) continue;
      const double v = std::stod(c[0] == '<' ? c.substr(3) : c);
      if (best.empty() || v < best_v) {
        best = e.name;
        best_v = v;
      }
    }
    return best;
  }

  // One line per timed run: pattern,runtime,task_us,wall_s (wall "error:..." for a failed
  // point), after a header line holding the load averages of the run.
  void write_raw() const {
    std::ofstream out(o_.raw_out);
    out << "# load " << load_start_ << " " << load_end_ << "\n";
    if (!handoff_start_.empty()) {
      out << "# handoff " << handoff_start_ << " " << handoff_end_ << "\n";
    }
    for (const auto& [name, by_point] : results_) {
      for (const auto& [pi, s] : by_point) {
        const Point& pt = points_[pi];
        const std::string head = std::string(pattern_name(pt.pattern)) + "," + name + ",";
        if (!s.error.empty()) {
          std::string e = s.error;
          std::replace(e.begin(), e.end(), '\n', ' ');
          out << head << pt.size_us << ",error:" << e << "\n";
          continue;
        }
        for (double w : s.wall) out << head << pt.size_us << "," << std::setprecision(9) << w << "\n";
      }
    }
    if (!out) throw std::runtime_error("cannot write " + o_.raw_out);
    std::cout << "wrote " << o_.raw_out << "\n";
  }

  // Adds the runs of a --raw-out file to the results; the points and runtimes must be those
  // of this invocation (same --patterns, --sizes, --runtimes).
  void read_raw(const std::string& file) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot read " + file);
    // A header line "# TAG A B": the figures before and after that file's runs, joined to
    // those of the files read before it ("a/b").
    auto header = [](const std::string& line, const std::string& tag, std::string& start,
                     std::string& end) {
      if (line.rfind(tag, 0) != 0) return false;
      std::istringstream l(line.substr(tag.size()));
      std::string a, b;
      l >> a >> b;
      start = start.empty() ? a : start + "/" + a;
      end = end.empty() ? b : end + "/" + b;
      return true;
    };
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (header(line, "# load ", load_start_, load_end_) ||
          header(line, "# handoff ", handoff_start_, handoff_end_)) {
        continue;
      }
      const std::vector<std::string> f = split(line);
      auto bad = [&](const std::string& why) {
        throw std::runtime_error(file + ":" + std::to_string(line_no) + ": " + why);
      };
      if (f.size() < 4) bad("expected pattern,runtime,task_us,wall_s");
      const Pattern p = parse_pattern(f[0]);
      const double us = std::stod(f[2]);
      std::size_t pi = points_.size();
      for (std::size_t i = 0; i < points_.size(); ++i) {
        if (points_[i].pattern == p && std::abs(points_[i].size_us - us) < 1e-9) pi = i;
      }
      if (pi == points_.size()) bad("point " + f[0] + " at " + f[2] + " us is not in this sweep");
      if (std::none_of(entries_.begin(), entries_.end(),
                       [&](const RuntimeEntry& e) { return e.name == f[1]; })) {
        bad("runtime " + f[1] + " is not in this sweep");
      }
      Sample& s = results_[f[1]][pi];
      if (f[3].rfind("error:", 0) == 0) {
        // The message is the rest of the line (it may hold commas).
        if (s.error.empty()) s.error = line.substr(line.find("error:") + 6);
      } else {
        s.wall.push_back(std::stod(f[3]));
      }
    }
  }

  void write_csv() const {
    std::ofstream out(o_.csv);
    out << "pattern,runtime,threads,task_us,tasks,span,reps,wall_median_s,wall_min_s,wall_max_s,"
           "ns_per_task,serial_median_s,efficiency,status\n";
    for (const RuntimeEntry& e : entries_) {
      for (std::size_t pi = 0; pi < points_.size(); ++pi) {
        const Point& pt = points_[pi];
        const std::size_t n = pt.graph->tasks().size();
        out << pattern_name(pt.pattern) << "," << e.name << "," << o_.threads << "," << pt.size_us
            << "," << n << "," << pt.span << ",";
        const Sample* s = sample(e.name, pi);
        if (!e.missing.empty() || !s || s->wall.empty() || !s->error.empty()) {
          const std::string status = !e.missing.empty() ? "missing" : "failed";
          out << "0,,,,,,," << status << "\n";
          continue;
        }
        const double med = median(s->wall);
        out << s->wall.size() << "," << med << ","
            << *std::min_element(s->wall.begin(), s->wall.end()) << ","
            << *std::max_element(s->wall.begin(), s->wall.end()) << "," << med * 1e9 / double(n)
            << ",";
        if (const Sample* base = sample("serial", pi); base && !base->wall.empty()) {
          out << median(base->wall);
        }
        out << ",";
        if (auto eff = efficiency(e.name, pi)) out << *eff;
        out << ",ok\n";
      }
    }
    std::cout << "wrote " << o_.csv << "\n";
  }

  void write_md(const std::string& ns_table, const std::string& metg_table) const {
    std::ostringstream s;
    s << "<!-- peers:begin (generated by bench/peers/run.sh; edits here are overwritten) -->\n"
      << "## depengine and its peers (Task Bench patterns)\n\n"
      << "Machine: " << machine_line(o_.threads, entries_) << ". Load average (1 min) "
      << load_start_ << " at the start of the sweep and " << load_end_
      << " at the end: the machine is shared, and other load lowers every parallel "
      << "runtime's efficiency."
      << (handoff_start_.empty()
              ? std::string()
              : " One cache line passed between two threads took " + handoff_start_ +
                    " ns at the start and " + handoff_end_ +
                    " ns at the end (workloads/machine.h; on a shared virtual machine it moves "
                    "between about 50 and about 250 ns as the host places the cores).")
      << "\n\n"
      << "Command: `bench/peers/run.sh` (median of "
      << (o_.raw_in.empty() ? "" : std::to_string(o_.raw_in.size()) + " processes × ") << o_.reps
      << " runs per point, each process after " << o_.warmup
      << " warm-up run; every run checked against the serial loop's final values). "
      << "Raw data: [peers.csv](" << o_.plot_dir << "/peers.csv).\n\n"
      << "Threads: `depengine` has " << o_.threads << " workers plus the frontend thread, "
      << "which pushes and then runs ops while it waits in `wait_all`; `depengine-lean` has "
      << std::max(1, o_.threads - 1) << " worker(s) plus the frontend thread, the same count as "
      << "OpenMP's team and oneTBB's arena (" << o_.threads << ", their master thread "
      << "included); `depengine-bounded` is `depengine` with at most 4,096 ops in flight "
      << "(back-pressure; every other runtime is unbounded); StarPU has " << o_.threads
      << " workers plus the submitting thread.\n\n"
      << "**Overhead: ns per task at task size 0** (wall time of submitting and running "
      << o_.max_tasks << " empty tasks, divided by their number; lower is better, best "
      << "parallel runtime in bold). *parallelism* is the graph's tasks / critical path.\n\n"
      << ns_table << "\n"
      << "**METG(50%) in µs**: the smallest task size from which on the efficiency, serial time "
      << "/ (" << o_.threads << " threads × wall time), stays at or above 50% "
      << "(interpolated between the measured sizes; `<=` means it already holds at the "
      << "smallest size, `>` never up to the largest). Lower is better. n/a: a serial runtime "
      << "cannot exceed 1/" << o_.threads << ".\n\n"
      << metg_table << "\n"
      << "![Efficiency vs task size](" << o_.plot_dir << "/peers_efficiency.png)\n\n"
      << "![Overhead per empty task](" << o_.plot_dir << "/peers_overhead.png)\n\n"
      << "![METG(50%)](" << o_.plot_dir << "/peers_metg.png)\n"
      << "<!-- peers:end -->\n";
    std::string doc;
    {
      std::ifstream in(o_.md);
      std::stringstream b;
      b << in.rdbuf();
      doc = b.str();
    }
    const std::string begin = "<!-- peers:begin", end = "<!-- peers:end -->\n";
    const auto b = doc.find(begin), e = doc.find(end);
    if (b != std::string::npos && e != std::string::npos && e > b) {
      doc.replace(b, e + end.size() - b, s.str());
    } else {
      if (doc.empty()) doc = "# Benchmarks\n\n";
      doc += s.str();
    }
    std::ofstream(o_.md) << doc;
    std::cout << "wrote " << o_.md << "\n";
  }

  // A self-contained gnuplot script (data inline) writing three PNGs into `plot_dir`.
  void write_plot_script() const {
    std::vector<const RuntimeEntry*> par;
    for (const RuntimeEntry& e : entries_) {
      if (parallel(e.name) && e.missing.empty()) par.push_back(&e);
    }
    std::ostringstream g;
    g << "# Generated by depengine_peers; run with gnuplot from the directory the PNGs go to.\n"
      << "set datafile missing '?'\n";
    // Efficiency: a block per pattern, a column per parallel runtime.
    g << "$eff << EOD\n";
    for (Pattern p : o_.patterns) {
      g << "# " << pattern_name(p) << "\n";
      for (std::size_t pi = 0; pi < points_.size(); ++pi) {
        if (points_[pi].pattern != p || points_[pi].size_us == 0) continue;
        g << points_[pi].size_us;
        for (const RuntimeEntry* e : par) {
          auto v = efficiency(e->name, pi);
          g << " " << (v ? std::to_string(*v) : "?");
        }
        g << "\n";
      }
      g << "\n\n";
    }
    g << "EOD\n";
    // Overhead and METG: a row per pattern, a column per runtime.
    auto bars = [&](const char* name, auto value, bool all) {
      g << "$" << name << " << EOD\npattern";
      for (const RuntimeEntry& e : entries_) {
        if ((all || parallel(e.name)) && e.missing.empty()) g << " " << e.name;
      }
      g << "\n";
      for (Pattern p : o_.patterns) {
        g << pattern_name(p);
        for (const RuntimeEntry& e : entries_) {
          if (!(all || parallel(e.name)) || !e.missing.empty()) continue;
          auto v = value(e.name, p);
          g << " " << (v ? std::to_string(*v) : "?");
        }
        g << "\n";
      }
      g << "EOD\n";
    };
    bars("ovh", [&](const std::string& n, Pattern p) { return ns_per_task(n, p); }, true);
    // Not reached up to the largest size: drawn at twice the largest size.
    const double ceiling = 2 * o_.sizes_us.back();
    bars("metg", [&](const std::string& n, Pattern p) -> std::optional<double> {
      bool bounded = false;
      return metg(n, p, bounded).value_or(ceiling);
    }, false);
    const std::size_t ncols = par.size();
    std::size_t nall = 0;
    for (const RuntimeEntry& e : entries_) nall += e.missing.empty() ? 1 : 0;
    g << "set terminal pngcairo noenhanced size 1500,1200 font ',10'\n"
      << "set output 'peers_efficiency.png'\n"
      << "set multiplot layout 3,3 title 'Efficiency = serial / (" << o_.threads
      << " x wall) vs task size; " << o_.threads << " threads'\n"
      << "set logscale x\nset xrange [" << o_.sizes_us[o_.sizes_us[0] == 0 ? 1 : 0] / 1.5 << ":"
      << o_.sizes_us.back() * 1.5 << "]\nset yrange [0:1.2]\nset grid\n"
      << "set xlabel 'task size (us)'\nset ylabel 'efficiency'\nset key bottom right\n";
    for (std::size_t i = 0; i < o_.patterns.size(); ++i) {
      g << "set title '" << pattern_name(o_.patterns[i]) << "'\nplot ";
      for (std::size_t c = 0; c < ncols; ++c) {
        g << "$eff index " << i << " using 1:" << c + 2 << " with linespoints title '"
          << par[c]->name << "', ";
      }
      g << "0.5 with lines dashtype 2 lc 'black' notitle\n";
    }
    g << "unset multiplot\n";
    auto histogram = [&](const char* file, const char* block, const char* ylabel, std::size_t n,
                         const char* title) {
      g << "reset\nset terminal pngcairo noenhanced size 1400,600 font ',10'\nset output '" << file
        << "'\nset title '" << title << "'\nset style data histograms\n"
        << "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
        << "set logscale y\nset grid y\nset ylabel '" << ylabel << "'\nset key top left\n"
        << "set xtics rotate by -20\nplot for [c=2:" << n + 1 << "] $" << block
        << " using c:xtic(1) title columnheader\n";
    };
    histogram("peers_overhead.png", "ovh", "ns per empty task", nall,
              "Overhead per empty task (lower is better)");
    const std::string metg_title = "METG(50%) per pattern (lower is better; a bar at " +
                                   std::to_string(static_cast<int>(ceiling)) +
                                   ": 50% not reached)";
    histogram("peers_metg.png", "metg", "METG(50%) (us)", ncols, metg_title.c_str());
    std::ofstream(o_.plot_script) << g.str();
    std::cout << "wrote " << o_.plot_script << "\n";
  }

  Options o_;
  Watchdog watchdog_;
  std::vector<RuntimeEntry> entries_;
  std::vector<Point> points_;
  Results results_;
  int failures_ = 0;
  std::string load_start_, load_end_;
  // The cache-line hand-off in ns before and after the runs ("a/b/c" over --raw-in files).
  std::string handoff_start_, handoff_end_;
};

}  // namespace
}  // namespace depengine::peers

int main(int argc, char** argv) {
  try {
    return depengine::peers::Bench(depengine::peers::parse(argc, argv)).run();
  } catch (const std::exception& e) {
    std::cerr << "depengine_peers: " << e.what() << "\n";
    return 1;
  }
}
