// A thread that handles the items pushed to it one at a time, in push order: a GPU lane's
// launches, a simulated stream's work, a CUDA stream's completions. It sleeps with the
// Notifier protocol (notifier.h) when its queue is empty.
//
//   SerialWorker<Op*> lane([&](Op*& op) { launch(op); });
//   lane.push(op);        // thread-safe
//   lane.wait_idle();     // until everything pushed so far has been handled
//
// The destructor handles what is still queued, then joins the thread.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "notifier.h"

namespace depengine::detail {

template <class Item>
class SerialWorker {
 public:
  // `handle` runs on the worker's thread for each item; `on_start` (if any) first, once.
  explicit SerialWorker(std::function<void(Item&)> handle, std::function<void()> on_start = {})
      : handle_(std::move(handle)), on_start_(std::move(on_start)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~SerialWorker() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      work_.notify_all();
    }
    thread_.join();
  }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `item`. Notifies under the lock: once queued, the item may be handled and its
  // effects may lead the owner to destroy this worker, which takes the lock first.
  void push(Item item) {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(item));
    work_.notify_one();
  }

  // Waits until the queue is empty and no item is being handled. Not from the worker's
  // own thread.
  void wait_idle() {
    idle_.wait([&] {
      std::lock_guard lk(mu_);
      return queue_.empty() && !busy_;
    });
  }

 private:
  void loop() {
    if (on_start_) on_start_();
    for (;;) {
      Item item;
      work_.wait([&] {
        std::lock_guard lk(mu_);
        return stop_ || !queue_.empty();
      });
      {
        std::lock_guard lk(mu_);
        if (queue_.empty()) return;  // stopped, and nothing left
        item = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      handle_(item);
      {
        std::lock_guard lk(mu_);
        busy_ = false;
        if (queue_.empty()) idle_.notify_all();
      }
    }
  }

  const std::function<void(Item&)> handle_;
  const std::function<void()> on_start_;
  std::mutex mu_;  // guards queue_, busy_ and stop_: the conditions both Notifiers wait for
  std::deque<Item> queue_;
  bool busy_ = false;
  bool stop_ = false;
  Notifier work_;  // the worker waits for items
  Notifier idle_;  // wait_idle
  std::thread thread_;
};

}  // namespace depengine::detail
