// The machine's floor for `depengine bench`: what an engine that hands every op from the
// pushing thread to a worker must pay on this machine, measured in the same run as the
// engines so that the figures compare.
//
// On a machine with few cores, an empty op's cost is not instructions but cache lines that
// move between the pushing core and the running core: the op's record (written by one,
// read by the other, freed back), and each var's state (updated when the op is pushed and
// again when it finishes). The model does exactly that and nothing more: the pushing
// thread allocates a 256-byte record (from oneTBB's scalable allocator, as the engine's
// ops), locks, updates and unlocks the line of each var the op accesses, and hands the
// record over through a single-producer ring (the cheapest hand-off there is: no lock, no
// wake-up, the consumer spins); the worker takes it, updates and unlocks each var's line
// again, and frees the record. It tracks no dependency, runs nothing, keeps no count, and
// never sleeps, so an engine built on per-op hand-off is unlikely to beat it on the same
// program: the ratio engine / floor says how much the engine adds.
#pragma once

#include "graphfile.h"

namespace depengine::cli {

// The model above run over `program`'s accesses (reads, writes, commute and reduce alike):
// ns per op, push of the first op to the worker's release of the last.
double handoff_floor_ns(const graphfile::Program& program);

}  // namespace depengine::cli
