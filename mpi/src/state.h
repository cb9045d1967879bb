// state.h — what one rank knows of a distributed program (internal).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm.h"
#include "depengine/dist.h"
#include "depengine/engine.h"

namespace depengine::dist::detail {

// The collectives, as the check that opens each names them.
enum : std::uint64_t { k_wait_all = 1, k_get = 2, k_close = 3, k_trace = 4, k_stats = 5 };

// This rank's copy of a var: the owner's value, or a replica.
struct Slot {
  depengine::Var ev;  // the local engine var ordering accesses to buf
  std::vector<std::byte> buf;
  // The failure the current value holds (the message every rank rethrows), or null.
  std::shared_ptr<const std::string> poison;
};

// Every rank keeps the same record of every var (versions and holders change at push time,
// identically on all ranks, so they agree without messages); only `slot` is local.
struct VarRec {
  std::size_t bytes = 0;
  int owner = 0;
  std::uint64_t version = 0;       // writes pushed so far
  std::vector<char> holds;         // per rank: holds the current version
  std::shared_ptr<Slot> slot;      // this rank's copy; null until needed
};

// The header of every value message (sent before the bytes, in one message).
struct Header {
  std::uint64_t var = 0;
  std::uint64_t version = 0;
  std::uint64_t seq = 0;          // the op that needed the transfer
  std::uint64_t poison_len = 0;   // > 0: a second message with the failure's text follows
};

struct ContextState {
  std::uint64_t uid = 0;
  int rank = 0, size = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  long latency_us = 0;
  int tag_ub = 32767;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Comm> comm_thread;

  std::vector<VarRec> vars;
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a of everything pushed
  std::uint64_t seq = 0;                         // ops pushed
  std::vector<std::uint64_t> sent_to, received_from;  // per peer: transfers so far (tags)
  bool broken = false;
  bool closed = false;  // by MPI_Finalize, while the Context was alive
  std::int64_t observer_since_ns = 0;  // steady clock when set_observer was called

  std::mutex fail_mu;
  std::uint64_t fail_seq = UINT64_MAX;  // first failure (push order) since the last wait_all
  std::string fail_msg;

  std::atomic<std::uint64_t> messages_sent{0}, bytes_sent{0}, messages_received{0},
      collectives{0};

  // Throws Error naming `what` when the context was closed by MPI_Finalize or broken.
  void check_usable(const char* what) const;
  void record_failure(std::uint64_t op_seq, const std::string& msg);
  VarRec& rec(const DistVar& v, const char* what);
  const VarRec& rec(const DistVar& v, const char* what) const;
  Slot& local_slot(VarRec& r);
  void mix(std::uint64_t x);
  void mix(const std::string& s);
  // Pushes the transfer of var `id`'s current version from `from` to `to` (its send on
  // `from`, its receive on `to`; nothing elsewhere).
  void transfer(std::uint64_t id, int from, int to, std::uint64_t op_seq);
  void push_send(std::uint64_t id, int to, std::uint64_t op_seq);
  void push_recv(std::uint64_t id, int from, std::uint64_t op_seq);
  int tag_for(std::uint64_t n) const { return static_cast<int>(n % static_cast<std::uint64_t>(tag_ub)); }
  Comm::Clock::time_point send_time() const;
};

// Throws Error when called from inside a dist op (`what`: the Context member called).
void refuse_inside_op(const char* what);
// Opens every collective: all ranks must be there after the same pushes (Error otherwise).
void check_collective(ContextState& s, std::uint64_t kind, std::uint64_t var);
// Sends `text` from `root` to every rank; returns it.
std::string bcast_text(ContextState& s, std::string text, int root);

}  // namespace depengine::dist::detail
