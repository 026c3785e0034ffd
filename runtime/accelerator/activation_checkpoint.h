// What the runtime's other parts know of activation checkpointing (runtime-internal; the public side is
// include/accelerate/activation_checkpoint.h and the unit call of include/accelerate/fsdp.h, the
// implementation activation_checkpoint.cpp).
#pragma once

#include <accelerate/fsdp.h>

#include <mutex>
#include <unordered_set>

namespace accelerate::detail {

/// True while a checkpointed body runs again in backward: fully sharded training's units it calls do not
/// count as a forward (their order, which prefetch follows, is the forward's).
extern thread_local bool recomputing;

/// Makes `host` the one `fsdp::unit` calls reach (fsdp::detail::active_host); returns the one it replaces.
fsdp::detail::UnitHost* install_unit_host(fsdp::detail::UnitHost* host);
/// Puts `previous` back if `host` is still the one installed.
void remove_unit_host(fsdp::detail::UnitHost* host, fsdp::detail::UnitHost* previous);

/// activation_checkpointing under a strategy that leaves `fsdp::unit` a plain call (every strategy but
/// fsdp's sharding, and one process): each module of a prepared model whose own forward calls
/// `fsdp::unit(*this, inputs..., body)`, the model itself excepted, keeps only its inputs and runs its body
/// again in backward. Installed as the unit host while it lives (one Accelerator's life).
class RecomputedUnits final : public fsdp::detail::UnitHost {
public:
  RecomputedUnits();
  ~RecomputedUnits() override;
  RecomputedUnits(const RecomputedUnits&) = delete;
  RecomputedUnits& operator=(const RecomputedUnits&) = delete;

  /// Takes the modules of prepared model `model`.
  void add_model(torch::nn::Module& model);

  void* enter(torch::nn::Module& module, const std::type_info& type) override;
  void leave(void*, const std::vector<torch::Tensor>&) override {}
  void abandon(void*) noexcept override {}
  bool recomputes(void*) const override { return true; }

private:
  std::mutex mutex_;
  std::unordered_set<const torch::nn::Module*> modules_; ///< prepared models' submodules (not the models)
  fsdp::detail::UnitHost* previous_ = nullptr;
};

} // namespace accelerate::detail
