#include "comm.h"

#include <algorithm>
#include <future>

namespace depengine::dist::detail {

Comm::Comm(MPI_Comm comm) : comm_(comm), thread_([this] { loop(); }) {}

Comm::~Comm() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Comm::submit(Work w) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(w));
  }
  cv_.notify_all();
}

void Comm::call_blocking(Work w) {
  std::promise<void> p;
  auto f = p.get_future();
  auto done = std::move(w.done);
  w.done = [&p, done = std::move(done)](int err, const MPI_Status& st) {
    try {
      done(err, st);
      p.set_value();
    } catch (...) {
      p.set_exception(std::current_exception());
    }
  };
  submit(std::move(w));
  f.get();
}

void Comm::cancel_all() {
  {
    std::lock_guard lk(mu_);
    cancel_ = true;
  }
  cv_.notify_all();
  // Wait until the thread took the request (so that ops cancelled are done when we return).
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !cancel_; });
}

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

void Comm::cancel_outstanding(std::vector<Active>& active, std::vector<Work>& delayed,
                              std::vector<Work>& queued) {
  std::unique_lock mpi(mpi_mutex());
  for (Active& a : active) {
    MPI_Cancel(&a.req);
    MPI_Status st{};
    int flag = 0;
    // A receive cancels at once; a send already matched completes soon after.
    for (int i = 0; i < 1000 && !flag; ++i) MPI_Test(&a.req, &flag, &st);
    if (!flag) MPI_Request_free(&a.req);
  }
  mpi.unlock();
  for (Active& a : active) a.done(MPI_ERR_OTHER, MPI_Status{});
  for (Work& w : delayed) w.done(MPI_ERR_OTHER, MPI_Status{});
  for (Work& w : queued) w.done(MPI_ERR_OTHER, MPI_Status{});
  active.clear();
  delayed.clear();
}

void Comm::loop() {
  std::vector<Active> active;
  std::vector<Work> delayed;
  auto backoff = std::chrono::microseconds(2);
  constexpr auto max_backoff = std::chrono::microseconds(50);
  for (;;) {
    std::vector<Work> fresh;
    {
      std::unique_lock lk(mu_);
      auto has_work = [&] { return stop_ || cancel_ || !queue_.empty(); };
      if (active.empty() && delayed.empty()) {
        cv_.wait(lk, has_work);  // idle: no CPU until something arrives
      } else if (!has_work()) {
        auto until = Clock::now() + backoff;
        for (const Work& w : delayed) until = std::min(until, w.not_before);
        cv_.wait_until(lk, until, has_work);
        backoff = std::min(backoff * 2, max_backoff);
      }
      if (cancel_) {
        std::vector<Work> queued(std::make_move_iterator(queue_.begin()),
                                 std::make_move_iterator(queue_.end()));
        queue_.clear();
        lk.unlock();
        cancel_outstanding(active, delayed, queued);
        lk.lock();
        cancel_ = false;
        closed_ = true;
        cv_.notify_all();
        continue;
      }
      if (closed_ && !queue_.empty()) {
        std::vector<Work> late(std::make_move_iterator(queue_.begin()),
                               std::make_move_iterator(queue_.end()));
        queue_.clear();
        lk.unlock();
        for (Work& w : late) w.done(MPI_ERR_OTHER, MPI_Status{});
        continue;
      }
      if (stop_ && queue_.empty() && active.empty() && delayed.empty()) return;
      fresh.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
    }
    auto now = Clock::now();
    std::unique_lock mpi(mpi_mutex());
    for (Work& w : fresh) delayed.push_back(std::move(w));
    for (std::size_t i = 0; i < delayed.size();) {
      if (delayed[i].not_before > now) {
        ++i;
        continue;
      }
      Work w = std::move(delayed[i]);
      delayed.erase(delayed.begin() + static_cast<std::ptrdiff_t>(i));
      Active a{MPI_REQUEST_NULL, std::move(w.done)};
      int err = w.start(&a.req);
      if (err != MPI_SUCCESS) {
        MPI_Status st{};
        st.MPI_ERROR = err;
        a.done(err, st);
      } else {
        active.push_back(std::move(a));
      }
    }
    bool progressed = false;
    for (std::size_t i = 0; i < active.size();) {
      int flag = 0;
      MPI_Status st{};
      int err = MPI_Test(&active[i].req, &flag, &st);
      if (err != MPI_SUCCESS || flag) {
        Active a = std::move(active[i]);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
        if (err != MPI_SUCCESS) st.MPI_ERROR = err;
        a.done(err, st);
        progressed = true;
      } else {
        ++i;
      }
    }
    if (progressed || !fresh.empty()) backoff = std::chrono::microseconds(2);
  }
}

}  // namespace depengine::dist::detail
