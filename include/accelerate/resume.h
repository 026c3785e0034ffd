// Resuming a restarted job from its checkpoint: whether this run is a launcher's restart, and whether a
// checkpoint is there to resume from (docs/cli.md, "Restarts and the resume contract").
//
//   accelerator.prepare(model);                  // models, optimizers, schedulers and loaders prepared first
//   ...
//   if (accelerate::restarted_with_checkpoint("checkpoint")) {
//     accelerator.load_state("checkpoint");      // parameters, optimizer, RNG and data position come back
//   }
//   for (auto& batch : *loader) { ... accelerator.save_state("checkpoint"); ... }
#pragma once

#include <string>

namespace accelerate {

/// True when the launcher started this process again after a failure: `TORCHELASTIC_RESTART_COUNT` (set by
/// `accel launch --max_restarts` and torchrun: 0 on the first start, 1, 2, ... after restarts) is above 0.
/// False when it is 0 or unset. Throws std::invalid_argument, naming the variable, when it is not a number.
bool is_restart();

/// True when `directory` holds a checkpoint that `save_state(directory)` completed (its metadata.json); false
/// when there is nothing there yet (no such path, or an empty folder): an interrupted save is never renamed
/// into place. Throws std::runtime_error naming the folder when something else is there (a file, a folder of
/// other files or without metadata.json, a metadata.json that cannot be read): training from the beginning
/// would lose the place a checkpoint was meant to keep, and save_state refuses to replace such a folder.
bool checkpoint_exists(const std::string& directory);

/// True when this run is a restart (is_restart()) and `directory` holds a checkpoint (checkpoint_exists()):
/// the run should `load_state(directory)` before it trains. On a restart that finds none (the job failed
/// before its first save_state), the main process says that training starts from the beginning.
bool restarted_with_checkpoint(const std::string& directory);

} // namespace accelerate
