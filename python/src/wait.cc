#include "wait.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "depengine/env.h"
#include "gil.h"

namespace depengine::python {
namespace nb = nanobind;
namespace {

using Clock = std::chrono::steady_clock;
// How long the main thread waits between two looks at pending signals: Python's own
// blocking calls (time.sleep, lock.acquire) react at once; a fifth of this is what a user
// notices at most.
constexpr auto kSlice = std::chrono::milliseconds(20);

unsigned long g_main_thread = 0;
std::atomic<bool> g_forked{false};
thread_local bool t_in_op = false;
thread_local int t_record_regions = 0;

void after_fork_in_child() { g_forked.store(true); }

// A wait handed to a helper thread. `abandoned`: the caller left (a signal) before it ended.
struct Job {
  std::function<void()> fn;
  Engine* engine = nullptr;
  bool wait_all = false;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;
  std::exception_ptr error;
};

// Per engine: the waits a signal abandoned (a later wait_all waits for them first: an
// abandoned wait_all may be the one the engine hands a failure to; and the exit waits for
// them all, so that none is still inside an engine when it is destroyed) and the failures
// the abandoned wait_alls saw.
struct EngineWaits {
  std::vector<std::shared_ptr<Job>> abandoned;
  std::deque<std::exception_ptr> unreported;
  std::deque<std::exception_ptr> reported;  // raised to Python already (the last few)
};
constexpr std::size_t kReportedKept = 64;

std::mutex g_waits_mu;
std::unordered_map<const Engine*, EngineWaits>& waits() {
  static auto* m = new std::unordered_map<const Engine*, EngineWaits>;  // never destroyed
  return *m;
}

void keep_unreported(const Engine* e, std::exception_ptr err) {
  std::lock_guard lk(g_waits_mu);
  waits()[e].unreported.push_back(std::move(err));
}

void mark_reported(const Engine* e, const std::exception_ptr& err) {
  std::lock_guard lk(g_waits_mu);
  auto& r = waits()[e].reported;
  if (std::find(r.begin(), r.end(), err) != r.end()) return;
  r.push_back(err);
  if (r.size() > kReportedKept) r.pop_front();
}

// The Python exception object `err` carries, if it is a PyOpError (a copy of the error the
// engine holds is still the same failure).
PyObject* python_object(const std::exception_ptr& err) {
  try {
    std::rethrow_exception(err);
  } catch (const PyOpError& p) {
    return p.object();
  } catch (...) {
  }
  return nullptr;
}

bool was_reported(const Engine* e, const std::exception_ptr& err) {
  std::lock_guard lk(g_waits_mu);
  auto& r = waits()[e].reported;
  if (std::find(r.begin(), r.end(), err) != r.end()) return true;
  PyObject* o = python_object(err);
  return o && std::any_of(r.begin(), r.end(),
                          [&](const std::exception_ptr& x) { return python_object(x) == o; });
}

// Helper threads, made as needed and kept (a wait that never ends keeps its thread).
class Helpers {
 public:
  // Hands `job` to a helper (GIL held); without a thread to be had, runs it here with the
  // GIL released (not interruptible, but not lost).
  void submit(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard lk(mu_);
      queue_.push_back(job);
      if (queue_.size() <= idle_) {
        cv_.notify_one();
        return;
      }
      try {
        std::thread([this] { loop(); }).detach();
        return;
      } catch (const std::system_error&) {
        queue_.pop_back();
      }
    }
    nb::gil_scoped_release unlocked;
    run(*job);
  }

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lk(mu_);
        ++idle_;
        cv_.wait(lk, [&] { return !queue_.empty(); });
        --idle_;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      run(*job);
    }
  }

  static void run(Job& job) {
    std::exception_ptr err;
    try {
      job.fn();
    } catch (...) {
      err = std::current_exception();
    }
    job.fn = nullptr;
    std::lock_guard lk(job.mu);
    // Kept before `done` is seen: a later wait_all waits for this job, then looks.
    if (job.abandoned && err && job.wait_all) keep_unreported(job.engine, err);
    job.error = std::move(err);
    job.done = true;
    job.cv.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::size_t idle_ = 0;
};

Helpers& helpers() {
  static auto* h = new Helpers;  // never destroyed: its threads outlive static destruction
  return *h;
}

// Whether a wait on this thread goes to a helper (see wait.h).
bool interruptible_here() {
  return !t_in_op && t_record_regions == 0 && !g_forked.load(std::memory_order_relaxed) &&
         PyThread_get_thread_ident() == g_main_thread;
}

// Whether `e` finishes everything pushed within a few microseconds (call with the GIL
// released: the op may be a Python one). Then the wait is made on this thread: a helper's
// hand-offs cost two thread wake-ups more (a synchronous loop of tiny ops went from ~4 to
// ~22 us per wait), which matters only for waits that end at once.
// An engine with more than a few ops pending per worker is not looked at: it will not
// finish them all within the look, whose 50 µs of spinning were then taken from its
// workers at every wait of a loop that keeps work queued (the MLP's wait for the loss of
// the step before last finds 30-70 ops pending: ~40 µs of the Python thread per step).
bool settles_soon(const Engine& e) {
  constexpr std::size_t kFewPerWorker = 4;
  if (e.pending() > kFewPerWorker * static_cast<std::size_t>(std::max(e.cpu_threads(), 1))) {
    return false;
  }
  constexpr auto kLook = std::chrono::microseconds(50);
  const auto until = Clock::now() + kLook;
  for (int i = 0; e.pending() != 0; ++i) {
    if (i >= 64) {
      if (Clock::now() >= until) return false;
      std::this_thread::yield();
    }
  }
  return true;
}

// Runs `call` on this thread with the GIL released when this thread cannot be interrupted
// or `e` settles soon; false (nothing done) otherwise. Its exception propagates.
template <class Call>
bool waited_here(const Engine& e, Call&& call) {
  nb::gil_scoped_release unlocked;
  if (interruptible_here() && e.pending() != 0 && !settles_soon(e)) return false;
  call();
  return true;
}

// Waits (GIL held on entry and exit) for `job` in slices, calling `between` with the GIL
// held after each slice that did not see it end; `between` may throw.
template <class Between>
void wait_in_slices(Job& job, Between&& between) {
  for (;;) {
    {
      nb::gil_scoped_release unlocked;
      std::unique_lock lk(job.mu);
      if (job.cv.wait_for(lk, kSlice, [&] { return job.done; })) return;
    }
    between();
  }
}

// Leaves `job` to its helper after a signal handler raised (the Python error is set). A
// wait_all failure it saw in the meantime is kept for the next one.
[[noreturn]] void abandon(Job& job) {
  std::exception_ptr seen;
  {
    std::lock_guard lk(job.mu);
    if (job.done) {
      seen = job.error;
    } else {
      job.abandoned = true;
    }
  }
  if (seen && job.wait_all) keep_unreported(job.engine, seen);
  throw nb::python_error();
}

std::shared_ptr<Job> start_wait_all(Engine& e) {
  auto job = std::make_shared<Job>();
  std::vector<std::shared_ptr<Job>> before;
  {
    std::lock_guard lk(g_waits_mu);
    auto& list = waits()[&e].abandoned;
    std::erase_if(list, [](const std::shared_ptr<Job>& j) {
      std::lock_guard jl(j->mu);
      return j->done;
    });
    before = list;
  }
  job->engine = &e;
  job->wait_all = true;
  job->fn = [&e, before = std::move(before)] {
    for (const auto& j : before) {
      std::unique_lock lk(j->mu);
      j->cv.wait(lk, [&] { return j->done; });
    }
    e.wait_all();
  };
  helpers().submit(job);
  return job;
}

// The failure a wait_all reports: one kept from an abandoned wait_all (earlier in push order)
// before its own, which is then kept for the next.
std::exception_ptr merge_unreported(Engine& e, std::exception_ptr own) {
  std::lock_guard lk(g_waits_mu);
  auto& u = waits()[&e].unreported;
  if (u.empty()) return own;
  std::exception_ptr first = std::move(u.front());
  u.pop_front();
  if (own) u.push_back(std::move(own));
  return first;
}

bool abandoned_running(Engine& e) {
  std::lock_guard lk(g_waits_mu);
  auto& list = waits()[&e].abandoned;
  std::erase_if(list, [](const std::shared_ptr<Job>& j) {
    std::lock_guard jl(j->mu);
    return j->done;
  });
  return !list.empty();
}

void remember_abandoned(Engine& e, std::shared_ptr<Job> job) {
  std::lock_guard lk(g_waits_mu);
  waits()[&e].abandoned.push_back(std::move(job));
}

[[noreturn]] void report(const Engine& e, std::exception_ptr err) {
  mark_reported(&e, err);
  std::rethrow_exception(std::move(err));
}

// The Completions given to push_async bodies and not yet called, by op.
std::mutex g_slots_mu;
std::unordered_set<DoneSlot*>& slots() {
  static auto* s = new std::unordered_set<DoneSlot*>;  // never destroyed
  return *s;
}

double g_exit_timeout_s = 10;

}  // namespace

class DoneSlot {
 public:
  DoneSlot(Engine* e, std::string op_name, Completion c)
      : engine(e), name(std::move(op_name)), completion(std::move(c)) {}
  ~DoneSlot() {
    std::lock_guard lk(g_slots_mu);
    slots().erase(this);
  }  // an uncalled Completion, destroyed now, fails its op (depengine/completion.h)

  Engine* const engine;
  const std::string name;
  std::optional<Completion> completion;  // under g_slots_mu
};

std::shared_ptr<DoneSlot> make_done_slot(Engine* e, std::string name, Completion c) {
  auto slot = std::make_shared<DoneSlot>(e, std::move(name), std::move(c));
  std::lock_guard lk(g_slots_mu);
  slots().insert(slot.get());
  return slot;
}

void call_done(DoneSlot& slot, std::exception_ptr error) {
  std::optional<Completion> c;
  {
    std::lock_guard lk(g_slots_mu);
    c.swap(slot.completion);
    slots().erase(&slot);
  }
  if (!c) throw Error("done: already called for op '" + slot.name + "' (call it exactly once)");
  if (error) {
    (*c)(std::move(error));
  } else {
    (*c)();
  }
}

namespace {

std::size_t uncalled_done(const Engine& e) {
  std::lock_guard lk(g_slots_mu);
  std::size_t n = 0;
  for (const DoneSlot* s : slots()) n += s->engine == &e && s->completion;
  return n;
}

}  // namespace

InOp::InOp() noexcept : was_(std::exchange(t_in_op, true)) {}
InOp::~InOp() { t_in_op = was_; }
void enter_record_region() noexcept { ++t_record_regions; }
void leave_record_region() noexcept { --t_record_regions; }
bool in_record_region() noexcept { return t_record_regions > 0; }

void init_waits() {
  g_main_thread = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  g_exit_timeout_s = static_cast<double>(env_long("DEPENGINE_EXIT_TIMEOUT", 0, 1L << 30, 10));
}

bool forked_child() noexcept { return g_forked.load(std::memory_order_relaxed); }

void wait_to_read(Engine& e, const Var& v) {
  try {
    if (waited_here(e, [&] { e.wait_to_read(v); })) return;
  } catch (...) {
    report(e, std::current_exception());
  }
  auto job = std::make_shared<Job>();
  job->engine = &e;
  job->fn = [&e, v] { e.wait_to_read(v); };
  helpers().submit(job);
  wait_in_slices(*job, [&] {
    if (PyErr_CheckSignals() != 0) {
      remember_abandoned(e, job);  // the next wait_all, and the exit, wait for it
      abandon(*job);
    }
  });
  if (job->error) report(e, job->error);
}

void wait_all(Engine& e) {
  // Here only when no abandoned wait_all may still hand a failure over (see start_wait_all).
  std::exception_ptr err;
  bool here = false;
  try {
    here = (!interruptible_here() || !abandoned_running(e)) &&
           waited_here(e, [&] { e.wait_all(); });
  } catch (...) {
    err = std::current_exception();
    here = true;
  }
  if (here) {
    if ((err = merge_unreported(e, std::move(err)))) report(e, std::move(err));
    return;
  }
  std::shared_ptr<Job> job = start_wait_all(e);
  wait_in_slices(*job, [&] {
    if (PyErr_CheckSignals() != 0) {
      remember_abandoned(e, job);
      abandon(*job);
    }
  });
  if (std::exception_ptr err = merge_unreported(e, job->error)) report(e, std::move(err));
}

void wait_for_place(const Engine& e) {
  const std::size_t bound = e.max_inflight();
  if (bound == 0 || !interruptible_here()) return;
  auto held = [&] {
    const std::size_t p = e.pending();
    return p >= bound && p > uncalled_done(e);
  };
  auto nap = std::chrono::microseconds(50);
  while (held()) {
    {
      nb::gil_scoped_release unlocked;
      std::this_thread::sleep_for(nap);
    }
    nap = std::min<std::chrono::microseconds>(nap * 2, kSlice);
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

namespace {

void say_if_unreported(const Engine& e, const std::exception_ptr& err) {
  if (!err || was_reported(&e, err)) return;
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& x) {
    std::fprintf(stderr, "depengine: an operation failed and no wait reported it: %s\n", x.what());
  } catch (...) {
    std::fprintf(stderr, "depengine: an operation failed and no wait reported it\n");
  }
}

[[noreturn]] void leave_interrupted(const Engine& e) {
  PyErr_Clear();
  std::fprintf(stderr,
               "depengine: interrupted at exit with %zu operation(s) pending on the '%s' "
               "engine; leaving without them\n",
               e.pending(), std::string(e.kind()).c_str());
  nb::module_ sys = nb::module_::import_("sys");
  for (const char* s : {"stdout", "stderr"}) {
    if (PyObject* r = PyObject_CallMethod(sys.attr(s).ptr(), "flush", nullptr)) Py_DECREF(r);
    PyErr_Clear();
  }
  std::fflush(nullptr);
  // Not exit(): the default engine's destructor would wait for those ops again.
  std::_Exit(130);
}

// Fails the ops of `e` whose done() the Python side never called, saying which; false when
// there are none.
bool fail_uncalled_done(const Engine& e, std::size_t pending) {
  std::vector<std::pair<std::string, Completion>> stuck;
  {
    std::lock_guard lk(g_slots_mu);
    for (DoneSlot* s : slots()) {
      if (s->engine != &e || !s->completion) continue;
      stuck.emplace_back(s->name, std::move(*s->completion));
      s->completion.reset();
    }
  }
  if (stuck.empty()) return false;
  std::string names;
  for (const auto& [name, c] : stuck) names += (names.empty() ? "'" : ", '") + name + "'";
  std::fprintf(stderr,
               "depengine: at exit, %zu operation(s) on the '%s' engine made no progress for "
               "%g s; %zu of them wait for a done() that was never called (%s): failing those\n",
               pending, std::string(e.kind()).c_str(), g_exit_timeout_s, stuck.size(),
               names.c_str());
  nb::gil_scoped_release unlocked;
  for (auto& [name, c] : stuck) {
    std::exception_ptr err = std::make_exception_ptr(
        Error("push_async op '" + name + "': the interpreter exited before done() was called"));
    mark_reported(&e, err);  // said above
    c(std::move(err));
  }
  return true;
}

}  // namespace

void wait_at_exit(const std::vector<Engine*>& engines) {
  for (Engine* e : engines) {
    if (g_forked.load()) {  // only engines made in this child, whose waits are never handed over
      std::exception_ptr err;
      try {
        nb::gil_scoped_release unlocked;
        e->wait_all();
      } catch (...) {
        err = std::current_exception();
      }
      say_if_unreported(*e, merge_unreported(*e, err));
      continue;
    }
    std::shared_ptr<Job> job = start_wait_all(*e);
    std::size_t last = e->pending();
    auto since = Clock::now();
    bool said = false;
    wait_in_slices(*job, [&] {
      if (PyErr_CheckSignals() != 0) leave_interrupted(*e);
      const std::size_t now = e->pending();
      if (now != last) {
        last = now;
        since = Clock::now();
        return;
      }
      if (std::chrono::duration<double>(Clock::now() - since).count() < g_exit_timeout_s) return;
      since = Clock::now();
      if (fail_uncalled_done(*e, now) || said) return;
      said = true;
      std::fprintf(stderr,
                   "depengine: at exit, %zu operation(s) on the '%s' engine made no progress "
                   "for %g s; still waiting (Ctrl-C leaves without them)\n",
                   now, std::string(e->kind()).c_str(), g_exit_timeout_s);
    });
    say_if_unreported(*e, merge_unreported(*e, job->error));
  }
}

}  // namespace depengine::python
