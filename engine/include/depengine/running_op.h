// Whether the calling thread is inside an engine operation's body.
#pragma once

namespace depengine {

// True while the calling thread runs the body of an operation of any engine (a
// synchronous body, or an asynchronous one until it returns). A push made then belongs to
// that operation's wait_all epoch (Engine::wait_all). Thread-safe.
//   if (!depengine::in_running_op()) refuse_new_work();
bool in_running_op() noexcept;

}  // namespace depengine
