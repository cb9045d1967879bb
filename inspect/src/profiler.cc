// Profiler: per-op timing and the summary tables.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "profiler_state.h"

namespace depengine {

Profiler::Profiler() : state_(std::make_unique<State>()) {}
Profiler::~Profiler() = default;

void Profiler::on_push(const OpInfo& op) {
  const std::int64_t t = state_->now();
  State& s = *state_;
  std::lock_guard lk(s.mu);
  OpProfile p;
  p.id = op.id;
  p.name = std::string(op.name);
  p.device = op.device;
  p.lane = op.lane;
  p.priority = op.priority;
  p.push_ns = t;
  s.index[op.id] = s.ops.size();
  s.ops.push_back(std::move(p));
  s.tracker.add(op.id, op.accesses, s.scratch);
  s.from_scratch.clear();
  for (const detail::Dependency& d : s.scratch) s.from_scratch.push_back(d.from);
  std::sort(s.from_scratch.begin(), s.from_scratch.end());
  s.from_scratch.erase(std::unique(s.from_scratch.begin(), s.from_scratch.end()),
                       s.from_scratch.end());
  for (std::uint64_t from : s.from_scratch) s.deps.emplace_back(from, op.id);
}

void Profiler::on_ready(std::uint64_t id) {
  const std::int64_t t = state_->now();
  std::lock_guard lk(state_->mu);
  if (OpProfile* p = state_->find(id)) p->ready_ns = t;
}

void Profiler::on_start(std::uint64_t id, int worker) {
  const std::int64_t t = state_->now();
  std::lock_guard lk(state_->mu);
  if (OpProfile* p = state_->find(id)) {
    p->start_ns = t;
    p->worker = worker;
    // An op a worker picks up straight after finishing its predecessor may start without
    // a ready event; it became ready when it started.
    if (p->ready_ns < 0) p->ready_ns = t;
  }
}

void Profiler::on_end(std::uint64_t id, bool failed, bool skipped) {
  const std::int64_t t = state_->now();
  std::lock_guard lk(state_->mu);
  if (OpProfile* p = state_->find(id)) {
    p->end_ns = t;
    p->failed = failed;
    p->skipped = skipped;
  }
}

std::vector<OpProfile> Profiler::ops() const {
  std::lock_guard lk(state_->mu);
  return state_->ops;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> Profiler::dependencies() const {
  std::lock_guard lk(state_->mu);
  return state_->deps;
}

std::string name_group(std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '(' || c == '[') return std::string(name.substr(0, i));
    if (c == '_' && i > 0 && i + 1 < name.size() && name[i + 1] >= '0' && name[i + 1] <= '9') {
      return std::string(name.substr(0, i));
    }
  }
  return std::string(name);
}

namespace {

bool ran(const OpProfile& p) { return p.start_ns >= 0 && p.end_ns >= p.start_ns; }

// Total length covered by a set of [start, end) intervals.
double union_ns(std::vector<std::pair<std::int64_t, std::int64_t>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0;
  std::int64_t cur_start = 0, cur_end = -1;
  bool open = false;
  for (auto [a, b] : iv) {
    if (!open || a > cur_end) {
      if (open) total += static_cast<double>(cur_end - cur_start);
      cur_start = a;
      cur_end = b;
      open = true;
    } else {
      cur_end = std::max(cur_end, b);
    }
  }
  if (open) total += static_cast<double>(cur_end - cur_start);
  return total;
}

std::string worker_label(const Device& d, int worker) {
  return d.str() + (d.is_cpu() ? " worker " : " stream ") + std::to_string(worker);
}

}  // namespace

ProfileSummary Profiler::summary() const {
  const std::vector<OpProfile> all = ops();
  ProfileSummary s;
  s.ops = all.size();
  if (all.empty()) return s;
  std::int64_t first = all.front().push_ns, last = first;
  for (const OpProfile& p : all) {
    first = std::min(first, p.push_ns);
    last = std::max({last, p.end_ns, p.push_ns});
    if (p.failed && !p.skipped) ++s.failed;
    if (p.skipped) ++s.skipped;
  }
  const double run_ns = static_cast<double>(std::max<std::int64_t>(last - first, 1));
  s.run_us = static_cast<double>(last - first) / 1e3;

  std::map<std::string, NameSummary> names;
  using LaneKey = std::tuple<int, int, int>;  // device kind, device id, lane
  struct LaneAcc {
    std::size_t ops = 0;
    std::set<int> workers;
    std::vector<std::pair<std::int64_t, std::int64_t>> iv;
    double sum_ns = 0;
  };
  std::map<LaneKey, LaneAcc> lanes;
  std::map<std::tuple<int, int, int>, WorkerSummary> workers;
  for (const OpProfile& p : all) {
    NameSummary& n = names[name_group(p.name)];
    if (!ran(p)) {
      if (p.skipped) ++n.skipped;
      continue;
    }
    const double us = static_cast<double>(p.end_ns - p.start_ns) / 1e3;
    n.min_us = n.count == 0 ? us : std::min(n.min_us, us);
    n.max_us = std::max(n.max_us, us);
    n.total_us += us;
    ++n.count;
    LaneAcc& l = lanes[{static_cast<int>(p.device.kind), p.device.id, static_cast<int>(p.lane)}];
    ++l.ops;
    l.workers.insert(p.worker);
    l.iv.emplace_back(p.start_ns, p.end_ns);
    l.sum_ns += static_cast<double>(p.end_ns - p.start_ns);
    WorkerSummary& w = workers[{static_cast<int>(p.device.kind), p.device.id, p.worker}];
    w.device = p.device;
    w.worker = p.worker;
    ++w.ops;
    w.busy_fraction += static_cast<double>(p.end_ns - p.start_ns) / run_ns;
  }
  for (auto& [name, n] : names) {
    n.name = name;
    n.mean_us = n.count ? n.total_us / static_cast<double>(n.count) : 0;
    s.by_name.push_back(n);
  }
  std::stable_sort(s.by_name.begin(), s.by_name.end(),
                   [](const NameSummary& a, const NameSummary& b) { return a.total_us > b.total_us; });
  for (auto& [key, l] : lanes) {
    LaneSummary ls;
    ls.device = Device{static_cast<Device::Kind>(std::get<0>(key)), std::get<1>(key)};
    ls.lane = static_cast<Lane>(std::get<2>(key));
    ls.ops = l.ops;
    ls.workers = static_cast<int>(l.workers.size());
    ls.busy_fraction = union_ns(std::move(l.iv)) / run_ns;
    ls.mean_concurrency = l.sum_ns / run_ns;
    s.by_lane.push_back(ls);
  }
  for (auto& [key, w] : workers) s.by_worker.push_back(w);
  return s;
}

std::string ProfileSummary::table() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "profile: %zu ops (%zu failed, %zu skipped) over %.3f ms\n",
                ops, failed, skipped, run_us / 1e3);
  out += line;
  std::snprintf(line, sizeof line, "%-24s %7s %7s %12s %10s %10s %10s\n", "op name", "count",
                "skipped", "total ms", "mean us", "min us", "max us");
  out += line;
  for (const NameSummary& n : by_name) {
    std::snprintf(line, sizeof line, "%-24.24s %7zu %7zu %12.3f %10.1f %10.1f %10.1f\n",
                  n.name.c_str(), n.count, n.skipped, n.total_us / 1e3, n.mean_us, n.min_us,
                  n.max_us);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-24s %7s %7s %12s %10s\n", "lane", "ops", "workers", "busy",
                "mean conc");
  out += line;
  for (const LaneSummary& l : by_lane) {
    const std::string name = l.device.str() + " " + lane_name(l.lane);
    std::snprintf(line, sizeof line, "%-24.24s %7zu %7d %11.1f%% %10.2f\n", name.c_str(), l.ops,
                  l.workers, 100 * l.busy_fraction, l.mean_concurrency);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-24s %7s %7s %12s\n", "worker", "ops", "", "busy");
  out += line;
  for (const WorkerSummary& w : by_worker) {
    std::snprintf(line, sizeof line, "%-24.24s %7zu %7s %11.1f%%\n",
                  worker_label(w.device, w.worker).c_str(), w.ops, "", 100 * w.busy_fraction);
    out += line;
  }
  return out;
}

}  // namespace depengine
