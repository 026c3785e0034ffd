// Mixed precision recipes: the autocast window, the fp16 grad scaler, recipe/device checks, and the
// Accelerator members autocast(), AutocastGuard and optimizer_step_was_skipped().
#include "precision/precision.h"

#include "accelerator/optimizer_state.h"
#include "accelerator/state.h"
#include "precision/fp8.h"

#include <accelerate/accelerator.h>
#include <accelerate/nn.h>

#include <ATen/autocast_mode.h>

#include <map>
#include <sstream>
#include <tuple>

namespace accelerate {
namespace detail {

// ---- GradScaler
// -----------------------------------------------------------------------------------------------

GradScaler::GradScaler(GradScalerOptions options, torch::Device device,
                       c10::intrusive_ptr<c10d::ProcessGroup> process_group)
    : device_(device), process_group_(std::move(process_group)) {
  reset(options);
}

void GradScaler::reset(GradScalerOptions options) {
  TORCH_CHECK(options.init_scale > 0, "accelerate: GradScaler init_scale must be > 0 (got ",
              options.init_scale, ")");
  TORCH_CHECK(options.growth_factor > 1, "accelerate: GradScaler growth_factor must be > 1 (got ",
              options.growth_factor, ")");
  TORCH_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
              "accelerate: GradScaler backoff_factor must be in (0, 1) (got ", options.backoff_factor, ")");
  TORCH_CHECK(options.growth_interval > 0, "accelerate: GradScaler growth_interval must be > 0 (got ",
              options.growth_interval, ")");
  options_ = options;
  scale_ = torch::full({}, options.init_scale, torch::TensorOptions(torch::kFloat32).device(device_));
  growth_tracker_ = torch::zeros({}, torch::TensorOptions(torch::kInt32).device(device_));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return loss * (loss.device() == device_ ? scale_ : scale_.to(loss.device(), /*non_blocking=*/true));
}

torch::Tensor GradScaler::inverse_scale() const {
  return scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
}

double GradScaler::get_scale() const {
  return scale_.item<double>();
}

torch::Tensor GradScaler::check_and_unscale(const std::vector<torch::Tensor>& gradients,
                                            const torch::Tensor& inverse_scale) const {
  torch::NoGradGuard no_grad;
  auto found_inf = torch::zeros({}, torch::TensorOptions(torch::kFloat32).device(device_));
  // The kernel wants one device and one dtype per call, as torch.amp.GradScaler groups them.
  std::map<std::tuple<int, int, int>, std::vector<torch::Tensor>> groups;
  for (const auto& gradient : gradients) {
    auto dense = gradient.is_sparse() ? gradient._values() : gradient;
    groups[{static_cast<int>(dense.device().type()), dense.device().index(),
            static_cast<int>(dense.scalar_type())}]
        .push_back(dense);
  }
  for (auto& [key, group] : groups) {
    const auto device = group.front().device();
    if (device == device_) {
      at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf, inverse_scale.to(device));
    } else {
      // The fused kernels skip only when found_inf is exactly 1: combine devices with max, not a sum.
      auto local = torch::zeros({}, torch::TensorOptions(torch::kFloat32).device(device));
      at::_amp_foreach_non_finite_check_and_unscale_(group, local, inverse_scale.to(device));
      found_inf = torch::maximum(found_inf, local.to(device_));
    }
  }
  return found_inf;
}

void GradScaler::reduce_across_processes(torch::Tensor& found_inf) const {
  if (!process_group_ || process_group_->getSize() <= 1) {
    return;
  }
  std::vector<torch::Tensor> message{found_inf.view({1})};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  process_group_->allreduce(message, options)->wait();
}

void GradScaler::update(const torch::Tensor& found_inf) {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf.to(device_), options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", scale_.to(torch::kCPU), /*is_buffer=*/true);
  archive.write("_growth_tracker", growth_tracker_.to(torch::kCPU), /*is_buffer=*/true);
  archive.write("growth_factor", c10::IValue(options_.growth_factor));
  archive.write("backoff_factor", c10::IValue(options_.backoff_factor));
  archive.write("growth_interval", c10::IValue(options_.growth_interval));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor scale, tracker;
  archive.read("scale", scale, /*is_buffer=*/true);
  archive.read("_growth_tracker", tracker, /*is_buffer=*/true);
  c10::IValue growth, backoff, interval;
  archive.read("growth_factor", growth);
  archive.read("backoff_factor", backoff);
  archive.read("growth_interval", interval);
  options_.growth_factor = growth.toDouble();
  options_.backoff_factor = backoff.toDouble();
  options_.growth_interval = interval.toInt();
  scale_.copy_(scale.reshape({}));
  growth_tracker_.copy_(tracker.reshape({}));
}

// ---- Precision
// ------------------------------------------------------------------------------------------------

namespace {

std::string describe(const torch::Device& device) {
  std::ostringstream out;
  out << device;
  if (device.is_cuda()) {
    if (auto capability = cuda_capability(device.index())) {
      out << " (compute capability " << capability->first << "." << capability->second << ")";
    }
  }
  return out.str();
}

} // namespace

Precision::Precision(const ResolvedConfig& config, const torch::Device& device,
                     c10::intrusive_ptr<c10d::ProcessGroup> process_group)
    : recipe_(config.mixed_precision), device_(device), process_group_(std::move(process_group)) {
  if (recipe_ == "fp16") {
    autocast_dtype_ = torch::kFloat16;
    scaler_ = std::make_unique<GradScaler>(GradScalerOptions(), device_, process_group_);
    if (device_.is_cpu()) {
      TORCH_WARN(
          "accelerate: mixed_precision='fp16' on the CPU: autocast computes in float16 with dynamic loss "
          "scaling, as on a GPU, but most CPUs have no fp16 matrix units and run it several times slower "
          "than float32. Use mixed_precision='no' (or 'bf16' on CPUs with AMX/AVX512-BF16) for CPU "
          "training.");
    }
  } else if (recipe_ == "bf16") {
    autocast_dtype_ = torch::kBFloat16;
    if (device_.is_cuda()) {
      auto capability = cuda_capability(device_.index());
      if (capability && capability->first < 8) {
        TORCH_WARN(
            "accelerate: mixed_precision='bf16' on ", describe(device_),
            ", which has no bf16 tensor cores (they start with compute capability 8.0): autocast still "
            "computes in bfloat16, emulated, usually slower than float32. Use mixed_precision='fp16' on "
            "this GPU.");
      }
    }
  } else if (recipe_ == "fp8") {
    // Everything but accelerate::nn::Linear's GEMMs runs under bf16 autocast, as in Accelerate's fp8 recipes.
    autocast_dtype_ = torch::kBFloat16;
    const auto reason = fp8_unsupported_reason(device_);
    fp8_enabled_ = reason.empty();
    if (!fp8_enabled_) {
      TORCH_WARN(
          "accelerate: mixed_precision='fp8' needs a CUDA GPU with compute capability 8.9 or newer (Ada, "
          "Hopper, Blackwell), but ",
          reason,
          ". Training runs in bf16 instead: autocast computes in bfloat16 and accelerate::nn::Linear layers "
          "use bf16 GEMMs. Set mixed_precision='bf16' to ask for that directly and silence this warning.");
    }
  }
}

Precision::~Precision() {
  close_window();
}

void Precision::open_window() {
  if (!autocast_dtype_ || window_open_) {
    return;
  }
  const auto type = device_.type();
  saved_enabled_ = at::autocast::is_autocast_enabled(type);
  saved_dtype_ = at::autocast::get_autocast_dtype(type);
  saved_fp8_ = fp8_autocast_enabled();
  at::autocast::set_autocast_enabled(type, true);
  at::autocast::set_autocast_dtype(type, *autocast_dtype_);
  at::autocast::increment_nesting();
  set_fp8_autocast_enabled(fp8_enabled_);
  window_open_ = true;
  forward_seen_ = true;
}

void Precision::close_window() {
  if (!window_open_) {
    return;
  }
  const auto type = device_.type();
  at::autocast::set_autocast_enabled(type, saved_enabled_);
  at::autocast::set_autocast_dtype(type, saved_dtype_);
  set_fp8_autocast_enabled(saved_fp8_);
  // Autocast caches the low-precision copies of weights while any autocast region is open.
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  window_open_ = false;
}

void Precision::begin_forward() {
  open_window();
}

void Precision::end_step() {
  close_window();
}

void Precision::open_guard() {
  const bool opens = autocast_dtype_.has_value() && !window_open_;
  open_window();
  guards_.push_back(opens);
}

void Precision::close_guard() {
  if (guards_.empty()) {
    return;
  }
  const bool opened = guards_.back();
  guards_.pop_back();
  if (opened) {
    close_window();
  }
}

torch::Tensor Precision::before_backward(const torch::Tensor& loss) {
  if (!autocast_dtype_) {
    return loss;
  }
  if (!forward_seen_ && !warned_no_window_) {
    warned_no_window_ = true;
    TORCH_WARN(
        "accelerate: mixed_precision='", recipe_,
        "', but this backward follows a forward that ran outside any autocast region (no `accumulate` or "
        "`autocast` guard was opened since the previous backward), so the forward computed in float32. "
        "Open `auto step = accelerator.accumulate(model);` at the top of the training step, or wrap the "
        "forward in `auto autocast = accelerator.autocast();`. (Warned once.)");
  }
  close_window();
  forward_seen_ = false;
  return scaler_ ? scaler_->scale(loss) : loss;
}

void Precision::prepare_model(torch::nn::Module& model) {
  int64_t plain_linears = 0;
  auto visit = [&](torch::nn::Module& module, const std::string& name) {
    if (auto* layer = dynamic_cast<nn::LinearImpl*>(&module)) {
      layer->qualified_name = name;
    } else if (dynamic_cast<torch::nn::LinearImpl*>(&module)) {
      ++plain_linears;
    }
  };
  // The model itself is visited apart: it may not live in a shared_ptr (a module on the stack), and
  // named_modules() with include_self would then throw.
  visit(model, model.name());
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    visit(*item.value(), item.key());
  }
  if (recipe_ == "fp8" && fp8_enabled_ && plain_linears > 0) {
    TORCH_WARN(
        "accelerate: mixed_precision='fp8', but the model has ", plain_linears,
        " torch::nn::Linear layer(s): only accelerate::nn::Linear runs fp8 GEMMs, these compute in bf16. "
        "Declare them as accelerate::nn::Linear (same options and parameter names), or let accel-rewrite "
        "swap the type.");
  }
}

void Precision::attach(const std::shared_ptr<OptimizerState>& optimizer) {
  optimizer->precision = shared_from_this();
  optimizers_.push_back(optimizer);
}

void Precision::attach(SchedulerState& scheduler) {
  scheduler.precision = shared_from_this();
}

std::optional<torch::Tensor> Precision::prepare_gradients_for_clipping(bool sync_gradients) {
  if (!scaler_) {
    return std::nullopt;
  }
  if (!sync_gradients) {
    return scaler_->scale_tensor();
  }
  auto inverse = scaler_->inverse_scale();
  for (auto& weak : optimizers_) {
    if (auto optimizer = weak.lock(); optimizer && !optimizer->unscaled_found_inf.defined()) {
      optimizer->unscaled_found_inf = scaler_->check_and_unscale(optimizer_gradients(*optimizer), inverse);
    }
  }
  return std::nullopt;
}

void Precision::resolve_pending_steps() {
  for (auto& weak : optimizers_) {
    if (auto optimizer = weak.lock()) {
      resolve_pending_step(*optimizer);
    }
  }
}

bool Precision::last_step_overflowed() {
  bool overflowed = false;
  for (auto& weak : optimizers_) {
    if (auto optimizer = weak.lock()) {
      resolve_pending_step(*optimizer);
      overflowed = overflowed || optimizer->last_step_overflowed;
    }
  }
  return overflowed;
}

void Precision::save(torch::serialize::OutputArchive& archive) {
  if (scaler_) {
    resolve_pending_steps();
    scaler_->save(archive);
  }
}

void Precision::load(torch::serialize::InputArchive& archive) {
  if (scaler_) {
    resolve_pending_steps();
    scaler_->load(archive);
  }
}

} // namespace detail

// ---- Accelerator members
// ----------------------------------------------------------------------------------------

Accelerator::AutocastGuard Accelerator::autocast() {
  state_->precision->open_guard();
  return AutocastGuard(this);
}

Accelerator::AutocastGuard::AutocastGuard(AutocastGuard&& other) noexcept
    : accelerator_(std::exchange(other.accelerator_, nullptr)) {}

Accelerator::AutocastGuard::~AutocastGuard() {
  if (accelerator_ != nullptr) {
    accelerator_->state_->precision->close_guard();
  }
}

bool Accelerator::optimizer_step_was_skipped() const {
  return state_->precision->last_step_overflowed();
}

} // namespace accelerate
