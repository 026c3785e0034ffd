// The Accelerator's checkpoint API: save_state / load_state, collective, atomic and topology-free, over the
// units of runtime/checkpoint/ (docs/checkpoint-format.md describes what they write):
//   commit.*     the collective agreement every call runs under, and the atomic commit of a save
//   naming.*     explicit and automatic checkpoint directories, the `latest` marker, pruning
//   format.*     metadata.json's header, format version and checks
//   component.*  the interface each part of a checkpoint saves and loads through, and the list of parts
//   *_component.cpp  the parts: models, optimizers, schedulers, data positions, registered objects,
//                random states, step counters
// and save_model (weights only, through the weight files writer of runtime/weights/).
#include <accelerate/accelerator.h>
#include <accelerate/safetensors.h>

#include "accelerator/state.h"
#include "checkpoint/commit.h"
#include "checkpoint/component.h"
#include "checkpoint/format.h"
#include "checkpoint/naming.h"
#include "checkpoint/safetensors.h"
#include "common/durable_file.h"
#include "parallel/engine.h"
#include "precision/precision.h"
#include "weights/weight_files.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include <torch/torch.h>

namespace accelerate {

void Accelerator::register_checkpoint_entry(std::function<void(torch::serialize::OutputArchive&)> save,
                                            std::function<void(torch::serialize::InputArchive&)> load) {
  state_->checkpoint_entries.emplace_back(std::move(save), std::move(load));
}

void Accelerator::register_counter_entry(const std::string& name, std::function<std::int64_t()> get,
                                         std::function<void(std::int64_t)> set) {
  auto& counters = state_->counters;
  auto same =
      std::find_if(counters.begin(), counters.end(),
                   [&](const detail::AcceleratorState::Counter& counter) { return counter.name == name; });
  if (auto loaded = state_->loaded_counters.find(name); loaded != state_->loaded_counters.end()) {
    set(loaded->second);
  }
  if (same != counters.end()) {
    *same = {name, std::move(get), std::move(set)};
  } else {
    counters.push_back({name, std::move(get), std::move(set)});
  }
}

std::string Accelerator::save_state(const std::string& directory) {
  auto& state = *state_;
  const bool automatic = directory.empty();
  if (automatic) {
    detail::require_automatic_naming(state, "save_state");
  }
  // A skipped fp16 step decided on the device must be known before step counters and optimizers are saved.
  state.precision->resolve_pending_steps();
  detail::Collective collective(state, "save_state", directory);
  detail::count_save_for_kill_points();
  if (const int pending = state.gradient_state->backwards_since_step; pending > 0 && collective.main()) {
    std::cerr << "accelerate: save_state: called with the gradients of " << pending
              << " backward pass(es) not yet applied by an optimizer step; gradients are not saved, so a run "
                 "resumed from this checkpoint repeats that accumulation window without them. Save after "
                 "optimizer.step()"
              << std::endl;
  }

  const auto components = detail::checkpoint_components(state);
  detail::Json metadata;
  detail::SavePlan plan;
  plan.choose_target = [&] { return detail::save_target(state, directory); };
  plan.write_files = [&](detail::FileWriter& files) {
    metadata = detail::Json::object();
    for (const auto& component : components) {
      detail::ComponentWriter writer(state, files, metadata, component->name(), collective.rank(),
                                     collective.world());
      component->save(writer);
    }
  };
  plan.metadata = [&](const std::map<std::string, detail::FileRecord>& records, const std::string& target) {
    auto document = detail::metadata_header(
        state, collective.world(),
        automatic ? std::optional<int64_t>(detail::automatic_number(target)) : std::nullopt);
    document.update(metadata); // the components' entries, in their order, after the header
    document["files"] = detail::files_entry(records);
    return document.dump(2) + "\n";
  };
  plan.after_commit = [&](const std::string& target) {
    if (automatic) {
      detail::mark_latest_and_prune(state, target);
    }
  };

  std::string target;
  try {
    target = detail::save_atomically(collective, plan);
  } catch (...) {
    collective.finish();
    throw;
  }
  if (automatic) {
    state.next_checkpoint_number = detail::automatic_number(target) + 1;
  }
  collective.finish();
  return target;
}

void Accelerator::load_state(const std::string& directory) {
  auto& state = *state_;
  if (directory.empty()) {
    detail::require_automatic_naming(state, "load_state");
  }
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
    const auto components = detail::checkpoint_components(state);
    std::optional<detail::CheckpointMetadata> checkpoint;
    collective.agree("reading and checking the checkpoint", [&] {
      checkpoint = detail::read_metadata(state, source, collective.rank());
      for (const auto& component : components) {
        component->verify(detail::ComponentReader(state, *checkpoint, component->name(), collective.rank()));
      }
    });
    collective.agree("restoring the state", [&] {
      detail::Rollback rollback;
      try {
        for (const auto& component : components) {
          component->apply(rollback);
        }
      } catch (...) {
        rollback.run();
        throw;
      }
      detail::restore_checkpoint_counter(state, checkpoint->checkpoint_number);
    });
  } catch (...) {
    collective.finish();
    throw;
  }
  collective.finish();
}

namespace {

/// Module::save's layout (each module's parameters, then its buffers, then an archive per serializable
/// child), with the values of `tensors` (by the names module_tensors gives).
void write_module_archive(const torch::nn::Module& module, const std::string& prefix,
                          const std::map<std::string, torch::Tensor>& tensors,
                          torch::serialize::OutputArchive& archive) {
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    const auto found = tensors.find(prefix + item.key());
    archive.write(item.key(), found != tensors.end() ? found->second : item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    const auto found = tensors.find(prefix + item.key());
    archive.write(item.key(), found != tensors.end() ? found->second : item.value(), /*is_buffer=*/true);
  }
  for (const auto& child : module.named_children()) {
    if (child.value()->is_serializable()) {
      torch::serialize::OutputArchive child_archive(archive.compilation_unit());
      write_module_archive(*child.value(), prefix + child.key() + ".", tensors, child_archive);
      archive.write(child.key(), child_archive);
    }
  }
}

/// The main process's part of save_model: the weights through the weight files writer (one file, or shards
/// and an index), and model.pt. model.pt is staged first and renamed last, so an error anywhere leaves the
/// directory's previous files as they were.
void write_model_files(const torch::nn::Module& model, const std::map<std::string, torch::Tensor>& tensors,
                       const std::string& directory, uint64_t max_shard_size) {
  std::vector<torch::Tensor> values;
  std::vector<weights::WeightInfo> infos;
  for (const auto& [name, tensor] : tensors) {
    values.push_back(detail::weight_values(tensor, name));
    infos.push_back(
        {name, detail::safetensors_dtype(tensor.scalar_type(), name), values.back().sizes().vec()});
  }
  detail::make_directories(directory);
  torch::serialize::OutputArchive archive;
  write_module_archive(model, "", tensors, archive);
  const std::string archive_path = detail::join_path(directory, "model.pt");
  const std::string staged = detail::join_path(directory, ".model.pt.tmp-" + std::to_string(::getpid()));
  detail::write_file_durably(staged, detail::archive_bytes(archive));
  try {
    weights::write_weight_files(directory, infos, max_shard_size,
                                [&](size_t i) { return std::string(detail::bytes_of(values[i])); },
                                {{"format", "pt"}});
  } catch (...) {
    ::unlink(staged.c_str());
    throw;
  }
  detail::rename_path(staged, archive_path);
  detail::sync_directory(directory);
}

/// The shard size `options` ask for, or the error that names what to change.
uint64_t checked_shard_size(const SaveModelOptions& options) {
  if (!options.safe_serialization_) {
    throw std::invalid_argument(
        "accelerate: save_model: safe_serialization(false) asks for pickle files (pytorch_model.bin), which "
        "accelerate-cpp does not write (a pickle runs code when loaded, and libtorch writes none that "
        "torch.load reads). Drop .safe_serialization(false): model.safetensors (or its shards with "
        "model.safetensors.index.json) loads in Python with safetensors, transformers' from_pretrained or "
        "Accelerate's load_checkpoint_in_model, and model.pt in C++ with torch::load");
  }
  try {
    return weights::parse_size(options.max_shard_size_, "max_shard_size");
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(std::string("accelerate: save_model: ") + error.what());
  }
}

} // namespace

void Accelerator::save_model(const torch::nn::Module& model, const std::string& directory,
                             const SaveModelOptions& options) {
  auto& state = *state_;
  const uint64_t max_shard_size = checked_shard_size(options); // on every process, before any collective
  // Under a strategy that shards parameters (fsdp, outside unshard) every process sends its shares, one unit
  // at a time, and the main process writes; otherwise the main process writes what it holds.
  if (!state.engine->holds_shares_of(model)) {
    if (!is_main_process()) {
      return;
    }
    try {
      write_model_files(model, detail::module_tensors(model), directory, max_shard_size);
    } catch (const detail::FileError& error) {
      throw std::runtime_error(std::string("accelerate: save_model: ") + error.what());
    }
    return;
  }
  detail::Collective collective(state, "save_model", directory);
  try {
    std::map<std::string, torch::Tensor> tensors;
    collective.agree("gathering the model", [&] {
      tensors =
          state.engine->whole_model().whole_tensors(const_cast<torch::nn::Module&>(model), collective.main());
    });
    collective.agree("writing the model", [&] {
      if (collective.main()) {
        write_model_files(model, tensors, directory, max_shard_size);
      }
    });
  } catch (...) {
    collective.finish();
    throw;
  }
  collective.finish();
}

} // namespace accelerate
