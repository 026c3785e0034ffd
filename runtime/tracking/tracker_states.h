// What the trackers keep in a checkpoint (runtime-internal): the checkpoint's "trackers" component reads and
// hands back each started tracker's `checkpoint_state` (runtime/tracking/tracking.cpp).
#pragma once

#include <map>
#include <string>

namespace accelerate::detail {

struct AcceleratorState;

/// Each started tracker's non-empty `checkpoint_state()`, by tracker name, and the states the last
/// `load_state` read for trackers this start does not run (so a second restart still has them).
std::map<std::string, std::string> tracker_checkpoint_states(AcceleratorState& state);

/// Hands each started tracker its state from `states` (`load_checkpoint_state`), and keeps `states` for the
/// trackers `init_trackers` starts later.
void load_tracker_checkpoint_states(AcceleratorState& state,
                                    const std::map<std::string, std::string>& states);

} // namespace accelerate::detail
