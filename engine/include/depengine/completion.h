// depengine/completion.h — the callback that finishes an asynchronous operation.
#pragma once

#include <exception>
#include <utility>

#include "depengine/error.h"

namespace depengine {

namespace detail {
// Implemented by each engine's operation record.
class CompletionTarget {
 public:
  virtual void complete(std::exception_ptr error) = 0;
  virtual void add_completion_ref() noexcept = 0;
  virtual void release_completion_ref() noexcept = 0;

 protected:
  ~CompletionTarget() = default;
};
}  // namespace detail

// Given to the function of push_async. Call it exactly once, from any thread, when the
// operation's work is done: `done()` for success, `done(std::current_exception())` for a
// failure. A second call throws depengine::Error. If every copy is destroyed without a
// call, the operation fails with a depengine::Error saying so (instead of hanging waits).
//
//   engine->push_async([](depengine::Completion done) {
//     std::thread([done] { work(); done(); }).detach();
//   }, {a}, {b});
//
// Copies may be called and destroyed on any thread.
class Completion {
 public:
  explicit Completion(detail::CompletionTarget* t) noexcept : t_(t) { t_->add_completion_ref(); }
  Completion(const Completion& o) noexcept : t_(o.t_) {
    if (t_) t_->add_completion_ref();
  }
  Completion(Completion&& o) noexcept : t_(o.t_) { o.t_ = nullptr; }
  Completion& operator=(Completion o) noexcept {
    std::swap(t_, o.t_);
    return *this;
  }
  ~Completion() {
    if (t_) t_->release_completion_ref();
  }

  void operator()() const { target().complete(nullptr); }
  void operator()(std::exception_ptr error) const { target().complete(std::move(error)); }

 private:
  detail::CompletionTarget& target() const {
    if (!t_) throw Error("Completion: called through a moved-from handle");
    return *t_;
  }
  detail::CompletionTarget* t_;
};

}  // namespace depengine
