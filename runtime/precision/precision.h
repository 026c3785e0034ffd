// Mixed precision for one Accelerator: the autocast window, the fp16 grad scaler, fp8 support, and the hooks
// the prepared optimizer, scheduler and gradient clipping call (runtime-internal).
#pragma once

#include "settings/config.h"

#include <memory>
#include <optional>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace accelerate::detail {

struct OptimizerState;
struct SchedulerState;

/// torch.amp.GradScaler's settings, with its defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

/// Dynamic loss scaling with torch.amp.GradScaler's semantics, on the accelerator's device, without host
/// synchronisation: the scale and growth tracker are device tensors updated by `at::_amp_update_scale_`, and
/// inf/nan checks write a device `found_inf` flag that the fused optimizer kernels read.
///
/// ```
/// GradScaler scaler(GradScalerOptions(), device, process_group);
/// scaler.scale(loss).backward();
/// auto found_inf = scaler.check_and_unscale(grads, scaler.inverse_scale());
/// scaler.reduce_across_processes(found_inf); // every process skips together
/// scaler.update(found_inf);
/// ```
class GradScaler {
public:
  GradScaler(GradScalerOptions options, torch::Device device,
             c10::intrusive_ptr<c10d::ProcessGroup> process_group);

  /// `loss * scale`, the tensor to differentiate.
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// The current scale: a 0-dim float32 tensor on the device (no host read).
  const torch::Tensor& scale_tensor() const { return scale_; }
  /// 1 / scale computed in double as torch.amp.GradScaler does, as a 0-dim float32 device tensor.
  torch::Tensor inverse_scale() const;
  /// The current scale read to the host (synchronises with the device).
  double get_scale() const;
  /// Checks `gradients` for inf/nan and multiplies them by `inverse_scale` (pass ones to only check).
  /// Returns a fresh 0-dim float32 `found_inf` on the scaler's device: 1 if any gradient was non-finite.
  torch::Tensor check_and_unscale(const std::vector<torch::Tensor>& gradients,
                                  const torch::Tensor& inverse_scale) const;
  /// MAX-reduces `found_inf` over every process, so that all of them skip the same steps.
  void reduce_across_processes(torch::Tensor& found_inf) const;
  /// Backs the scale off after an overflow, or grows it after `growth_interval` clean steps.
  void update(const torch::Tensor& found_inf);

  const GradScalerOptions& options() const { return options_; }
  /// Reduces across the processes of `process_group` from now on (the Accelerator's group was replaced).
  void use_process_group(c10::intrusive_ptr<c10d::ProcessGroup> process_group) {
    process_group_ = std::move(process_group);
  }
  /// Starts over from `options` (scale = init_scale, tracker = 0).
  void reset(GradScalerOptions options);

  /// Saves torch.amp.GradScaler's state_dict keys: scale, growth_factor, backoff_factor, growth_interval,
  /// _growth_tracker.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

private:
  GradScalerOptions options_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  torch::Tensor scale_;          // 0-dim float32
  torch::Tensor growth_tracker_; // 0-dim int32
};

/// Owns the precision recipe ("no", "fp16", "bf16", "fp8") of one Accelerator. The C++ frontend has no module
/// hooks, so the runtime opens autocast when a step's forward begins (the `accumulate` guard, or the
/// `autocast()` guard) and closes it in `Accelerator::backward` (or when the guard that opened it ends).
class Precision : public std::enable_shared_from_this<Precision> {
public:
  Precision(const ResolvedConfig& config, const torch::Device& device,
            c10::intrusive_ptr<c10d::ProcessGroup> process_group);
  ~Precision();

  const std::string& recipe() const { return recipe_; }
  /// The dtype autocast computes in (half, bfloat16), or nullopt with recipe "no".
  std::optional<c10::ScalarType> autocast_dtype() const { return autocast_dtype_; }
  /// True when `accelerate::nn::Linear` runs its GEMMs in fp8 inside the autocast window.
  bool fp8_enabled() const { return fp8_enabled_; }
  /// The fp16 grad scaler; null for every other recipe.
  GradScaler* scaler() const { return scaler_.get(); }
  /// Agrees across the processes of `process_group` from now on (the Accelerator's group was replaced).
  void use_process_group(const c10::intrusive_ptr<c10d::ProcessGroup>& process_group) {
    process_group_ = process_group;
    if (scaler_) {
      scaler_->use_process_group(process_group);
    }
  }

  // ---- The autocast window ------------------------------------------------------------------------------
  /// A step's forward begins (the `accumulate` guard opens): autocast on, unless already open.
  void begin_forward();
  /// The `accumulate` guard ends: closes the window if the backward did not.
  void end_step();
  /// `accelerator.autocast()`: opens the window unless open; `close_guard` closes it only if this one opened
  /// it.
  void open_guard();
  void close_guard();
  /// Backward begins: autocast off (warns once when no window was open since the last backward). Returns the
  /// tensor to differentiate: the scaled loss under fp16, else `loss`.
  torch::Tensor before_backward(const torch::Tensor& loss);

  /// `accelerator.prepare(model)`: names the model's `accelerate::nn::Linear` layers (for fp8 messages) and,
  /// under fp8, warns once when the model has `torch::nn::Linear` layers, which stay in bf16.
  void prepare_model(torch::nn::Module& model);

  // ---- What the optimizer, scheduler and clipping call
  // ------------------------------------------------------
  /// Links a prepared optimizer (its step uses the scaler) or scheduler (it waits for the skip decision).
  void attach(const std::shared_ptr<OptimizerState>& optimizer);
  void attach(SchedulerState& scheduler);
  /// Before clipping: on a micro-step that synchronises, unscales every prepared optimizer's gradients in
  /// place (once per step, as `GradScaler.unscale_`) and returns nullopt; inside an accumulation window,
  /// where the gradients must stay scaled, returns the factor they still carry (clipping divides the norm by
  /// it).
  std::optional<torch::Tensor> prepare_gradients_for_clipping(bool sync_gradients);
  /// Reads the deferred skip decision of every prepared optimizer's last step (one host read each).
  void resolve_pending_steps();
  /// True when the last step of any prepared optimizer was skipped because of inf/nan gradients.
  bool last_step_overflowed();

  /// The grad scaler's state (nothing for recipes without one), for checkpoints.
  void save(torch::serialize::OutputArchive& archive);
  void load(torch::serialize::InputArchive& archive);

private:
  void open_window();
  void close_window();

  std::string recipe_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::optional<c10::ScalarType> autocast_dtype_;
  bool fp8_enabled_ = false;
  std::unique_ptr<GradScaler> scaler_;
  std::vector<std::weak_ptr<OptimizerState>> optimizers_;

  // The window: open or not, and the thread-local autocast state it replaced (restored on close).
  bool window_open_ = false;
  bool saved_enabled_ = false;
  c10::ScalarType saved_dtype_ = c10::ScalarType::Undefined;
  bool saved_fp8_ = false;
  /// One entry per live `autocast()` guard, innermost last: whether it opened the window.
  std::vector<bool> guards_;
  /// A window was opened since the last backward (else that backward warns, once).
  bool forward_seen_ = false;
  bool warned_no_window_ = false;
};

} // namespace accelerate::detail
