// Waits that Ctrl-C can end. An engine wait blocks inside the engine, where no signal reaches
// it, so on Python's main thread the wait itself runs on a helper thread while the main
// thread waits for it in short slices with the GIL released, running Python's signal
// handlers between slices (PyErr_CheckSignals). A KeyboardInterrupt (or whatever a handler
// raises) leaves the engine as it was: the ops still run, the helper's wait ends with them,
// and a failure it then sees is kept for the next wait_all, never lost.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "depengine/engine.h"

namespace depengine::python {

// engine.wait_to_read(v) and engine.wait_all() for Python (GIL held): interruptible on the
// main thread; elsewhere (other threads, which Python never interrupts; inside a Python op
// or a record region, where the engine refuses the wait itself) the plain call with the GIL
// released. A failure they raise counts as reported (no message at exit).
void wait_to_read(Engine& e, const Var& v);
void wait_all(Engine& e);

// Before a push to an engine with a back-pressure bound (GIL held): on the main thread,
// sleeps in slices (signals handled between them) while the bound's worth of ops is pending,
// so that the push itself finds a place at once. Pending ops that only wait for a done()
// the Python side holds do not count (the engine lets a push through then: done() may be
// this thread's to call).
void wait_for_place(const Engine& e);

// Marks the calling thread as running a Python op (inside the op's body): its waits are
// the engine's own, which refuses them.
class InOp {
 public:
  InOp() noexcept;
  ~InOp();
  InOp(const InOp&) = delete;
  InOp& operator=(const InOp&) = delete;

 private:
  bool was_;
};
// Counts record regions on this thread (Engine.record, npx.record), where a wait must reach
// the engine on this thread to be refused, and the Python ops pushed are kept by a segment
// and called again by its replays (so they keep their callable).
void enter_record_region() noexcept;
void leave_record_region() noexcept;
bool in_record_region() noexcept;

// The done() handed to a push_async body, tracked until it is called or dropped, so that
// back-pressure and the exit know which ops wait for Python.
class DoneSlot;
std::shared_ptr<DoneSlot> make_done_slot(Engine* e, std::string name, Completion c);
// Calls it (GIL released by the caller): Error when it was already called.
void call_done(DoneSlot& slot, std::exception_ptr error);

// At interpreter exit (GIL held): waits for every engine Python used (those made before a
// fork() are skipped in the child). A failure no wait reported is said on stderr. When
// nothing progresses for DEPENGINE_EXIT_TIMEOUT seconds (default 10), what is left is said on
// stderr, and ops that wait for a done() that was never called are failed, so the exit goes
// on; Ctrl-C during this wait says what is left and leaves the process at once (exit 130).
void wait_at_exit(const std::vector<Engine*>& engines);

// Records the process and thread that loaded the module (GIL held, at import).
void init_waits();
// True in a child of fork() (after the module was loaded).
bool forked_child() noexcept;

}  // namespace depengine::python
