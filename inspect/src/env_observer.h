// The observer that DEPENGINE_RECORD and DEPENGINE_PROFILE turn on for every engine.
#pragma once

#include <memory>

#include "depengine/observer.h"

namespace depengine::detail {

// Null when neither variable asks for anything. Otherwise an observer that records and/or
// profiles, and writes its files when destroyed, which is when the engine that holds it
// is destroyed (its last op has ended by then). Throws EnvError for a bad value, Error
// for a file that cannot be written (checked here, before the engine does any work).
//
//   DEPENGINE_RECORD=1          depengine_graph.dot (transitive reduction) and .json
//   DEPENGINE_RECORD=g.dot      only that DOT file (g.json: only that JSON file)
//   DEPENGINE_PROFILE=t.json    Chrome trace to t.json (a name ending in .json, or 0: off);
//                               summary table on stderr
//
// The k-th engine of a process (k > 0) that gets one writes "name.k.ext" instead of
// "name.ext", so engines made one after another do not overwrite each other.
std::shared_ptr<Observer> observer_from_environment();

}  // namespace depengine::detail
