// Checkpoints: collective, atomic, topology-free save_state/load_state, the checkpoint registry, and
// save_model (docs/checkpoint-format.md describes the layout this file writes).
#include <accelerate/accelerator.h>
#include <accelerate/safetensors.h>

#include "parallel.h"
#include "debug_mode.h"
#include "durable_file.h"
#include "optimizer_state.h"
#include "precision.h"
#include "safetensors.h"
#include "state.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#ifndef ACCEL_VERSION
#define ACCEL_VERSION "unknown"
#endif

namespace accelerate {
namespace detail {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormatName = "accelerate-cpp checkpoint";
/// Bump when a reader of the previous version could not load what this one writes.
constexpr int64_t kFormatVersion = 1;
constexpr const char* kMetadataFile = "metadata.json";
constexpr const char* kLatestMarker = "latest";
constexpr const char* kProbeFile = ".probe";

/// `save_state` calls this process has made, for the test-only kill hook below.
int saves_started = 0;

/// Test-only: `ACCELERATE_TEST_KILL_DURING_SAVE=<point>[@<n>]` makes the process that reaches `point` of its
/// n-th `save_state` call (default: the first) SIGKILL itself, to prove that a crash at that moment loses
/// nothing. The points are the names of the files written (`model.safetensors`, `optimizer.bin`,
/// `random_states_1.bin`, `metadata.json`, ...) right after each is written and fsync'd, `rename` before the
/// directory is renamed into place, and `latest` before the marker is updated.
void kill_point(const std::string& point) {
  const char* wanted = std::getenv("ACCELERATE_TEST_KILL_DURING_SAVE");
  if (wanted == nullptr) {
    return;
  }
  const std::string spec = wanted;
  const auto at = spec.find('@');
  const int call = at == std::string::npos ? 1 : std::atoi(spec.c_str() + at + 1);
  if (spec.substr(0, at) == point && call == saves_started) {
    std::cerr << "accelerate: ACCELERATE_TEST_KILL_DURING_SAVE=" << spec << ": killing this process"
              << std::endl;
    std::raise(SIGKILL);
  }
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("unknown host");
}

std::string numbered(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : stem + "_" + std::to_string(index) + extension;
}
std::string model_file(size_t index) {
  return numbered("model", index, ".safetensors");
}
std::string optimizer_file(size_t index) {
  return numbered("optimizer", index, ".bin");
}
std::string custom_file(size_t index) {
  return "custom_checkpoint_" + std::to_string(index) + ".bin";
}
std::string random_states_file(int rank) {
  return "random_states_" + std::to_string(rank) + ".bin";
}

/// The hidden sibling a checkpoint is assembled in before it is renamed to `target`.
std::string partial_of(const std::string& target) {
  return join_path(parent_path(target), "." + file_name(target) + ".partial");
}

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

std::string shape_of(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

/// Reaches the step count libtorch's LRScheduler keeps protected (it has no state_dict): schedulers such
/// as StepLR compute their next rate from it.
struct SchedulerStepCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& scheduler) {
    return scheduler.*(&SchedulerStepCount::step_count_);
  }
};

std::vector<std::shared_ptr<LoaderCore>> live_loaders(const AcceleratorState& state) {
  std::vector<std::shared_ptr<LoaderCore>> loaders;
  for (const auto& weak : state.loaders->cores) {
    if (auto core = weak.lock()) {
      loaders.push_back(std::move(core));
    }
  }
  return loaders;
}

std::map<std::string, torch::Tensor> model_tensors(const torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model.named_parameters(true)) {
    tensors[item.key()] = item.value();
  }
  for (const auto& item : model.named_buffers(true)) {
    tensors[item.key()] = item.value();
  }
  return tensors;
}

// ---- The collective frame of one save_state / load_state call ---------------------------------------------

/// Numbers a checkpoint call, checks that every process made it (the rank-local trap), and runs its phases so
/// that a failure on any process fails the call on every process, with that process's message.
class Collective {
public:
  Collective(AcceleratorState& state, std::string op, const std::string& argument)
      : state_(state), op_(std::move(op)) {
    const int64_t call = state.checkpoint_calls++;
    if (state.process_group) {
      store_ = state.process_group->getStore();
      rank_ = state.process_group->getRank();
      world_ = state.process_group->getSize();
      prefix_ = "accelerate/checkpoint/" + std::to_string(call) + "/";
      check_arrival(argument);
    }
  }

  bool main() const { return rank_ == 0; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::string& op() const { return op_; }

  /// Runs `work` on this process, then learns whether it failed anywhere: if so, every process throws (this
  /// process's own exception where it failed, the first failed process's message elsewhere).
  void agree(const std::string& phase, const std::function<void()>& work) {
    std::exception_ptr error;
    std::string message;
    try {
      work();
    } catch (const FileError& failure) {
      message = "accelerate: " + op_ + ": " + failure.what() + ". " + guarantee();
      error = std::make_exception_ptr(std::runtime_error(message));
    } catch (const c10::Error& failure) {
      message = "accelerate: " + op_ + ": " + failure.what_without_backtrace();
      error = std::make_exception_ptr(std::runtime_error(message));
    } catch (const std::exception& failure) {
      message = failure.what();
      error = std::current_exception();
    }
    if (world_ == 1) {
      if (error) {
        std::rethrow_exception(error);
      }
      return;
    }
    auto flags = torch::zeros({world_}, torch::kInt32);
    if (error) {
      flags[rank_] = 1;
      try {
        set("error/" + phase + "/" + std::to_string(rank_), message);
      } catch (const std::exception&) {
        // The store is gone with process 0; the collective below reports that.
      }
    }
    try {
      std::vector<at::Tensor> tensors{flags};
      state_.process_group->allreduce(tensors)->wait();
    } catch (const std::exception& failure) {
      if (error) {
        std::rethrow_exception(error);
      }
      throw std::runtime_error("accelerate: " + op_ + ": lost contact with the other processes while " +
                               phase + " (a process died, or stopped answering within the " +
                               std::to_string(state_.config.timeout.count()) +
                               " ms timeout). Cause: " + first_line(failure.what()));
    }
    if (flags.sum().item<int32_t>() == 0) {
      return;
    }
    std::string relayed;
    for (int rank = 0; rank < world_ && !error && relayed.empty(); ++rank) {
      if (flags[rank].item<int32_t>() != 0) {
        std::string reason = "(its message could not be read)";
        try {
          reason = get("error/" + phase + "/" + std::to_string(rank));
        } catch (const std::exception&) {
        }
        if (const std::string own = "accelerate: " + op_ + ": "; reason.rfind(own, 0) == 0) {
          reason.erase(0, own.size());
        }
        relayed = "accelerate: " + op_ + " failed on process " + std::to_string(rank) + " while " + phase +
                  ": " + reason;
      }
    }
    // No process leaves before every other has read the message it relays: process 0 hosts the store, and a
    // process that throws may end its program (and the store with it) at once.
    try {
      std::vector<at::Tensor> read{torch::zeros({1}, torch::kInt32)};
      state_.process_group->allreduce(read)->wait();
    } catch (const std::exception&) {
      // A process died meanwhile: each one still reports what it knows.
    }
    if (error) {
      std::rethrow_exception(error);
    }
    throw std::runtime_error(relayed);
  }

  /// Makes `value` readable by every process under `name` (a no-op with one process).
  void publish(const std::string& name, const std::string& value) {
    if (store_) {
      set(name, value);
    }
  }
  std::string fetch(const std::string& name) { return get(name); }

  /// Deletes this process's keys; call once every process is past its last read.
  void finish() {
    for (const auto& key : own_keys_) {
      try {
        store_->deleteKey(key);
      } catch (const std::exception&) {
      }
    }
    own_keys_.clear();
  }

private:
  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }
  std::string guarantee() const {
    return op_ == "save_state" ? "Nothing was replaced: the previous checkpoints are untouched"
                               : "Nothing was loaded";
  }

  void set(const std::string& name, const std::string& value) {
    try {
      store_->set(prefix_ + name, std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const c10::Error& error) {
      throw store_lost(error);
    }
    own_keys_.push_back(prefix_ + name);
  }
  std::string get(const std::string& name) {
    try {
      const auto value = store_->get(prefix_ + name);
      return std::string(value.begin(), value.end());
    } catch (const c10::Error& error) {
      throw store_lost(error);
    }
  }
  std::runtime_error store_lost(const c10::Error& error) const {
    return std::runtime_error("accelerate: " + op_ +
                              ": the rendezvous store (hosted by process 0) stopped answering; process 0 has "
                              "probably died. Cause: " +
                              first_line(error.what_without_backtrace()));
  }

  /// Every process must make this call, with the same directory: a call made on some processes only (under
  /// `if (accelerator.is_main_process())`) would otherwise wait forever in the first collective.
  void check_arrival(const std::string& argument) {
    const std::string mine = op_ + "\n" + argument + "\n" + caller_location();
    const auto timeout = state_.config.timeout;
    std::vector<std::string> keys;
    for (int rank = 0; rank < world_; ++rank) {
      keys.push_back(prefix_ + "arrived/" + std::to_string(rank));
    }
    try {
      if (store_->check({prefix_ + "abandoned"})) {
        throw std::logic_error(get("abandoned"));
      }
      set("arrived/" + std::to_string(rank_), mine);
      try {
        store_->wait(keys, timeout);
      } catch (const c10::Error&) {
        std::vector<int> missing;
        for (int rank = 0; rank < world_; ++rank) {
          if (!store_->check({keys[static_cast<size_t>(rank)]})) {
            missing.push_back(rank);
          }
        }
        if (missing.empty()) {
          throw;
        }
        std::string list;
        for (int rank : missing) {
          list += (list.empty() ? "" : ", ") + std::to_string(rank);
        }
        const std::string message =
            "accelerate: " + op_ + " is collective: every process must call it, but process" +
            (missing.size() == 1 ? " " : "es ") + list + " did not within " +
            std::to_string(timeout.count()) + " ms, while process " + std::to_string(rank_) +
            " called it from " + describe_code_location(caller_location()) +
            ". Each process saves and restores its own random-number state, and the main process writes the "
            "shared files, so a call under `if (accelerator.is_main_process())` can never complete: call " +
            op_ + " on every process (it already writes shared files from the main process only). If the " +
            "call is on every process, the missing one died or is stuck before it";
        set("abandoned", message);
        throw std::logic_error(message);
      }
    } catch (const c10::Error& error) {
      throw store_lost(error);
    }
    // Everyone arrived: the calls must be the same operation on the same directory.
    for (int rank = 0; rank < world_; ++rank) {
      const std::string theirs = get("arrived/" + std::to_string(rank));
      const auto first = theirs.find('\n');
      const auto second = theirs.find('\n', first + 1);
      const std::string their_op = theirs.substr(0, first);
      const std::string their_argument = theirs.substr(first + 1, second - first - 1);
      if (their_op != op_ || their_argument != argument) {
        auto call = [](const std::string& op, const std::string& directory) {
          return op + "(" + (directory.empty() ? "" : "\"" + directory + "\"") + ")";
        };
        throw std::logic_error("accelerate: process " + std::to_string(rank_) + " called " +
                               call(op_, argument) + " while process " + std::to_string(rank) + " called " +
                               call(their_op, their_argument) + " (from " +
                               describe_code_location(theirs.substr(second + 1)) +
                               "): every process must make the same checkpoint call with the same directory");
      }
    }
  }

  AcceleratorState& state_;
  std::string op_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<std::string> own_keys_;
};

// ---- Automatic naming -------------------------------------------------------------------------------------

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
  for (const auto& name : list_directory(root)) {
    const std::string prefix = "checkpoint_";
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

/// Deletes a directory so that a crash halfway never leaves something that looks like a checkpoint.
void remove_checkpoint_directory(const std::string& directory) {
  const std::string doomed = join_path(parent_path(directory), "." + file_name(directory) + ".deleting");
  remove_tree(doomed);
  rename_path(directory, doomed);
  remove_tree(doomed);
}

/// Leftovers of saves or prunes a crash interrupted.
void remove_leftovers(const std::string& root) {
  std::vector<std::string> leftovers;
  for (const auto& name : list_directory(root)) {
    auto ends_with = [&](const std::string& suffix) {
      return name.size() > suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (name.rfind(".checkpoint_", 0) == 0 && (ends_with(".partial") || ends_with(".deleting"))) {
      leftovers.push_back(join_path(root, name));
    }
  }
  for (const auto& path : leftovers) {
    remove_tree(path);
  }
}

/// Moves the finished `partial` directory to `target` in one step (exchanging it with an older checkpoint
/// of the same name where the filesystem allows), then removes what it replaced.
void commit_directory(const std::string& partial, const std::string& target) {
  if (!path_exists(target)) {
    rename_path(partial, target);
    return;
  }
  if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(partial); // now the previous checkpoint
    return;
  }
  // No atomic exchange on this filesystem: the old checkpoint stays under a hidden name until the new one
  // is in place.
  const std::string previous = join_path(parent_path(target), "." + file_name(target) + ".deleting");
  remove_tree(previous);
  rename_path(target, previous);
  rename_path(partial, target);
  remove_tree(previous);
}

// ---- What a checkpoint holds ------------------------------------------------------------------------------

struct FileRecord {
  uint64_t bytes = 0;
  std::string hash;
};

/// Writes the files of one process into the partial directory, recording their sizes and hashes.
class FileWriter {
public:
  explicit FileWriter(std::string directory) : directory_(std::move(directory)) {}
  void write(const std::string& name, const std::string& bytes) {
    write_file_durably(join_path(directory_, name), bytes);
    records_[name] = {bytes.size(), content_hash_hex(bytes)};
    kill_point(name);
  }
  const std::map<std::string, FileRecord>& records() const { return records_; }

private:
  std::string directory_;
  std::map<std::string, FileRecord> records_;
};

std::string random_states_bytes(const AcceleratorState& state) {
  torch::serialize::OutputArchive archive;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write("cpu", generator.get_state(), /*is_buffer=*/true);
  }
  if (state.device.is_cuda()) {
    const auto devices = static_cast<int>(torch::cuda::device_count());
    for (int index = 0; index < devices; ++index) {
      auto generator =
          at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
      std::lock_guard<std::mutex> lock(generator.mutex());
      archive.write("cuda_" + std::to_string(index), generator.get_state(), /*is_buffer=*/true);
    }
  }
  return archive_bytes(archive);
}

void restore_random_states(const AcceleratorState& state, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  {
    torch::Tensor saved;
    archive.read("cpu", saved, /*is_buffer=*/true);
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved);
  }
  if (state.device.is_cuda()) {
    const auto devices = static_cast<int>(torch::cuda::device_count());
    for (int index = 0; index < devices; ++index) {
      torch::Tensor saved;
      if (!archive.try_read("cuda_" + std::to_string(index), saved, /*is_buffer=*/true)) {
        continue; // saved on a machine with fewer GPUs
      }
      auto generator =
          at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(saved);
    }
  }
}

/// A window's micro-steps survive a checkpoint only when no gradients are pending: the gradients themselves
/// are not saved. After the window's optimizer step (or between windows) the count restarts at zero.
int64_t micro_steps_to_save(const GradientState& gradients) {
  return gradients.backwards_since_step == 0 ? 0 : gradients.micro_steps_in_window;
}

Json training_metadata(AcceleratorState& state, int world, std::optional<int64_t> number) {
  const auto& gradients = *state.gradient_state;
  Json metadata;
  metadata["format"] = kFormatName;
  metadata["format_version"] = kFormatVersion;
  metadata["accelerate_cpp_version"] = ACCEL_VERSION;
  metadata["torch_version"] = TORCH_VERSION;
  metadata["created_unix_seconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  metadata["world_size"] = world;
  metadata["mixed_precision"] = state.config.mixed_precision;
  metadata["step"] = gradients.optimizer_steps;
  metadata["checkpoint_number"] = number ? Json(*number) : Json(nullptr);
  metadata["gradient_state"] = {{"optimizer_steps", gradients.optimizer_steps},
                                {"micro_steps_in_window", micro_steps_to_save(gradients)},
                                {"accumulation_steps", gradients.accumulation_steps}};
  Json models = Json::array();
  for (size_t i = 0; i < state.models.size(); ++i) {
    models.push_back({{"file", model_file(i)}, {"tensors", model_tensors(state.models[i]->model()).size()}});
  }
  metadata["models"] = models;
  Json optimizers = Json::array();
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    const auto& optimizer = *state.optimizers[i];
    optimizers.push_back({{"file", optimizer_file(i)},
                          {"type", c10::demangle(typeid(*optimizer.optimizer).name())},
                          {"fused_steps", optimizer.fused_steps}});
  }
  metadata["optimizers"] = optimizers;
  Json schedulers = Json::array();
  for (const auto& scheduler : state.schedulers) {
    schedulers.push_back({{"type", c10::demangle(typeid(*scheduler->scheduler).name())},
                          {"step_count", SchedulerStepCount::of(*scheduler->scheduler)},
                          {"steps", scheduler->steps},
                          {"optimizer_steps_seen", scheduler->optimizer_steps_seen}});
  }
  metadata["schedulers"] = schedulers;
  Json loaders = Json::array();
  for (const auto& core : live_loaders(state)) {
    const auto position = core->state();
    loaders.push_back({{"epoch", position.epoch},
                       {"batches_consumed", position.batches_consumed},
                       {"seed", position.seed},
                       {"global_batch_size", position.global_batch_size}});
  }
  metadata["data_loaders"] = loaders;
  Json custom = Json::array();
  for (size_t i = 0; i < state.checkpoint_entries.size(); ++i) {
    custom.push_back({{"file", custom_file(i)}});
  }
  metadata["custom_objects"] = custom;
  return metadata;
}

// ---- Reading a checkpoint back ----------------------------------------------------------------------------

/// What a scheduler handle keeps (see docs/checkpoint-format.md).
struct SchedulerCounters {
  unsigned step_count = 0;
  int64_t steps = 0;
  int64_t optimizer_steps_seen = 0;
};

/// A checkpoint read into memory and checked against this program, before anything is changed.
struct LoadedCheckpoint {
  std::string directory;
  int saved_world_size = 0;
  std::optional<int64_t> checkpoint_number;
  int64_t optimizer_steps = 0;
  int micro_steps_in_window = 0;
  std::vector<SafetensorsContent> models;
  std::vector<std::string> optimizers;
  std::vector<int64_t> fused_steps;
  std::vector<SchedulerCounters> schedulers;
  std::vector<DataLoaderState> data_positions;
  std::vector<std::string> custom;
  std::optional<std::string> random_states;
};

[[noreturn]] void damaged(const std::string& directory, const std::string& problem) {
  throw std::runtime_error(
      "accelerate: load_state: the checkpoint '" + directory + "' is damaged: " + problem +
      ". Nothing was loaded; load an earlier checkpoint (the directories next to it), or "
      "save a new one");
}

const Json& field(const Json& object, const std::string& key, const std::string& directory) {
  if (!object.is_object() || !object.contains(key)) {
    damaged(directory, std::string(kMetadataFile) + " lacks the entry '" + key + "'");
  }
  return object.at(key);
}

template <typename T>
T number_field(const Json& object, const std::string& key, const std::string& directory) {
  const Json& value = field(object, key, directory);
  if (!value.is_number_integer()) {
    damaged(directory,
            std::string(kMetadataFile) + " entry '" + key + "' is " + value.dump() + ", not an integer");
  }
  return value.get<T>();
}

const Json& list_field(const Json& object, const std::string& key, const std::string& directory) {
  const Json& value = field(object, key, directory);
  if (!value.is_array()) {
    damaged(directory, std::string(kMetadataFile) + " entry '" + key + "' is not a list");
  }
  return value;
}

std::string read_recorded_file(const std::string& directory, const Json& files, const std::string& name) {
  if (!files.contains(name)) {
    damaged(directory, std::string(kMetadataFile) + " does not record the file '" + name + "'");
  }
  const std::string path = join_path(directory, name);
  if (!path_exists(path)) {
    damaged(directory, "its file '" + name + "' is missing");
  }
  const std::string bytes = read_whole_file(path);
  const auto expected_bytes = number_field<uint64_t>(files.at(name), "bytes", directory);
  if (bytes.size() != expected_bytes) {
    damaged(directory, "'" + name + "' holds " + std::to_string(bytes.size()) + " bytes, but " +
                           kMetadataFile + " recorded " + std::to_string(expected_bytes) +
                           " (the file is truncated or was changed)");
  }
  const std::string expected_hash = field(files.at(name), "hash", directory).get<std::string>();
  if (content_hash_hex(bytes) != expected_hash) {
    damaged(directory, "'" + name + "' has content hash " + content_hash_hex(bytes) + ", but " +
                           kMetadataFile + " recorded " + expected_hash + " (the file is corrupt)");
  }
  return bytes;
}

/// Where `load_state` reads from: `directory`, or the latest automatic checkpoint.
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

void check_count(const std::string& directory, const std::string& what, size_t saved, size_t prepared,
                 const std::string& fix) {
  if (saved != prepared) {
    throw std::invalid_argument("accelerate: load_state: the checkpoint '" + directory + "' holds " +
                                std::to_string(saved) + " " + what + ", but this program prepared " +
                                std::to_string(prepared) + "; " + fix);
  }
}

/// Throws, listing every difference, when `saved` is not a state of `model`.
void check_same_model(const std::string& file, size_t index, const SafetensorsContent& saved,
                      const torch::nn::Module& model) {
  const auto expected = model_tensors(model);
  std::vector<std::string> missing, unexpected, reshaped;
  for (const auto& [name, tensor] : expected) {
    const auto found = saved.tensors.find(name);
    if (found == saved.tensors.end()) {
      missing.push_back(name + " " + shape_of(tensor));
    } else if (found->second.sizes() != tensor.sizes()) {
      reshaped.push_back(name + ": checkpoint " + shape_of(found->second) + ", model " + shape_of(tensor));
    }
  }
  for (const auto& [name, tensor] : saved.tensors) {
    if (expected.find(name) == expected.end()) {
      unexpected.push_back(name + " " + shape_of(tensor));
    }
  }
  if (missing.empty() && unexpected.empty() && reshaped.empty()) {
    return;
  }
  auto list = [](const std::string& title, const std::vector<std::string>& items) {
    if (items.empty()) {
      return std::string();
    }
    std::string text = "\n  " + title + ":";
    for (size_t i = 0; i < items.size() && i < 20; ++i) {
      text += (i == 0 ? " " : ", ") + items[i];
    }
    if (items.size() > 20) {
      text += " and " + std::to_string(items.size() - 20) + " more";
    }
    return text;
  };
  throw std::invalid_argument(
      "accelerate: load_state: '" + file + "' holds another model than prepared model " +
      std::to_string(index) + " ('" + model.name() + "')" +
      list("in this model, missing from the checkpoint", missing) +
      list("in the checkpoint, not in this model", unexpected) + list("different shapes", reshaped) +
      "\nLoad a checkpoint of this model, or build the model the checkpoint was saved from");
}

LoadedCheckpoint read_checkpoint(AcceleratorState& state, const std::string& directory, int rank) {
  LoadedCheckpoint loaded;
  loaded.directory = directory;
  if (!is_directory(directory)) {
    throw std::invalid_argument(
        "accelerate: load_state: process " + std::to_string(rank) + " (host " + host_name() +
        ") does not see the checkpoint directory '" + directory +
        "': checkpoints must be on a filesystem every process shares, at the same path");
  }
  const std::string metadata_path = join_path(directory, kMetadataFile);
  if (!path_exists(metadata_path)) {
    throw std::invalid_argument(
        "accelerate: load_state: '" + directory + "' has no " + kMetadataFile +
        ": it is not a checkpoint written by save_state (an interrupted save is never renamed into place, so "
        "this is some other directory); pass the directory save_state returned");
  }
  Json metadata;
  try {
    metadata = Json::parse(read_whole_file(metadata_path));
  } catch (const Json::exception& error) {
    damaged(directory, std::string(kMetadataFile) + " does not parse (" + error.what() + ")");
  }
  if (!metadata.is_object() || !metadata.contains("format") || metadata["format"] != kFormatName) {
    damaged(directory, std::string(kMetadataFile) + " does not describe an accelerate-cpp checkpoint");
  }
  const auto version = number_field<int64_t>(metadata, "format_version", directory);
  if (version > kFormatVersion) {
    throw std::runtime_error("accelerate: load_state: '" + directory + "' has checkpoint format version " +
                             std::to_string(version) + " (written by accelerate-cpp " +
                             metadata.value("accelerate_cpp_version", std::string("?")) +
                             "), but this accelerate-cpp (" + ACCEL_VERSION +
                             ") reads format versions up to " + std::to_string(kFormatVersion) +
                             "; load it with a newer accelerate-cpp");
  }
  const Json& files = field(metadata, "files", directory);

  const Json& models = list_field(metadata, "models", directory);
  check_count(directory, "model(s)", models.size(), state.models.size(),
              "prepare the same models, in the same order, before load_state");
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string name = field(models[i], "file", directory).get<std::string>();
    loaded.models.push_back(
        decode_safetensors(read_recorded_file(directory, files, name), join_path(directory, name)));
    check_same_model(join_path(directory, name), i, loaded.models.back(), state.models[i]->model());
  }
  const Json& optimizers = list_field(metadata, "optimizers", directory);
  check_count(directory, "optimizer(s)", optimizers.size(), state.optimizers.size(),
              "prepare the same optimizers, in the same order, before load_state");
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const std::string type = c10::demangle(typeid(*state.optimizers[i]->optimizer).name());
    const std::string saved_type = field(optimizers[i], "type", directory).get<std::string>();
    if (saved_type != type) {
      throw std::invalid_argument("accelerate: load_state: the checkpoint's optimizer " + std::to_string(i) +
                                  " is a " + saved_type + ", but this program prepared a " + type +
                                  " there; prepare the optimizer the checkpoint was saved with");
    }
    loaded.optimizers.push_back(
        read_recorded_file(directory, files, field(optimizers[i], "file", directory).get<std::string>()));
    loaded.fused_steps.push_back(number_field<int64_t>(optimizers[i], "fused_steps", directory));
  }
  const Json& schedulers = list_field(metadata, "schedulers", directory);
  check_count(directory, "scheduler(s)", schedulers.size(), state.schedulers.size(),
              "prepare the same schedulers, in the same order, before load_state");
  for (const auto& scheduler : schedulers) {
    loaded.schedulers.push_back({number_field<unsigned>(scheduler, "step_count", directory),
                                 number_field<int64_t>(scheduler, "steps", directory),
                                 number_field<int64_t>(scheduler, "optimizer_steps_seen", directory)});
  }
  const Json& loaders = list_field(metadata, "data_loaders", directory);
  check_count(directory, "data loader position(s)", loaders.size(), live_loaders(state).size(),
              "prepare the same data loaders, in the same order, before load_state");
  for (const auto& loader : loaders) {
    DataLoaderState position;
    position.epoch = number_field<uint64_t>(loader, "epoch", directory);
    position.batches_consumed = number_field<uint64_t>(loader, "batches_consumed", directory);
    position.seed = number_field<uint64_t>(loader, "seed", directory);
    position.global_batch_size = number_field<uint64_t>(loader, "global_batch_size", directory);
    loaded.data_positions.push_back(position);
  }
  const Json& custom = list_field(metadata, "custom_objects", directory);
  check_count(
      directory, "registered object(s)", custom.size(), state.checkpoint_entries.size(),
      "register the same objects with register_for_checkpointing, in the same order, before load_state");
  for (const auto& entry : custom) {
    loaded.custom.push_back(
        read_recorded_file(directory, files, field(entry, "file", directory).get<std::string>()));
  }
  loaded.saved_world_size = number_field<int>(metadata, "world_size", directory);
  if (rank < loaded.saved_world_size) {
    loaded.random_states = read_recorded_file(directory, files, random_states_file(rank));
  }
  const Json& gradients = field(metadata, "gradient_state", directory);
  loaded.optimizer_steps = number_field<int64_t>(gradients, "optimizer_steps", directory);
  loaded.micro_steps_in_window = number_field<int>(gradients, "micro_steps_in_window", directory);
  if (field(metadata, "checkpoint_number", directory).is_number_integer()) {
    loaded.checkpoint_number = metadata["checkpoint_number"].get<int64_t>();
  }
  return loaded;
}

/// Undo actions for a load that failed halfway, run newest first.
class Rollback {
public:
  void add(std::function<void()> undo) { undo_.push_back(std::move(undo)); }
  void run() noexcept {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      try {
        (*it)();
      } catch (...) {
      }
    }
    undo_.clear();
  }

private:
  std::vector<std::function<void()>> undo_;
};

torch::serialize::InputArchive archive_of(const std::string& bytes, const torch::Device& device) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), device);
  return archive;
}

void apply_checkpoint(AcceleratorState& state, const LoadedCheckpoint& loaded) {
  Rollback rollback;
  try {
    // Data positions first: set_state checks them against this loader's batches.
    const auto loaders = live_loaders(state);
    for (size_t i = 0; i < loaders.size(); ++i) {
      const auto previous = loaders[i]->state();
      loaders[i]->set_state(loaded.data_positions[i]);
      rollback.add([core = loaders[i], previous] { core->set_state(previous); });
    }
    for (size_t i = 0; i < state.optimizers.size(); ++i) {
      auto& prepared = *state.optimizers[i];
      torch::serialize::OutputArchive before;
      prepared.optimizer->save(before);
      rollback.add(
          [&prepared, bytes = archive_bytes(before), device = state.device, fused = prepared.fused_steps] {
            auto archive = archive_of(bytes, device);
            prepared.optimizer->load(archive);
            prepared.step_tensors.clear();
            prepared.fused_steps = fused;
          });
      auto archive = archive_of(loaded.optimizers[i], state.device);
      prepared.optimizer->load(archive);
      prepared.step_tensors.clear(); // the fused kernels' step tensors follow libtorch's restored counts
      prepared.fused_steps = loaded.fused_steps[i];
    }
    for (size_t i = 0; i < state.checkpoint_entries.size(); ++i) {
      auto& load = state.checkpoint_entries[i].second;
      torch::serialize::OutputArchive before;
      state.checkpoint_entries[i].first(before);
      rollback.add([&load, bytes = archive_bytes(before), device = state.device] {
        auto archive = archive_of(bytes, device);
        load(archive);
      });
      auto archive = archive_of(loaded.custom[i], state.device);
      load(archive);
    }
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < state.models.size(); ++i) {
        for (auto& [name, tensor] : model_tensors(state.models[i]->model())) {
          rollback.add([tensor = tensor, previous = tensor.detach().clone()]() mutable {
            torch::NoGradGuard guard;
            tensor.copy_(previous);
          });
          tensor.copy_(loaded.models[i].tensors.at(name));
        }
      }
    }
  } catch (...) {
    rollback.run();
    throw;
  }
  // What remains cannot fail: counters, checked when read, and the generators.
  for (size_t i = 0; i < state.schedulers.size(); ++i) {
    auto& scheduler = *state.schedulers[i];
    SchedulerStepCount::of(*scheduler.scheduler) = loaded.schedulers[i].step_count;
    scheduler.steps = loaded.schedulers[i].steps;
    scheduler.optimizer_steps_seen = loaded.schedulers[i].optimizer_steps_seen;
  }
  auto& gradients = *state.gradient_state;
  gradients.optimizer_steps = loaded.optimizer_steps;
  gradients.micro_steps_in_window = loaded.micro_steps_in_window;
  gradients.backwards_since_step = 0;
  gradients.sync_gradients = true;
  if (loaded.random_states) {
    restore_random_states(state, *loaded.random_states);
  } else if (state.process_group) {
    std::cerr << "accelerate: load_state: the checkpoint was written by " << loaded.saved_world_size
              << " processes; process " << state.process_group->getRank()
              << " has no saved random state and keeps its own" << std::endl;
  }
  if (loaded.checkpoint_number) {
    state.next_checkpoint_number = std::max(state.next_checkpoint_number, *loaded.checkpoint_number + 1);
  }
}

} // namespace
} // namespace detail

// ---- The Accelerator's checkpoint API
// ----------------------------------------------------------------------

void Accelerator::register_checkpoint_entry(std::function<void(torch::serialize::OutputArchive&)> save,
                                            std::function<void(torch::serialize::InputArchive&)> load) {
  state_->checkpoint_entries.emplace_back(std::move(save), std::move(load));
}

std::string Accelerator::save_state(const std::string& directory) {
  auto& state = *state_;
  // A skipped fp16 step decided on the device must be known before step counters and optimizers are saved.
  state.precision->resolve_pending_steps();
  detail::Collective collective(state, "save_state", directory);
  ++detail::saves_started;
  const bool automatic = directory.empty();
  if (const int pending = state.gradient_state->backwards_since_step; pending > 0 && collective.main()) {
    std::cerr << "accelerate: save_state: called with the gradients of " << pending
              << " backward pass(es) not yet applied by an optimizer step; gradients are not saved, so a run "
                 "resumed from this checkpoint repeats that accumulation window without them. Save after "
                 "optimizer.step()"
              << std::endl;
  }
  std::string target, partial;
  int64_t number = -1;

  try {
    collective.agree("preparing the directory", [&] {
      if (!collective.main()) {
        return;
      }
      std::string root;
      if (automatic) {
        root = detail::automatic_root(state, "save_state");
        detail::make_directories(root);
        detail::remove_leftovers(root);
        const auto existing = detail::automatic_checkpoints(root);
        number = std::max(state.next_checkpoint_number, existing.empty() ? 0 : existing.back().first + 1);
        target = detail::join_path(root, "checkpoint_" + std::to_string(number));
      } else {
        target = detail::absolute_path(directory); // "ckpt/" names "ckpt"
        root = detail::parent_path(target);
        detail::make_directories(root);
        if (detail::path_exists(target) &&
            (!detail::is_directory(target) ||
             (!detail::list_directory(target).empty() &&
              !detail::path_exists(detail::join_path(target, detail::kMetadataFile))))) {
          throw std::invalid_argument("accelerate: save_state: '" + target +
                                      "' exists and is not a checkpoint (no " + detail::kMetadataFile +
                                      "); save_state replaces the whole directory atomically, so it will not "
                                      "overwrite it. Choose a new or empty directory");
        }
      }
      partial = detail::partial_of(target);
      detail::remove_tree(partial);
      detail::make_directories(partial);
      const std::string token = std::to_string(std::random_device{}()) + "@" + detail::host_name();
      detail::write_file_durably(detail::join_path(partial, detail::kProbeFile), token);
      collective.publish("target", target);
      collective.publish("number", std::to_string(number));
      collective.publish("probe", token);
    });
    if (!collective.main()) {
      target = collective.fetch("target");
      number = std::stoll(collective.fetch("number"));
      partial = detail::partial_of(target);
    }

    // Without a filesystem shared by every process, the others would write into directories nobody reads.
    collective.agree("checking that every process sees the directory", [&] {
      if (collective.main()) {
        return;
      }
      const std::string token = collective.fetch("probe");
      const std::string probe = detail::join_path(partial, detail::kProbeFile);
      if (!detail::path_exists(probe) || detail::read_whole_file(probe) != token) {
        throw std::runtime_error(
            "accelerate: save_state: process " + std::to_string(collective.rank()) + " (host " +
            detail::host_name() + ") does not see '" + partial + "', which process 0 (" +
            token.substr(token.find('@') + 1) +
            ") just created: checkpoints must go to a filesystem every process shares (NFS, Lustre, a shared "
            "volume), at the same path on every node. Save to such a directory");
      }
    });

    detail::FileWriter writer(partial);
    collective.agree("writing files", [&] {
      writer.write(detail::random_states_file(collective.rank()), detail::random_states_bytes(state));
      const auto& record = writer.records().begin()->second;
      collective.publish("file/" + std::to_string(collective.rank()),
                         std::to_string(record.bytes) + " " + record.hash);
      if (!collective.main()) {
        return;
      }
      for (size_t i = 0; i < state.models.size(); ++i) {
        writer.write(
            detail::model_file(i),
            detail::encode_safetensors(detail::model_tensors(state.models[i]->model()), {{"format", "pt"}}));
      }
      for (size_t i = 0; i < state.optimizers.size(); ++i) {
        torch::serialize::OutputArchive archive;
        state.optimizers[i]->optimizer->save(archive);
        writer.write(detail::optimizer_file(i), detail::archive_bytes(archive));
      }
      for (size_t i = 0; i < state.checkpoint_entries.size(); ++i) {
        torch::serialize::OutputArchive archive;
        state.checkpoint_entries[i].first(archive);
        writer.write(detail::custom_file(i), detail::archive_bytes(archive));
      }
    });

    collective.agree("committing the checkpoint", [&] {
      if (!collective.main()) {
        return;
      }
      auto metadata = detail::training_metadata(state, collective.world(),
                                                automatic ? std::optional<int64_t>(number) : std::nullopt);
      detail::Json files = detail::Json::object();
      for (const auto& [name, record] : writer.records()) {
        files[name] = {{"bytes", record.bytes}, {"hash", record.hash}};
      }
      for (int rank = 1; rank < collective.world(); ++rank) {
        const std::string record = collective.fetch("file/" + std::to_string(rank));
        const auto space = record.find(' ');
        files[detail::random_states_file(rank)] = {{"bytes", std::stoull(record.substr(0, space))},
                                                   {"hash", record.substr(space + 1)}};
      }
      metadata["files"] = files;
      detail::remove_tree(detail::join_path(partial, detail::kProbeFile));
      writer.write(detail::kMetadataFile, metadata.dump(2) + "\n");
      detail::sync_directory(partial);
      detail::kill_point("rename");
      detail::commit_directory(partial, target);
      detail::sync_directory(detail::parent_path(target));
      if (automatic) {
        detail::kill_point("latest");
        const std::string root = detail::parent_path(target);
        detail::replace_file_atomically(detail::join_path(root, detail::kLatestMarker),
                                        detail::file_name(target) + "\n");
        const int limit = state.config.total_limit;
        auto existing = detail::automatic_checkpoints(root);
        for (size_t i = 0; limit > 0 && existing.size() - i > static_cast<size_t>(limit); ++i) {
          if (existing[i].first != number) { // never the checkpoint just written
            detail::remove_checkpoint_directory(existing[i].second);
          }
        }
        detail::sync_directory(root);
      }
    });
  } catch (...) {
    if (collective.main() && !partial.empty()) {
      try {
        detail::remove_tree(partial); // the previous checkpoints were never touched
      } catch (const std::exception&) {
      }
    }
    collective.finish();
    throw;
  }
  if (automatic) {
    state.next_checkpoint_number = number + 1;
  }
  collective.finish();
  return target;
}

void Accelerator::load_state(const std::string& directory) {
  auto& state = *state_;
  detail::Collective collective(state, "load_state", directory);
  std::string source;
  try {
    collective.agree("finding the checkpoint", [&] {
      if (collective.main()) {
        source = detail::resolve_checkpoint(state, directory);
        collective.publish("source", source);
      }
    });
    if (!collective.main()) {
      source = collective.fetch("source");
    }
    detail::LoadedCheckpoint loaded;
    collective.agree("reading and checking the checkpoint",
                     [&] { loaded = detail::read_checkpoint(state, source, collective.rank()); });
    collective.agree("restoring the state", [&] { detail::apply_checkpoint(state, loaded); });
  } catch (...) {
    collective.finish();
    throw;
  }
  collective.finish();
}

void Accelerator::save_model(const torch::nn::Module& model, const std::string& directory) {
  if (!is_main_process()) {
    return;
  }
  try {
    detail::make_directories(directory);
    accelerate::save_safetensors(detail::model_tensors(model),
                                 detail::join_path(directory, "model.safetensors"), {{"format", "pt"}});
    torch::serialize::OutputArchive archive;
    model.save(archive);
    detail::replace_file_atomically(detail::join_path(directory, "model.pt"), detail::archive_bytes(archive));
  } catch (const detail::FileError& error) {
    throw std::runtime_error(std::string("accelerate: save_model: ") + error.what());
  }
}

} // namespace accelerate
