// Where checkpoints go and which one loads (naming.h).
#include "checkpoint/naming.h"

#include "accelerator/state.h"
#include "checkpoint/commit.h"
#include "checkpoint/format.h"
#include "common/durable_file.h"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace accelerate::detail {
namespace {

constexpr const char* kLatestMarker = "latest";
constexpr const char* kPrefix = "checkpoint_";

std::string automatic_root(const AcceleratorState& state, const std::string& op) {
  if (state.config.project_dir.empty()) {
    throw std::invalid_argument(
        "accelerate: " + op +
        "() without a directory uses automatic checkpoint naming under project_dir, but no "
        "project_dir is set; pass a directory, or set AcceleratorOptions().project_dir(\"runs/exp1\")");
  }
  return absolute_path(join_path(state.config.project_dir, "checkpoints"));
}

/// The automatically named checkpoints under `root`, oldest first.
std::vector<std::pair<int64_t, std::string>> automatic_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (!is_directory(root)) {
    return found;
  }
  const std::string prefix = kPrefix;
  for (const auto& name : list_directory(root)) {
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 18 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos ||
        !is_directory(join_path(root, name))) {
      continue;
    }
    found.emplace_back(std::stoll(name.substr(prefix.size())), join_path(root, name));
  }
  std::sort(found.begin(), found.end());
  return found;
}

} // namespace

void require_automatic_naming(const AcceleratorState& state, const std::string& op) {
  if (!state.config.automatic_checkpoint_naming) {
    throw std::invalid_argument(
        "accelerate: " + op +
        "() without a directory names the checkpoint automatically, but automatic_checkpoint_naming is off; "
        "pass a directory (" +
        op +
        "(\"runs/exp1/checkpoint\")), or set AcceleratorOptions().automatic_checkpoint_naming(true) "
        "to use project_dir/checkpoints/checkpoint_<n>");
  }
}

std::string save_target(const AcceleratorState& state, const std::string& directory) {
  if (directory.empty()) {
    const std::string root = automatic_root(state, "save_state");
    make_directories(root);
    remove_leftovers(root);
    const auto existing = automatic_checkpoints(root);
    const int64_t number =
        std::max(state.next_checkpoint_number, existing.empty() ? 0 : existing.back().first + 1);
    return join_path(root, kPrefix + std::to_string(number));
  }
  const std::string target = absolute_path(directory); // "ckpt/" names "ckpt"
  make_directories(parent_path(target));
  if (path_exists(target) && (!is_directory(target) || (!list_directory(target).empty() &&
                                                        !path_exists(join_path(target, kMetadataFile))))) {
    throw std::invalid_argument("accelerate: save_state: '" + target +
                                "' exists and is not a checkpoint (no " + kMetadataFile +
                                "); save_state replaces the whole directory atomically, so it will not "
                                "overwrite it. Choose a new or empty directory");
  }
  return target;
}

int64_t automatic_number(const std::string& target) {
  return std::stoll(file_name(target).substr(std::string(kPrefix).size()));
}

void mark_latest_and_prune(const AcceleratorState& state, const std::string& target) {
  kill_point("latest");
  const std::string root = parent_path(target);
  replace_file_atomically(join_path(root, kLatestMarker), file_name(target) + "\n");
  const int limit = state.config.total_limit;
  const int64_t number = automatic_number(target);
  auto existing = automatic_checkpoints(root);
  for (size_t i = 0; limit > 0 && existing.size() - i > static_cast<size_t>(limit); ++i) {
    if (existing[i].first != number) { // never the checkpoint just written
      remove_checkpoint_directory(existing[i].second);
    }
  }
  sync_directory(root);
}

std::string resolve_checkpoint(const AcceleratorState& state, const std::string& directory) {
  if (!directory.empty()) {
    const std::string path = absolute_path(directory);
    if (!path_exists(path)) {
      const std::string partial = partial_of(path);
      throw std::invalid_argument(
          "accelerate: load_state: the checkpoint directory '" + path + "' does not exist" +
          (path_exists(partial) ? " (only '" + file_name(partial) +
                                      "' does: a save that was interrupted, which is never loaded)"
                                : "") +
          "; pass the directory save_state returned, or call load_state() to take the latest automatic "
          "checkpoint");
    }
    if (!is_directory(path)) {
      throw std::invalid_argument(
          "accelerate: load_state: '" + path +
          "' is a file, not a checkpoint directory; pass the directory save_state returned");
    }
    return path;
  }
  const std::string root = automatic_root(state, "load_state");
  const std::string marker = join_path(root, kLatestMarker);
  if (path_exists(marker)) {
    std::string name = read_whole_file(marker);
    name.erase(name.find_last_not_of(" \n\r\t") + 1);
    const std::string latest = join_path(root, name);
    if (name.empty() || name.find('/') != std::string::npos || !is_directory(latest)) {
      throw std::runtime_error("accelerate: load_state: '" + marker + "' names the checkpoint '" + name +
                               "', which does not exist under " + root +
                               "; pass the checkpoint directory to load explicitly");
    }
    return latest;
  }
  const auto found = automatic_checkpoints(root);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    if (path_exists(join_path(it->second, kMetadataFile))) {
      return it->second;
    }
  }
  throw std::invalid_argument(
      "accelerate: load_state: no checkpoint found under '" + root +
      "' (project_dir/checkpoints); save one with save_state() first, or pass a directory");
}

void restore_checkpoint_counter(AcceleratorState& state, std::optional<int64_t> loaded_number) {
  if (loaded_number) {
    state.next_checkpoint_number = std::max(state.next_checkpoint_number, *loaded_number + 1);
  }
}

} // namespace accelerate::detail
