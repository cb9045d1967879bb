// transfer.cc — moving one version of a var between two ranks, as two engine ops: a send
// that reads the holder's copy and a receive that writes the other rank's replica. Both are
// asynchronous ops completed by the communication thread, so the engine orders them with the
// compute ops by the usual rules (a later write of the var waits for the send: WAR).
#include <string>

#include "state.h"

namespace depengine::dist::detail {
namespace {

// One message of a header and a buffer, without copying: an MPI struct type over the two
// absolute addresses, used with MPI_BOTTOM.
int value_type(Header* h, std::byte* buf, std::size_t bytes, MPI_Datatype* type) {
  int lens[2] = {static_cast<int>(sizeof(Header)), static_cast<int>(bytes)};
  MPI_Aint addr[2];
  MPI_Get_address(h, &addr[0]);
  MPI_Get_address(buf, &addr[1]);
  MPI_Datatype types[2] = {MPI_BYTE, MPI_BYTE};
  int err = MPI_Type_create_struct(bytes ? 2 : 1, lens, addr, types, type);
  if (err == MPI_SUCCESS) err = MPI_Type_commit(type);
  return err;
}

std::string mpi_error(int err) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(err);
  return std::string(text, static_cast<std::size_t>(len));
}

std::string value_name(std::uint64_t id, std::uint64_t version) {
  return "v" + std::to_string(id) + "@" + std::to_string(version);
}

}  // namespace

Comm::Clock::time_point ContextState::send_time() const {
  return Comm::Clock::now() + std::chrono::microseconds(latency_us);
}

void ContextState::transfer(std::uint64_t id, int from, int to, std::uint64_t op_seq) {
  if (rank == from) push_send(id, to, op_seq);
  if (rank == to) push_recv(id, from, op_seq);
}

void ContextState::push_send(std::uint64_t id, int to, std::uint64_t op_seq) {
  VarRec& r = vars[id];
  std::shared_ptr<Slot> slot = r.slot;
  const int tag = tag_for(sent_to[static_cast<std::size_t>(to)]++);
  const std::uint64_t version = r.version;
  const std::size_t bytes = r.bytes;
  std::string name = "send " + value_name(id, version) + ">" + std::to_string(to);
  engine->push_async(
      [this, slot, to, tag, id, version, bytes, op_seq](Completion done) {
        auto h = std::make_shared<Header>(Header{id, version, op_seq, 0});
        std::shared_ptr<const std::string> poison = slot->poison;
        if (poison) h->poison_len = poison->size();
        // Done once every message of the value left (the value, then the text if poisoned).
        auto left = std::make_shared<std::atomic<int>>(poison ? 2 : 1);
        auto finish = [done, left](int) {
          if (left->fetch_sub(1) == 1) done();
        };
        // A failed send cannot reach the receiver; its own receive reports the loss when
        // the ranks cancel (wait_all), and this rank records it now.
        auto on_done = [this, finish, id, version, to, op_seq](int err, const MPI_Status&) {
          if (err != MPI_SUCCESS)
            record_failure(op_seq, "sending " + value_name(id, version) + " from rank " +
                                       std::to_string(rank) + " to rank " + std::to_string(to) +
                                       " failed: " + mpi_error(err));
          finish(err);
        };
        const auto when = send_time();
        // Counted before the send can complete (and a wait_all return): stats() after
        // wait_all includes every message of the ops it waited for.
        messages_sent.fetch_add(1, std::memory_order_relaxed);
        bytes_sent.fetch_add(bytes + sizeof(Header), std::memory_order_relaxed);
        comm_thread->submit({[this, h, slot, bytes, to, tag](MPI_Request* req) {
                               MPI_Datatype type;
                               int err = value_type(h.get(), slot->buf.data(), bytes, &type);
                               if (err != MPI_SUCCESS) return err;
                               err = MPI_Isend(MPI_BOTTOM, 1, type, to, tag, comm, req);
                               MPI_Type_free(&type);
                               return err;
                             },
                             [h, on_done](int err, const MPI_Status& st) { on_done(err, st); },
                             when});
        if (poison) {
          comm_thread->submit({[this, poison, to, tag](MPI_Request* req) {
                                 return MPI_Isend(poison->data(), static_cast<int>(poison->size()),
                                                  MPI_CHAR, to, tag, comm, req);
                               },
                               [poison, on_done](int err, const MPI_Status& st) { on_done(err, st); },
                               when});
        }
      },
      {slot->ev}, {}, {.name = std::move(name)});
}

void ContextState::push_recv(std::uint64_t id, int from, std::uint64_t op_seq) {
  VarRec& r = vars[id];
  Slot& slot_ref = local_slot(r);
  std::shared_ptr<Slot> slot = r.slot;
  const int tag = tag_for(received_from[static_cast<std::size_t>(from)]++);
  const std::uint64_t version = r.version;
  const std::size_t bytes = r.bytes;
  std::string name = "recv " + value_name(id, version) + "<" + std::to_string(from);
  engine->push_async(
      [this, slot, from, tag, id, version, bytes, op_seq](Completion done) {
        auto h = std::make_shared<Header>();
        auto fail = [this, slot, done, id, version, from, op_seq](const std::string& why) {
          auto msg = std::make_shared<const std::string>(
              "receiving " + value_name(id, version) + " from rank " + std::to_string(from) +
              " on rank " + std::to_string(rank) + " failed: " + why);
          slot->poison = msg;
          record_failure(op_seq, *msg);
          done();
        };
        comm_thread->submit(
            {[this, h, slot, bytes, from, tag](MPI_Request* req) {
               MPI_Datatype type;
               int err = value_type(h.get(), slot->buf.data(), bytes, &type);
               if (err != MPI_SUCCESS) return err;
               err = MPI_Irecv(MPI_BOTTOM, 1, type, from, tag, comm, req);
               MPI_Type_free(&type);
               return err;
             },
             [this, h, slot, done, fail, id, version, from, tag, bytes, op_seq](
                 int err, const MPI_Status& st) {
               if (err != MPI_SUCCESS) return fail(mpi_error(err));
               int count = 0;
               MPI_Get_count(&st, MPI_BYTE, &count);
               // Both ranks number the transfer by the op that needed it: any difference
               // means they pushed different sequences.
               if (static_cast<std::size_t>(count) != sizeof(Header) + bytes || h->var != id ||
                   h->version != version || h->seq != op_seq)
                 return fail("ranks pushed different op sequences (rank " + std::to_string(from) +
                             " sent " + value_name(h->var, h->version) + ", " +
                             std::to_string(count) + " bytes, for op #" + std::to_string(h->seq) +
                             "; expected for op #" + std::to_string(op_seq) + ")");
               messages_received.fetch_add(1, std::memory_order_relaxed);
               if (h->poison_len == 0) {
                 slot->poison = nullptr;
                 return done();
               }
               // The value failed on its holder: its text follows on the same tag.
               auto text = std::make_shared<std::string>(h->poison_len, '\0');
               comm_thread->submit(
                   {[this, text, from, tag](MPI_Request* req) {
                      return MPI_Irecv(text->data(), static_cast<int>(text->size()), MPI_CHAR,
                                       from, tag, comm, req);
                    },
                    [slot, text, done, fail](int err2, const MPI_Status&) {
                      if (err2 != MPI_SUCCESS) return fail(mpi_error(err2));
                      slot->poison = std::make_shared<const std::string>(std::move(*text));
                      done();
                    },
                    {}});
             },
             {}});
      },
      {}, {slot_ref.ev}, {.name = std::move(name)});
}

}  // namespace depengine::dist::detail
