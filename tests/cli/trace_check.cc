// Checks a Chrome trace written by the depengine profiler, for the CLI tests:
//
//   trace_check TRACE.json NAME=COUNT...
//
// Passes (exit 0, nothing printed) when TRACE.json parses as JSON, is the profiler's trace
// (traceEvents, otherData.generator "depengine profiler"), every op slice ("ph": "X") has a
// name, a lane (cat), a worker (tid), a start and a duration at least 0, and each NAME has
// exactly COUNT slices. Otherwise prints one line on stderr saying what differs and exits 1
// (2 for a usage error).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "trace_check: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_check TRACE.json NAME=COUNT...\n");
    return 2;
  }
  std::map<std::string, long> want;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      std::fprintf(stderr, "trace_check: expected NAME=COUNT, got '%s'\n", argv[i]);
      return 2;
    }
    want[arg.substr(0, eq)] = std::strtol(arg.c_str() + eq + 1, nullptr, 10);
  }
  const std::string path = argv[1];
  std::ifstream in(path);
  if (!in) return fail(path + ": cannot open");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return fail(path + ": not JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return fail(path + ": no traceEvents array");
  }
  if (doc.value("/otherData/generator"_json_pointer, std::string()) != "depengine profiler") {
    return fail(path + ": otherData.generator is not \"depengine profiler\"");
  }
  std::map<std::string, long> got;
  long slices = 0;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    ++slices;
    const bool complete = e.contains("name") && e["name"].is_string() && e.contains("cat") &&
                          e["cat"].is_string() && e.contains("tid") &&
                          e["tid"].is_number_integer() && e.contains("ts") &&
                          e["ts"].is_number() && e.contains("dur") && e["dur"].is_number() &&
                          e["dur"].get<double>() >= 0;
    if (!complete) return fail(path + ": an op slice lacks name, cat, tid, ts or dur: " + e.dump());
    ++got[e["name"].get<std::string>()];
  }
  if (slices == 0) return fail(path + ": no op slice (\"ph\": \"X\")");
  for (const auto& [name, count] : want) {
    const long n = got.count(name) ? got[name] : 0;
    if (n != count) {
      return fail(path + ": " + std::to_string(n) + " slices named '" + name + "', expected " +
                  std::to_string(count) + " (of " + std::to_string(slices) + " slices)");
    }
  }
  return 0;
}
