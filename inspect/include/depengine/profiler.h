// depengine/profiler.h — per-operation timing: push, ready, start and end times, worker
// and lane; a Chrome trace (Perfetto, chrome://tracing) and a summary per op name and lane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "depengine/device.h"
#include "depengine/observer.h"

namespace depengine {

// What the profiler saw of one operation. Times are nanoseconds since the profiler was
// made; -1 for an event that did not happen (a skipped op never starts).
struct OpProfile {
  std::uint64_t id = 0;
  std::string name;
  Device device;
  Lane lane = Lane::compute;
  int priority = 0;
  int worker = -1;  // the CPU worker or GPU stream index; -1 when it never started
  std::int64_t push_ns = -1;
  std::int64_t ready_ns = -1;
  std::int64_t start_ns = -1;
  std::int64_t end_ns = -1;
  bool failed = false;
  bool skipped = false;
};

// Run times of the ops sharing a name group (the name up to an index suffix: "gemm_2_1"
// and "gemm(3)" are both "gemm").
struct NameSummary {
  std::string name;
  std::size_t count = 0;    // ops that ran
  std::size_t skipped = 0;  // ops skipped because an input had failed
  double total_us = 0, mean_us = 0, min_us = 0, max_us = 0;
};

// One lane of one device: how much of the run it was busy.
struct LaneSummary {
  Device device;
  Lane lane = Lane::compute;
  std::size_t ops = 0;
  int workers = 0;              // distinct workers that ran its ops
  double busy_fraction = 0;     // share of the run with at least one of its ops running
  double mean_concurrency = 0;  // sum of its op times / the run's length
};

// One worker (CPU worker or GPU stream) of one device.
struct WorkerSummary {
  Device device;
  int worker = 0;
  std::size_t ops = 0;
  double busy_fraction = 0;
};

struct ProfileSummary {
  double run_us = 0;  // first push to last end
  std::size_t ops = 0, failed = 0, skipped = 0;
  std::vector<NameSummary> by_name;  // by total time, largest first
  std::vector<LaneSummary> by_lane;
  std::vector<WorkerSummary> by_worker;

  // The summary as aligned text tables.
  std::string table() const;
};

// The group an op name is summarized under: the name up to the first "_<digit>", "(" or
// "[" ("trsm_1_0" -> "trsm"); the whole name when there is none.
std::string name_group(std::string_view name);

// An observer that times every operation. Attach it to an engine (alone, or with a
// GraphRecorder through ObserverFanout), run, then write the trace.
//
//   auto prof = std::make_shared<depengine::Profiler>();
//   engine->set_observer(prof);
//   ... pushes ...; engine->wait_all();
//   prof->write_chrome_trace("trace.json");
//   std::puts(prof->summary().table().c_str());
//
// All members are thread-safe.
class Profiler : public Observer {
 public:
  Profiler();
  ~Profiler() override;

  void on_push(const OpInfo& op) override;
  void on_ready(std::uint64_t id) override;
  void on_start(std::uint64_t id, int worker) override;
  void on_end(std::uint64_t id, bool failed, bool skipped) override;

  // Every op seen so far, in push order.
  std::vector<OpProfile> ops() const;
  // The distinct (earlier op id, later op id) pairs the contract orders, in push order of
  // the later op.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> dependencies() const;
  ProfileSummary summary() const;

  // Chrome trace JSON: one process per device, one track per worker, a slice per op with
  // its push/ready times in args, flow arrows along dependency edges between ops that ran.
  std::string chrome_trace() const;
  // Writes chrome_trace() to `path`; throws Error when it cannot.
  void write_chrome_trace(const std::string& path) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace depengine
