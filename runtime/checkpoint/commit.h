// The collective, atomic commit of a checkpoint (docs/checkpoint-format.md, "Collective" and "Atomic"): the
// agreement every checkpoint call runs its phases under (`Collective`), and the save protocol: assemble the
// checkpoint in a hidden partial directory every process must see, fsync every file, write metadata.json
// last, rename the directory into place in one step, and clean up what an interrupted save or prune left.
// Also the test-only kill hook (runtime-internal).
#pragma once

#include "checkpoint/format.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/host_name.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate::detail {

struct AcceleratorState;

// ---- The test-only kill hook ------------------------------------------------------------------------------

/// Counts a `save_state` call of this process, for `kill_point`.
void count_save_for_kill_points();
/// Test-only: `ACCELERATE_TEST_KILL_DURING_SAVE=<point>[@<n>]` makes the process that reaches `point` of its
/// n-th `save_state` call (default: the first) SIGKILL itself, to prove that a crash at that moment loses
/// nothing. The points are the names of the files written (`model.safetensors`, `optimizer.bin`,
/// `random_states_1.bin`, `metadata.json`, ...) right after each is written and fsync'd, `rename` before the
/// directory is renamed into place, and `latest` before the marker is updated.
void kill_point(const std::string& point);

// ---- The collective frame of one save_state / load_state call ---------------------------------------------

/// Numbers a checkpoint call, checks that every process made it (the rank-local trap), and runs its phases so
/// that a failure on any process fails the call on every process, with that process's message.
class Collective {
public:
  /// `op` is "save_state" or "load_state", `argument` its directory ("" for automatic naming).
  Collective(AcceleratorState& state, std::string op, const std::string& argument);

  bool main() const { return rank_ == 0; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::string& op() const { return op_; }

  /// Runs `work` on this process, then learns whether it failed anywhere: if so, every process throws (this
  /// process's own exception where it failed, the first failed process's message elsewhere).
  void agree(const std::string& phase, const std::function<void()>& work);

  /// Makes `value` readable by every process under `name` (a no-op with one process).
  void publish(const std::string& name, const std::string& value);
  std::string fetch(const std::string& name);

  /// Deletes this process's keys; call once every process is past its last read.
  void finish();

private:
  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }
  std::string guarantee() const;
  void set(const std::string& name, const std::string& value);
  std::string get(const std::string& name);
  std::runtime_error store_lost(const c10::Error& error) const;
  /// Every process must make this call, with the same directory: a call made on some processes only (under
  /// `if (accelerator.is_main_process())`) would otherwise wait forever in the first collective.
  void check_arrival(const std::string& argument);

  AcceleratorState& state_;
  std::string op_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<std::string> own_keys_;
};

// ---- The atomic save --------------------------------------------------------------------------------------

/// Writes one process's files into the partial directory, fsync'd, recording their sizes and hashes.
class FileWriter {
public:
  FileWriter(std::string directory, int rank) : directory_(std::move(directory)), rank_(rank) {}
  /// Writes `name`: a file of the whole checkpoint, or with `own` one of this process's own.
  void write(const std::string& name, const std::string& bytes, bool own = false);
  const std::map<std::string, FileRecord>& records() const { return records_; }

private:
  std::string directory_;
  int rank_;
  std::map<std::string, FileRecord> records_;
};

/// What one save writes, in the order the commit protocol asks for it.
struct SavePlan {
  /// On the main process: the directory to write, its parent created (and its leftovers removed).
  std::function<std::string()> choose_target;
  /// On every process: its files (the main process's include the checkpoint's shared files).
  std::function<void(FileWriter&)> write_files;
  /// On the main process: metadata.json's content, given every process's file records and the target.
  std::function<std::string(const std::map<std::string, FileRecord>&, const std::string& target)> metadata;
  /// On the main process, once the checkpoint is in place: what follows (the `latest` marker, pruning).
  std::function<void(const std::string& target)> after_commit;
};

/// Runs a save under `collective`: the main process chooses the target and assembles `.<name>.partial` next
/// to it, every other process checks that it sees that directory, every process writes its files, and the
/// main process writes metadata.json last and renames the directory into place (exchanging it with an older
/// checkpoint of the same name). A failure anywhere fails the save everywhere and removes the partial
/// directory; the previous checkpoints are never touched. Returns the checkpoint's directory.
std::string save_atomically(Collective& collective, const SavePlan& plan);

/// The hidden sibling a checkpoint is assembled in before it is renamed to `target`.
std::string partial_of(const std::string& target);
/// Deletes a checkpoint directory so that a crash halfway never leaves something that looks like one.
void remove_checkpoint_directory(const std::string& directory);
/// Removes what saves or prunes a crash interrupted under `root` (`.checkpoint_<n>.partial`, `.deleting`).
void remove_leftovers(const std::string& root);

} // namespace accelerate::detail
