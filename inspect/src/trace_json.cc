// Profiler::chrome_trace: the Trace Event Format that Perfetto and chrome://tracing open.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "depengine/graph.h"
#include "profiler_state.h"

namespace depengine {
namespace {

using ordered_json = nlohmann::ordered_json;

double to_us(std::int64_t ns) { return static_cast<double>(ns) / 1e3; }

// One process per device: the CPU is 1, gpu(i) is 2 + i (pid 0 is avoided by some viewers).
int device_pid(const Device& d) { return d.is_cpu() ? 1 : 2 + d.id; }

// Skipped ops never ran on a worker; they get a track of their own.
constexpr int kSkippedTid = 1 << 20;

ordered_json metadata(const char* what, int pid, int tid, const std::string& name) {
  ordered_json m;
  m["name"] = what;
  m["ph"] = "M";
  m["pid"] = pid;
  m["tid"] = tid;
  m["args"]["name"] = name;
  return m;
}

}  // namespace

std::string Profiler::chrome_trace() const {
  const std::vector<OpProfile> all = ops();
  const auto deps = dependencies();

  ordered_json events = ordered_json::array();
  std::map<int, Device> devices;
  std::map<std::pair<int, int>, std::string> tracks;
  std::map<std::uint64_t, const OpProfile*> by_id;
  for (const OpProfile& p : all) {
    by_id[p.id] = &p;
    const int pid = device_pid(p.device);
    devices.emplace(pid, p.device);
    if (p.skipped || p.start_ns < 0) {
      tracks.emplace(std::make_pair(pid, kSkippedTid), "skipped ops");
    } else if (p.device.is_cpu()) {
      tracks.emplace(std::make_pair(pid, p.worker), "worker " + std::to_string(p.worker));
    } else {
      tracks.emplace(std::make_pair(pid, p.worker),
                     "stream " + std::to_string(p.worker) + " (" + lane_name(p.lane) + ")");
    }
  }
  for (const auto& [pid, device] : devices) {
    events.push_back(metadata("process_name", pid, 0, device.str()));
    ordered_json sort = metadata("process_sort_index", pid, 0, "");
    sort["args"] = {{"sort_index", pid}};
    events.push_back(std::move(sort));
  }
  for (const auto& [key, name] : tracks) {
    events.push_back(metadata("thread_name", key.first, key.second, name));
    ordered_json sort = metadata("thread_sort_index", key.first, key.second, "");
    sort["args"] = {{"sort_index", key.second}};
    events.push_back(std::move(sort));
  }

  for (const OpProfile& p : all) {
    ordered_json e;
    e["name"] = p.name.empty() ? "op " + std::to_string(p.id) : p.name;
    e["cat"] = lane_name(p.lane);
    e["pid"] = device_pid(p.device);
    ordered_json args;
    args["id"] = p.id;
    args["device"] = p.device.str();
    args["lane"] = lane_name(p.lane);
    args["priority"] = p.priority;
    args["push_us"] = to_us(p.push_ns);
    if (p.ready_ns >= 0) {
      args["ready_us"] = to_us(p.ready_ns);
      args["waited_for_inputs_us"] = to_us(p.ready_ns - p.push_ns);
    }
    if (p.skipped || p.start_ns < 0) {
      e["ph"] = "i";
      e["s"] = "t";
      e["tid"] = kSkippedTid;
      e["ts"] = to_us(std::max(p.end_ns, p.push_ns));
      args["skipped"] = p.skipped;
    } else {
      e["ph"] = "X";
      e["tid"] = p.worker;
      e["ts"] = to_us(p.start_ns);
      e["dur"] = to_us(std::max<std::int64_t>(p.end_ns - p.start_ns, 0));
      if (p.ready_ns >= 0) args["queued_us"] = to_us(p.start_ns - p.ready_ns);
      args["failed"] = p.failed;
    }
    e["args"] = std::move(args);
    events.push_back(std::move(e));
  }

  // Flow arrows: from the end of the earlier op's slice to the start of the later one's.
  std::uint64_t flow_id = 0;
  for (const auto& [from_id, to_id] : deps) {
    auto f = by_id.find(from_id);
    auto t = by_id.find(to_id);
    if (f == by_id.end() || t == by_id.end()) continue;
    const OpProfile& a = *f->second;
    const OpProfile& b = *t->second;
    if (a.start_ns < 0 || a.end_ns < 0 || b.start_ns < 0 || a.skipped || b.skipped) continue;
    ++flow_id;
    const double a_end = to_us(a.end_ns);
    const double a_start = to_us(a.start_ns);
    ordered_json s;
    s["name"] = "dependency";
    s["cat"] = "dependency";
    s["ph"] = "s";
    s["id"] = flow_id;
    s["pid"] = device_pid(a.device);
    s["tid"] = a.worker;
    // Inside the slice, which a flow start binds to.
    s["ts"] = std::max(a_start, a_end - std::min(0.001, (a_end - a_start) / 2));
    events.push_back(std::move(s));
    ordered_json e;
    e["name"] = "dependency";
    e["cat"] = "dependency";
    e["ph"] = "f";
    e["bp"] = "e";
    e["id"] = flow_id;
    e["pid"] = device_pid(b.device);
    e["tid"] = b.worker;
    e["ts"] = to_us(b.start_ns);
    events.push_back(std::move(e));
  }

  ordered_json doc;
  doc["displayTimeUnit"] = "ms";
  doc["traceEvents"] = std::move(events);
  doc["otherData"]["generator"] = "depengine profiler";
  doc["otherData"]["ops"] = all.size();
  // Op names are bytes; what is not UTF-8 becomes U+FFFD rather than failing the whole trace.
  return doc.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

void Profiler::write_chrome_trace(const std::string& path) const {
  write_text_file(path, chrome_trace());
}

}  // namespace depengine
