// The Accelerator's checkpoint API: save_state / load_state, collective, atomic and topology-free, over the
// units of runtime/checkpoint/ (docs/checkpoint-format.md describes what they write):
//   commit.*     the collective agreement every call runs under, and the atomic commit of a save
//   naming.*     explicit and automatic checkpoint directories, the `latest` marker, pruning
//   format.*     metadata.json's header, format version and checks
//   component.*  the interface each part of a checkpoint saves and loads through, and the list of parts
//   *_component.cpp  the parts: models, optimizers, schedulers, data positions, registered objects,
//                random states, step counters
// and save_model (weights only).
#include <accelerate/accelerator.h>
#include <accelerate/safetensors.h>

#include "../durable_file.h"
#include "../parallel.h"
#include "../precision.h"
#include "../state.h"
#include "commit.h"
#include "component.h"
#include "format.h"
#include "naming.h"

#include <iostream>
#include <optional>

#include <torch/torch.h>

namespace accelerate {

void Accelerator::register_checkpoint_entry(std::function<void(torch::serialize::OutputArchive&)> save,
                                            std::function<void(torch::serialize::InputArchive&)> load) {
  state_->checkpoint_entries.emplace_back(std::move(save), std::move(load));
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

void Accelerator::save_model(const torch::nn::Module& model, const std::string& directory) {
  if (!is_main_process()) {
    return;
  }
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (state_->engine->whole_sizes(item.value()) != item.value().sizes().vec()) {
      // Under a strategy that shards parameters (fsdp) the main process alone cannot gather them.
      throw std::logic_error("accelerate: save_model: parameter '" + item.key() +
                             "' is sharded under parallel_strategy '" + state_->engine->name() +
                             "' (it holds none of its elements here); call save_model inside "
                             "`auto whole = accelerator.unshard(model);`, which every process enters");
    }
  }
  try {
    detail::make_directories(directory);
    accelerate::save_safetensors(detail::module_tensors(model),
                                 detail::join_path(directory, "model.safetensors"), {{"format", "pt"}});
    torch::serialize::OutputArchive archive;
    model.save(archive);
    detail::replace_file_atomically(detail::join_path(directory, "model.pt"), detail::archive_bytes(archive));
  } catch (const detail::FileError& error) {
    throw std::runtime_error(std::string("accelerate: save_model: ") + error.what());
  }
}

} // namespace accelerate
