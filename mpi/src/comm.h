// comm.h — the communication thread of one rank: every MPI call after MPI_Init_thread is made
// here, one at a time (MPI_THREAD_SERIALIZED). Requests are started from a queue, progressed
// with MPI_Test, and their callbacks run on this thread. Idle (nothing queued or outstanding)
// it sleeps on a condition variable; while requests are outstanding and none completes, it
// backs off (2 us doubling to 50 us) between polls, waking at once for new work.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace depengine::dist::detail {

// Held around every MPI call of the process made by depengine (comm threads, and the program's
// thread in Context's constructor and destructor), so that two contexts in one process still
// make their calls one at a time, as MPI_THREAD_SERIALIZED requires.
std::mutex& mpi_mutex();

class Comm {
 public:
  using Clock = std::chrono::steady_clock;
  // Started on the comm thread: posts one non-blocking MPI call into `req` and returns its
  // MPI error code. `done` runs on the comm thread once the request completed (or failed:
  // the error code is in status.MPI_ERROR, or the start's code).
  struct Work {
    std::function<int(MPI_Request* req)> start;
    std::function<void(int error, const MPI_Status& status)> done;
    Clock::time_point not_before{};  // injected latency: not started before this time
  };

  explicit Comm(MPI_Comm comm);
  ~Comm();  // stops the thread (outstanding requests are cancelled)
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  void submit(Work w);
  // Submits `w` and waits until its `done` ran on the comm thread, rethrowing what `done`
  // threw (the program's thread uses it for the collectives).
  void call_blocking(Work w);
  // Cancels every outstanding request (for diverged ranks); their done() gets MPI_ERR_OTHER,
  // and so does every work submitted later (an engine op that starts after the cancel).
  void cancel_all();

  MPI_Comm comm() const noexcept { return comm_; }

 private:
  struct Active {
    MPI_Request req;
    std::function<void(int, const MPI_Status&)> done;
  };
  void loop();
  void cancel_outstanding(std::vector<Active>& active, std::vector<Work>& delayed,
                          std::vector<Work>& queued);

  MPI_Comm comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool stop_ = false;
  bool cancel_ = false;
  bool closed_ = false;  // after cancel_all: new work fails at once
  std::thread thread_;
};

}  // namespace depengine::dist::detail
