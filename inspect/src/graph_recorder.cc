// GraphRecorder: an observer that builds the dependency graph of what is pushed.
#include <chrono>

#include "depengine/graph.h"

namespace depengine {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void GraphRecorder::on_push(const OpInfo& op) {
  std::lock_guard lk(mu_);
  graph_.add_op(op);
}

void GraphRecorder::on_ready(std::uint64_t) {}

void GraphRecorder::on_start(std::uint64_t id, int) {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  started_[id] = t;
}

void GraphRecorder::on_end(std::uint64_t id, bool, bool) {
  const std::int64_t t = now_ns();
  std::lock_guard lk(mu_);
  auto it = started_.find(id);
  if (it == started_.end()) return;  // skipped: it never ran, so it cost nothing
  const std::size_t index = graph_.find(id);
  if (index < graph_.node_count()) graph_.set_cost(index, static_cast<double>(t - it->second) / 1e3);
  started_.erase(it);
}

void GraphRecorder::set_var_name(std::uint64_t var, std::string name) {
  std::lock_guard lk(mu_);
  graph_.set_var_name(var, std::move(name));
}

Graph GraphRecorder::graph() const {
  std::lock_guard lk(mu_);
  return graph_;
}

void GraphRecorder::write_dot(const std::string& path, const DumpOptions& options) const {
  write_text_file(path, graph().to_dot(options));
}

void GraphRecorder::write_json(const std::string& path, const DumpOptions& options) const {
  write_text_file(path, graph().to_json(options));
}

}  // namespace depengine
