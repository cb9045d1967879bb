// depengine/observer_fanout.h — one observer that forwards every event to several, so a
// GraphRecorder and a Profiler can watch the same engine.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "depengine/observer.h"

namespace depengine {

// Forwards each event to every observer, in list order.
//
//   auto rec = std::make_shared<depengine::GraphRecorder>();
//   auto prof = std::make_shared<depengine::Profiler>();
//   engine->set_observer(std::make_shared<depengine::ObserverFanout>(
//       std::vector<std::shared_ptr<depengine::Observer>>{rec, prof}));
//
// Thread-safe when the observers are; the list is fixed at construction. Null entries are
// dropped.
class ObserverFanout final : public Observer {
 public:
  explicit ObserverFanout(std::vector<std::shared_ptr<Observer>> observers)
      : observers_(std::move(observers)) {
    std::erase(observers_, nullptr);
  }

  void on_push(const OpInfo& op) override {
    for (const auto& o : observers_) o->on_push(op);
  }
  void on_ready(std::uint64_t id) override {
    for (const auto& o : observers_) o->on_ready(id);
  }
  void on_start(std::uint64_t id, int worker) override {
    for (const auto& o : observers_) o->on_start(id, worker);
  }
  void on_end(std::uint64_t id, bool failed, bool skipped) override {
    for (const auto& o : observers_) o->on_end(id, failed, skipped);
  }

 private:
  std::vector<std::shared_ptr<Observer>> observers_;
};

}  // namespace depengine
