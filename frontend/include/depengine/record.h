// depengine/record.h — nd::record / nd::replay: a run of array ops recorded once on the
// current engine (Engine::record) and replayed with its inputs rebound, as MXNet's CachedOp.
//
//   depengine::nd::Segment step = depengine::nd::record({x, y}, [&] { loss = train(x, y); });
//   for (...) {
//     depengine::nd::replay(step, {next_x, next_y});  // same shapes: copied into x, y first
//     ...                                             // loss holds the replay's result
//   }
//
// Arrays made inside the region, every array its ops use, and the generator its random ops
// draw from (an EngineScope's may end before a replay) are kept alive by the segment: each
// replay writes the same arrays again (outputs are overwritten, as in a CUDA graph), and
// draws the generator's next numbers.
// Blocking inside the region (to_vector, item, wait_to_read, waitall) is an Error.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "depengine/ndarray.h"
#include "depengine/segment.h"

namespace depengine::nd {

class Segment;

// Runs `fn` once on this thread, as usual, recording the ops it pushes to the current
// engine (current_engine()). `inputs` are the arrays a replay may rebind (they must live on
// that engine). Throws Error as Engine::record does (a blocker inside), and for a null
// input or one on another engine.
Segment record(std::vector<NDArray> inputs, const std::function<void()>& fn);
inline Segment record(const std::function<void()>& fn);

// Replays `segment` on its engine. With `inputs` (one per recorded input, same shapes and
// devices): an input that is not the recorded array itself is first copied into it (a
// pushed copy, ordered like any op); every input is bound to its value before the replay,
// even one that is another input's recorded array (replay(seg, {y, x}) swaps). Throws
// Error for a segment never recorded, a wrong number of inputs, or an input whose shape,
// device or engine differs from the recorded one (naming its index and both shapes); then
// nothing is pushed.
void replay(const Segment& segment, const std::vector<NDArray>& inputs);
void replay(const Segment& segment);

// The result of nd::record: a cheap, copyable handle.
class Segment {
 public:
  Segment() = default;
  explicit operator bool() const noexcept { return data_ != nullptr; }
  // The engine-level segment (its ops, names and boundary).
  const depengine::Segment& ops() const;
  const std::vector<NDArray>& inputs() const;

  struct Data;  // internal (record.cc)

 private:
  friend Segment record(std::vector<NDArray> inputs, const std::function<void()>& fn);
  friend void replay(const Segment& segment, const std::vector<NDArray>& inputs);
  friend void replay(const Segment& segment);
  std::shared_ptr<const Data> data_;
};

inline Segment record(const std::function<void()>& fn) { return record({}, fn); }

}  // namespace depengine::nd
