// trace.cc — one Chrome trace of every rank: each rank's Profiler ops as one process, and a
// flow arrow from each send to the receive that got its message.
#include <charconv>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "depengine/profiler.h"
#include "state.h"

namespace depengine::dist {
namespace {

// The rank after `name[at]` in a transfer's name ("send v3@2>1": 1), or -1: op names are the
// user's, and one may only look like a transfer ("send a>b").
int peer_rank(const std::string& name, std::size_t at) {
  const char* first = name.data() + at + 1;
  const char* last = name.data() + name.size();
  int rank = -1;
  const auto [end, ec] = std::from_chars(first, last, rank);
  return ec == std::errc() && end == last ? rank : -1;
}

// Writes the Chrome trace of every rank's profile (`all`, indexed by rank) to `path`.
void write_merged(const std::string& path, const std::vector<nlohmann::json>& all) {
  const int size = static_cast<int>(all.size());
  std::int64_t t0 = INT64_MAX;
  for (const auto& j : all) t0 = std::min<std::int64_t>(t0, j["origin_ns"].get<std::int64_t>());
  nlohmann::json events = nlohmann::json::array();
  // (var@version, from, to) -> end of the send / end of the receive.
  std::map<std::tuple<std::string, int, int>, std::tuple<int, int, double>> sends, recvs;
  for (int r = 0; r < size; ++r) {
    const auto& j = all[static_cast<std::size_t>(r)];
    const double shift = static_cast<double>(j["origin_ns"].get<std::int64_t>() - t0) / 1e3;
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r}, {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    for (const auto& op : j["ops"]) {
      const std::string name = op[0];
      const int worker = op[1];
      const double ts = op[2].get<double>() / 1e3 + shift, end = op[3].get<double>() / 1e3 + shift;
      events.push_back({{"ph", "X"}, {"name", name}, {"pid", r}, {"tid", worker}, {"ts", ts},
                        {"dur", end - ts}, {"args", {{"failed", op[4].get<bool>()}}}});
      // "send v3@2>1" on rank r, "recv v3@2<0" on rank r.
      const auto gt = name.rfind('>'), lt = name.rfind('<');
      if (name.rfind("send ", 0) == 0 && gt != std::string::npos && peer_rank(name, gt) >= 0)
        sends[{name.substr(5, gt - 5), r, peer_rank(name, gt)}] = {r, worker, end};
      if (name.rfind("recv ", 0) == 0 && lt != std::string::npos && peer_rank(name, lt) >= 0)
        recvs[{name.substr(5, lt - 5), peer_rank(name, lt), r}] = {r, worker, end};
    }
  }
  std::uint64_t flow = 0;
  for (const auto& [key, from] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) continue;
    const auto& [fr, fw, fts] = from;
    const auto& [tr, tw, tts] = it->second;
    ++flow;
    events.push_back({{"ph", "s"}, {"name", "message"}, {"cat", "mpi"}, {"id", flow}, {"pid", fr},
                      {"tid", fw}, {"ts", fts - 0.001}});
    events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "message"}, {"cat", "mpi"}, {"id", flow},
                      {"pid", tr}, {"tid", tw}, {"ts", tts - 0.001}});
  }
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  if (!out) throw Error("dist::write_trace: cannot write " + path);
}

}  // namespace

using detail::ContextState;

void Context::write_trace(const std::string& path, const Profiler& profiler) {
  detail::refuse_inside_op("write_trace");
  ContextState& s = *s_;
  s.check_usable("write_trace");
  detail::check_collective(s, detail::k_trace, 0);
  // The profiler counts from its creation; set_observer time stands in for it (ranks on one
  // node share the steady clock; across nodes the offsets are only as good as their clocks).
  nlohmann::json mine;
  mine["origin_ns"] = s.observer_since_ns;
  nlohmann::json& ops = mine["ops"] = nlohmann::json::array();
  for (const OpProfile& p : profiler.ops()) {
    if (p.start_ns < 0) continue;
    ops.push_back({p.name, p.worker, p.start_ns, p.end_ns, p.failed});
  }
  std::vector<nlohmann::json> all;
  for (int r = 0; r < s.size; ++r) {
    // Op names need not be UTF-8: replaced, not thrown on (a throw on one rank would leave
    // the others waiting for its text).
    std::string text = detail::bcast_text(
        s, r == s.rank ? mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                       : std::string(),
        r);
    if (s.rank == 0) all.push_back(nlohmann::json::parse(text));
  }
  // Rank 0 writes; every rank learns the outcome (a collective that throws on one rank only
  // leaves the others a step ahead of it).
  std::string failure;
  if (s.rank == 0) {
    try {
      write_merged(path, all);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  failure = detail::bcast_text(s, std::move(failure), 0);
  if (!failure.empty()) throw Error(failure);
}

}  // namespace depengine::dist
