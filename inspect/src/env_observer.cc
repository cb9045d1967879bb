#include "env_observer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "depengine/env.h"
#include "depengine/error.h"
#include "depengine/graph.h"
#include "depengine/observer_fanout.h"
#include "depengine/profiler.h"

namespace depengine::detail {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// "trace.json" -> "trace.3.json" for the engine numbered 3.
std::string numbered(const std::string& path, int k) {
  if (k == 0) return path;
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const std::string n = "." + std::to_string(k);
  return has_ext ? path.substr(0, dot) + n + path.substr(dot) : path + n;
}

// Throws Error when `path` (from the variable `var`) cannot be written, so that a run is
// refused before its work rather than losing its files at exit. Opens it for writing,
// creating it (and removing it again) when it does not exist; an existing file is not
// truncated here. A FIFO without a reader yet (ENXIO) passes: writing it is what was asked.
void check_writable(const char* var, const std::string& path) {
  // Processes started together with DEPENGINE_RECORD=1 check the same names: one may remove
  // its probe between this one's two opens (ENOENT), which is no reason to refuse.
  for (int attempt = 0; attempt < 8; ++attempt) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(path.c_str());
      return;
    }
    if (errno != EEXIST) break;
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    if (errno == ENXIO) return;
    if (errno != ENOENT) break;
  }
  throw Error(std::string(var) + ": cannot write '" + path + "': " + std::strerror(errno));
}

class EnvObserver final : public Observer {
 public:
  EnvObserver(std::string dot, std::string json, std::string trace)
      : dot_(std::move(dot)), json_(std::move(json)), trace_(std::move(trace)) {
    std::vector<std::shared_ptr<Observer>> list;
    if (!dot_.empty() || !json_.empty()) list.push_back(recorder_ = std::make_shared<GraphRecorder>());
    if (!trace_.empty()) list.push_back(profiler_ = std::make_shared<Profiler>());
    fanout_ = std::make_unique<ObserverFanout>(std::move(list));
  }

  EnvObserver(const EnvObserver&) = delete;
  EnvObserver& operator=(const EnvObserver&) = delete;

  // The engine drops its reference only after its last op has ended.
  ~EnvObserver() override { write(); }

  void on_push(const OpInfo& op) override { fanout_->on_push(op); }
  void on_ready(std::uint64_t id) override { fanout_->on_ready(id); }
  void on_start(std::uint64_t id, int worker) override { fanout_->on_start(id, worker); }
  void on_end(std::uint64_t id, bool failed, bool skipped) override {
    fanout_->on_end(id, failed, skipped);
  }

 private:
  // Runs one step of writing the files; a failure is reported and does not stop the
  // others (a full disk under the DOT dump cost the JSON dump and the trace as well).
  template <class F>
  static void attempt(F step) noexcept {
    try {
      step();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "depengine: %s\n", e.what());
    }
  }

  void write() const noexcept {
    if (recorder_) {
      attempt([&] {
        const Graph g = recorder_->graph();
        std::string written;  // only the files that were written are named below
        auto dump = [&](const std::string& path, auto text) {
          if (path.empty()) return;
          attempt([&] {
            write_text_file(path, text());
            written += (written.empty() ? "" : " and ") + path;
          });
        };
        dump(dot_, [&] { return g.to_dot({.transitive_reduction = true}); });
        dump(json_, [&] { return g.to_json(); });
        if (written.empty()) return;
        const GraphAnalysis a = analyze(g);
        std::fprintf(stderr,
                     "depengine: recorded %zu ops, %zu edges to %s; measured work %.3f ms, "
                     "span %.3f ms, parallelism %.2f\n",
                     a.ops, a.edges, written.c_str(), a.work / 1e3, a.span / 1e3, a.parallelism);
      });
    }
    if (profiler_) {
      attempt([&] {
        profiler_->write_chrome_trace(trace_);
        std::fprintf(stderr, "depengine: wrote the Chrome trace to %s\n%s", trace_.c_str(),
                     profiler_->summary().table().c_str());
      });
    }
  }

  std::string dot_, json_, trace_;
  std::shared_ptr<GraphRecorder> recorder_;
  std::shared_ptr<Profiler> profiler_;
  std::unique_ptr<ObserverFanout> fanout_;
};

}  // namespace

std::shared_ptr<Observer> observer_from_environment() {
  const std::string record = env("DEPENGINE_RECORD");
  const std::string profile = env("DEPENGINE_PROFILE");
  std::string dot, json;
  if (record == "1") {
    dot = "depengine_graph.dot";
    json = "depengine_graph.json";
  } else if (record.ends_with(".dot") && record.size() > 4) {
    dot = record;
  } else if (record.ends_with(".json") && record.size() > 5) {
    json = record;
  } else if (!record.empty() && record != "0") {
    // EnvError, as for every DEPENGINE_* variable: tools tell a bad value (exit code 2)
    // from a runtime failure by it.
    throw EnvError("DEPENGINE_RECORD='" + record +
                "' is not 0, 1, or a file name ending in .dot or .json");
  }
  // Checked as DEPENGINE_RECORD is: "1", say, wrote the trace to a file named "1".
  if (!profile.empty() && profile != "0" && !(profile.ends_with(".json") && profile.size() > 5)) {
    throw EnvError("DEPENGINE_PROFILE='" + profile + "' is not 0 or a file name ending in .json");
  }
  std::string trace = profile == "0" ? "" : profile;
  if (dot.empty() && json.empty() && trace.empty()) return nullptr;

  static std::atomic<int> engines{0};
  const int k = engines.fetch_add(1);
  if (!dot.empty()) check_writable("DEPENGINE_RECORD", dot = numbered(dot, k));
  if (!json.empty()) check_writable("DEPENGINE_RECORD", json = numbered(json, k));
  if (!trace.empty()) check_writable("DEPENGINE_PROFILE", trace = numbered(trace, k));
  return std::make_shared<EnvObserver>(dot, json, trace);
}

}  // namespace depengine::detail

// Loading the library registers the environment's observer for every engine made after.
// Programs that link depengine::inspect reference this symbol through the linker
// (-u depengine_inspect_attach, in the target's link interface), so the library is linked,
// and loaded, even when they call nothing of it (a static archive's member is pulled in, a
// shared library is kept under --as-needed).
extern "C" void depengine_inspect_attach() {}

namespace {
[[maybe_unused]] const bool g_registered = [] {
  depengine::add_engine_observer_factory(&depengine::detail::observer_from_environment);
  return true;
}();
}  // namespace
