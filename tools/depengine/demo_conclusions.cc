#include "demo_conclusions.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace depengine::cli::conclusions {
namespace {

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// "a", "a and b", "a, b and c".
std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " and " : ", ";
    out += items[i];
  }
  return out;
}

// "8.1-8.5 ms"; "8.1 ms" when both print alike.
std::string ms_range(double lo, double hi) {
  const std::string a = ms(lo), b = ms(hi);
  if (a == b) return a;
  return a.substr(0, a.size() - 3) + "-" + b;
}

bool about_the_same(double a, double b) {
  return std::max(a, b) <= kSameTime * std::min(a, b);
}

}  // namespace

// Below 1 ms one decimal would print 0.12 and 0.18 ms alike.
std::string ms(double seconds) {
  return format(std::abs(seconds) < 1e-3 ? "%.2f ms" : "%.1f ms", seconds * 1e3);
}
std::string us(double seconds) { return format("%.2f us", seconds * 1e6); }
std::string mib(std::size_t bytes) {
  return format("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}
std::string times(double ratio) { return format("%.1f x", ratio); }
std::string percent(double fraction) { return format("%.2f %%", fraction * 100.0); }

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const std::size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  const double upper = samples[mid];
  return (*std::max_element(samples.begin(), samples.begin() + mid) + upper) / 2;
}

std::string explain_asynchrony(const AsynchronyFigures& f) {
  std::string text = "The naive engine runs each op inline, as numpy does, so its loop takes as "
                     "long as the " + std::to_string(f.ops) + " ops take (" + ms(f.naive_total) +
                     "). On the threaded engine the loop only pushes: each call records its "
                     "reads and writes and returns, and the backend's workers compute while the "
                     "frontend moves on. ";
  const double share = f.push / f.threaded_total;
  if (share <= 0.10) {
    text += "Here the loop ended after " + ms(f.push) + ", " + percent(share) +
            " of the total, long before the results existed; waitall() is where the "
            "frontend caught up with the backend. ";
  } else {
    text += "Here the pushes took " + percent(share) + " of the total (" + ms(f.push) +
            "), so the frontend did not get far ahead of the backend before waitall(). ";
  }
  const std::string against = " (" + ms(f.threaded_total) + " against " + ms(f.naive_total) + ")";
  if (about_the_same(f.threaded_total, f.naive_total)) {
    text += "The total is about the serial time" + against +
            ": both engines spend it in the same kernels on the same cores.";
  } else if (f.threaded_total < f.naive_total) {
    text += "The threaded engine was " + times(f.naive_total / f.threaded_total) +
            " faster than the serial run" + against +
            ". The kernels are the same; what the threaded engine adds is running independent "
            "ops side by side (the next random matrix beside the current product), where the "
            "naive engine runs them one after another.";
  } else {
    text += "The threaded engine took " + times(f.threaded_total / f.naive_total) +
            " as long as the serial run" + against +
            ". The kernels are the same, so the hand-offs to the workers cost more than the "
            "overlap the engine found.";
  }
  return text;
}

std::string explain_barriers(const std::vector<Blocker>& blockers) {
  std::string text =
      "waitall() waits for everything pushed so far; wait_to_read() only for the writes to one "
      "array. Converting to host data (to_vector, as asnumpy) and item() are implicit "
      "blockers: they need the values, so they wait like wait_to_read. ";
  if (blockers.empty()) return text;
  const auto fastest = std::min_element(blockers.begin(), blockers.end(),
                                        [](const Blocker& a, const Blocker& b) {
                                          return a.seconds < b.seconds;
                                        })->seconds;
  std::vector<std::string> same, slower;
  double slowest_same = fastest;
  for (const Blocker& b : blockers) {
    if (about_the_same(b.seconds, fastest)) {
      same.push_back(b.name);
      slowest_same = std::max(slowest_same, b.seconds);
    } else {
      std::string s = b.name + " took " + ms(b.seconds - fastest) + " more";
      s += b.extra.empty() ? ", though it does no work besides waiting" : " (" + b.extra + ")";
      slower.push_back(std::move(s));
    }
  }
  const std::string range = ms_range(fastest, slowest_same);
  if (slower.empty()) {
    text += "With a single product in flight all of them cost about the same (" + range +
            "): the product itself. ";
  } else {
    text += "With a single product in flight, " + join(same) + " cost about the same (" +
            range + "): the product itself; " + join(slower) + ". ";
  }
  text += "In a larger program waitall would also wait for unrelated work, which is why the "
          "chapter recommends the narrowest barrier that suffices and warns against blockers "
          "in inner loops.";
  return text;
}

std::string explain_improving(const ImprovingFigures& f) {
  const double t1 = f.pushed / f.ops;
  const double per_sync = f.sync / f.ops;
  const double per_pipelined = f.async / f.ops;
  const double drain = f.async - f.pushed;
  const std::string n = std::to_string(f.ops);
  std::string text = "Each step has three parts: the frontend pushes the op (t1), the backend "
                     "computes it (t2), and the result is handed back (t3). Waiting after every "
                     "step pays all three " + n + " times in a row, a thread hand-off included: " +
                     us(per_sync) + " per op. ";
  if (per_pipelined <= kFrontendBound * t1) {
    text += "Without the wait, the backend kept up with the frontend: the loop cost " +
            us(per_pipelined) + " per op, about t1 (" + us(t1) + "), and waitall found " +
            (ms(drain) == ms(0) ? "nothing" : "only " + ms(drain)) +
            " left to do. So the frontend is the bottleneck: the loop costs about " + n +
            " t1, and ";
  } else {
    text += "Without the wait, the frontend ran ahead: pushing took " + us(t1) +
            " per op, but the loop cost " + us(per_pipelined) + " per op and waitall waited " +
            ms(drain) + " for the backend to drain the queue. So the backend is the "
            "bottleneck: the loop costs " + n + " times the backend's pace (" +
            us(per_pipelined) + " per op), not " + n + " t1, and ";
  }
  const double speedup = f.sync / f.async;
  if (speedup >= kSameTime) {
    text += "the " + times(speedup) + " speedup is the t2 + t3 no longer waited for. ";
  } else {
    text += "not waiting saved little (" + times(speedup) + "). ";
  }
  text += "With ops this small (an add on 2 floats) both sides are pure overhead, and the "
          "figures are the engine's cost per op (medians of " + std::to_string(f.runs) +
          " runs).";
  return text;
}

std::string explain_small_ops(const ImprovingFigures& handed, const ImprovingFigures& small) {
  const double sync = small.sync / small.ops, async = small.async / small.ops;
  std::string text = "These figures are the chapter's engine, which hands every op to a worker. "
                     "By default depengine runs an op this small on the calling thread when "
                     "nothing else is running (a small op): nothing is handed over or woken, and "
                     "the loops cost " + us(sync) + " per op with a wait after each and " +
                     us(async) + " without";
  const double ratio = small.sync / small.async;
  if (ratio >= kSameTime) {
    text += " (" + times(ratio) + ": the wait itself still costs something)";
  } else {
    text += ", about the same: there is no t2 + t3 left to wait for";
  }
  text += ", against " + us(handed.sync / handed.ops) + " and " + us(handed.async / handed.ops) +
          " handed over. The chapter's advice stands for ops that take time, as the products "
          "above show.";
  return text;
}

std::string overlap_answer(const OverlapFigures& f) {
  const double saved = (f.naive_total - f.threaded_total) / f.naive_total;
  if (saved >= kOverlapYes) return "Yes";
  if (saved >= kOverlapBarely) return "Barely";
  return "No";
}

std::string explain_overlap(const OverlapFigures& f) {
  const double per_dot = f.naive_dots / f.dots;
  const double saved = f.naive_total - f.threaded_total;
  std::string text = "The chapter's exercise asks whether asynchrony shows on a CPU as it does "
                     "on a GPU. ";
  if (f.push <= 0.01 * per_dot) {
    text += "A push returned after " + us(f.push) + " while a product took about " +
            ms(per_dot) + " on the naive engine, so the frontend thread is free meanwhile. ";
  } else {
    text += "A push took " + us(f.push) + ", " + percent(f.push / per_dot) +
            " of a product (about " + ms(per_dot) +
            " on the naive engine): with products this small the frontend is not free for "
            "long. ";
  }
  const std::string answer = overlap_answer(f);
  const std::string total = "the total (" + ms(f.threaded_total) + ")";
  const std::string serial = "the serial sum (" + ms(f.naive_total) + ")";
  if (answer == "Yes") {
    text += "Here it sorted while a one-worker engine multiplied on another core, and ";
    if (f.threaded_total <= kSameTime * f.naive_host) {
      text += "the products hid entirely behind the host work: " + total +
              " is about the host work alone (" + ms(f.naive_host) + ") instead of " + serial +
              ". ";
    } else {
      text += "part of the products hid behind the host work: " + total +
              " lies between the host work alone (" + ms(f.naive_host) + ") and " + serial +
              ". ";
    }
    text += "The saving is bounded by the cores: a backend that already uses every core "
            "leaves the frontend nothing to overlap with.";
    return text;
  }
  if (answer == "Barely") {
    text += "Here the sort and the one-worker engine's products barely overlapped: " + total +
            " is close to " + serial + ", " + ms(saved) + " saved. ";
  } else if (saved > 0) {
    text += "Here the sort and the one-worker engine's products did not measurably overlap: " +
            total + " is about " + serial + ", only " + ms(saved) + " less. ";
  } else {
    text += "Here the sort and the one-worker engine's products did not overlap: " + total +
            " is no shorter than " + serial + ". ";
  }
  text += "Asynchrony saves time on a CPU only where the frontend has a core the backend "
          "leaves free (" + std::to_string(f.cores) + (f.cores == 1 ? " core" : " cores") +
          " here, one worker).";
  return text;
}

std::string explain_memory(const MemoryFigures& f) {
  const MemoryRun& u = f.unbounded;
  const MemoryRun& b = f.bounded;
  const double batch = static_cast<double>(f.batch_bytes);
  const double resident_u = static_cast<double>(u.peak_storage) / batch;
  const double resident_b = static_cast<double>(b.peak_storage) / batch;
  const double share_u = resident_u / f.batches;
  std::string text = "Every batch is copied in by the frontend, and its storage (" +
                     mib(f.batch_bytes) +
                     " with the outputs of the ops that use it) lives until those ops have "
                     "run. ";
  const std::string held_u = resident_u + 0.5 >= f.batches
                                 ? "all " + std::to_string(f.batches) + " batches"
                                 : format("%.0f of the %d batches", resident_u, f.batches);
  const std::string pending_u = std::to_string(u.peak_pending) + " ops pending at the peak";
  if (share_u >= 0.75) {
    text += "Without a bound the frontend queued almost the whole loop (" + pending_u +
            ") and held the storage of " + held_u + " at once. ";
  } else if (share_u >= 0.25) {
    text += "Without a bound the frontend queued a good part of the loop (" + pending_u +
            ") and held the storage of " + held_u + " at once. ";
  } else {
    text += "Even without a bound the frontend stayed close to the backend (" + pending_u +
            ", the storage of " + held_u + " at once). ";
  }
  text += "A bound on the ops in flight (EngineOptions::max_inflight, DEPENGINE_MAX_INFLIGHT) "
          "makes push block, so with max_inflight = " + std::to_string(f.bound) +
          " the frontend kept " +
          format("%.0f", resident_b) + (resident_b < 1.5 ? " batch" : " batches") +
          " resident: ";
  const double saved = static_cast<double>(u.peak_storage) / static_cast<double>(b.peak_storage);
  const bool much_less = saved >= 2.0;
  if (much_less) {
    text += times(saved) + " less storage";
  } else {
    text += "about as much storage as without";
  }
  if (u.rss_gain && b.rss_gain) {
    text += " (peak RSS +" + mib(*b.rss_gain) + " against +" + mib(*u.rss_gain) + ")";
  }
  text += ". ";
  const std::string against = " (" + ms(b.seconds) + " against " + ms(u.seconds) + ")";
  if (about_the_same(b.seconds, u.seconds)) {
    text += "The bounded loop did the same work in about the same time" + against + ". ";
  } else if (b.seconds < u.seconds) {
    text += std::string(much_less ? "The bounded loop was also " : "The bounded loop was ") +
            times(u.seconds / b.seconds) + " faster" + against;
    if (u.page_faults && b.page_faults && *u.page_faults >= 2 * *b.page_faults) {
      text += ": it reused the storage of the batches already done, where the unbounded loop "
              "faulted in fresh pages (" +
              std::to_string(*b.page_faults) + " against " + std::to_string(*u.page_faults) +
              " page faults)";
    }
    text += ". ";
  } else {
    text += "The bound cost time: the bounded loop took " + times(b.seconds / u.seconds) +
            " as long" + against + ", its frontend waiting instead of running ahead. ";
  }
  if (much_less) text += "This is the chapter's warning about running too far ahead.";
  if (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace depengine::cli::conclusions
