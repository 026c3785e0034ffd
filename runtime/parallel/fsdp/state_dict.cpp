// The whole parameters of a sharded model (unshard(), full state dicts) and the models' part of a checkpoint
// under "fsdp" (fsdp_state_dict_type: each process's shards, or whole models).
#include "parallel/fsdp/internal.h"

#include "checkpoint/component.h"

#include <unordered_map>

namespace accelerate::detail::fsdp_internal {

std::function<void()> FsdpEngine::gather_full_parameters(torch::nn::Module& model) {
  auto sharded = sharded_of(model);
  if (!sharded) {
    return {};
  }
  std::vector<size_t> gathered;
  for (auto& unit : sharded->units) {
    if (!unit.gathered) {
      sharded->gather(unit);
      gathered.push_back(unit.index);
    }
  }
  return [sharded, gathered]() {
    for (auto& unit : sharded->units) {
      sharded->write_back(unit);
    }
    for (size_t index : gathered) {
      sharded->reshard(sharded->units[index]);
    }
  };
}

std::map<std::string, torch::Tensor> FsdpEngine::whole_tensors(torch::nn::Module& module, bool keeps) {
  auto tensors = module_tensors(module);
  auto sharded = sharded_of(module);
  if (!sharded) {
    return tensors; // replicated
  }
  std::unordered_map<const c10::TensorImpl*, std::vector<std::string>> names;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    names[item.value().unsafeGetTensorImpl()].push_back(item.key());
  }
  for (auto& unit : sharded->units) {
    const bool was_gathered = unit.gathered;
    sharded->gather(unit);
    for (const auto& group : unit.groups) {
      for (size_t m : group.members) {
        const auto& parameter = sharded->members[m].parameter;
        for (const auto& name : names[parameter.unsafeGetTensorImpl()]) {
          tensors[name] = keeps ? parameter.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)
                                : torch::Tensor();
        }
      }
    }
    if (!was_gathered) {
      sharded->reshard(unit);
    }
  }
  return tensors;
}

namespace {

/// The models' part of a checkpoint under "fsdp": the replicated component's files (whole models, written by
/// the main process), read with every unit gathered.
class FsdpModelCheckpoint final : public CheckpointComponent {
public:
  FsdpModelCheckpoint(FsdpEngine& engine, const std::vector<std::shared_ptr<PreparedModel>>& models)
      : engine_(engine), models_(models), inner_(replicated_model_checkpoint(models)) {}

  std::string name() const override { return inner_->name(); }

  void save(ComponentWriter& writer) override {
    if (engine_.context().config.fsdp_state_dict_type == "SHARDED_STATE_DICT") {
      // Each process writes its shards; nothing is gathered.
      save_model_pieces(writer, models_, [&](size_t i) {
        std::vector<ModelPiece> pieces;
        auto* model = dynamic_cast<FsdpModel*>(models_[i].get());
        if (model == nullptr || !engine_.writes_shares()) {
          // Replicated (NO_SHARD, nothing trainable): the main process writes it whole. Or another machine's
          // process holds the same shares (hybrid sharding) and writes them.
          return pieces;
        }
        const auto& sharded = *model->sharded();
        std::unordered_map<const c10::TensorImpl*, const Member*> members;
        for (const auto& member : sharded.members) {
          members.emplace(member.parameter.unsafeGetTensorImpl(), &member);
        }
        for (const auto& item : model->model().named_parameters(/*recurse=*/true)) {
          if (auto found = members.find(item.value().unsafeGetTensorImpl()); found != members.end()) {
            pieces.push_back(
                {item.key(), found->second->values, found->second->place.share_begin, found->second->sizes});
          }
        }
        return pieces;
      });
      return;
    }
    // FULL_STATE_DICT: the main process writes whole models, each gathered one unit at a time.
    save_whole_models(writer, models_.size(),
                      [&](size_t i) { return engine_.whole_tensors(models_[i]->model(), writer.main()); });
  }

  void verify(const ComponentReader& reader) override {
    auto restore = gather_all(); // the parameters' shapes are checked against the files
    try {
      inner_->verify(reader);
    } catch (...) {
      restore();
      throw;
    }
    restore();
  }

  void apply(Rollback& rollback) override {
    // What to restore if a later component fails: each unit's shards, and the resident units' whole values.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> previous;
    for (const auto& prepared : models_) {
      if (auto* model = dynamic_cast<FsdpModel*>(prepared.get())) {
        for (auto& unit : model->sharded()->units) {
          for (auto& group : unit.groups) {
            previous.emplace_back(group.shard, group.shard.clone());
            if (unit.resident) {
              previous.emplace_back(group.full, group.full.clone());
            }
          }
        }
      }
    }
    auto restore = gather_all();
    Rollback whole; // the replicated component's undo acts on gathered parameters: replaced by `previous`
    try {
      inner_->apply(whole);
    } catch (...) {
      restore();
      throw;
    }
    restore(); // writes the loaded values back into the shards
    rollback.add([previous]() mutable {
      torch::NoGradGuard no_grad;
      for (auto& [tensor, values] : previous) {
        tensor.copy_(values);
      }
    });
  }

private:
  std::function<void()> gather_all() {
    std::vector<std::function<void()>> restores;
    for (const auto& prepared : models_) {
      if (auto restore = engine_.gather_full_parameters(prepared->model())) {
        restores.push_back(std::move(restore));
      }
    }
    return [restores]() {
      for (auto it = restores.rbegin(); it != restores.rend(); ++it) {
        (*it)();
      }
    };
  }

  FsdpEngine& engine_;
  std::vector<std::shared_ptr<PreparedModel>> models_;
  std::unique_ptr<CheckpointComponent> inner_;
};

} // namespace

std::unique_ptr<CheckpointComponent>
FsdpEngine::model_checkpoint(const std::vector<std::shared_ptr<PreparedModel>>& models) {
  return std::make_unique<FsdpModelCheckpoint>(*this, models);
}

} // namespace accelerate::detail::fsdp_internal
