// Where checkpoints go and which one loads (docs/checkpoint-format.md, "Automatic naming"): explicit
// directories, automatically named `project_dir/checkpoints/checkpoint_<n>`, the `latest` marker, and
// `total_limit` pruning (runtime-internal).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace accelerate::detail {

struct AcceleratorState;

/// Throws, for `save_state()` / `load_state()` without a directory (`op`), unless automatic checkpoint naming
/// is on.
void require_automatic_naming(const AcceleratorState& state, const std::string& op);

/// On the main process: the directory `save_state(directory)` writes, its parent created. Without a
/// directory, the next automatic checkpoint (after removing the leftovers of interrupted saves); with one,
/// that directory, unless it exists and is not a checkpoint.
std::string save_target(const AcceleratorState& state, const std::string& directory);

/// The `<n>` of an automatically named checkpoint's directory.
int64_t automatic_number(const std::string& target);

/// On the main process, once the automatic checkpoint `target` is in place: the `latest` marker names it, and
/// the oldest ones beyond `total_limit` (never `target`) are removed.
void mark_latest_and_prune(const AcceleratorState& state, const std::string& target);

/// Where `load_state(directory)` reads from: `directory`, or without one the checkpoint `latest` names (or,
/// without a marker, the highest-numbered one that has metadata).
std::string resolve_checkpoint(const AcceleratorState& state, const std::string& directory);

/// After a load: the next automatic checkpoint never reuses the number of the one loaded.
void restore_checkpoint_counter(AcceleratorState& state, std::optional<int64_t> loaded_number);

} // namespace accelerate::detail
