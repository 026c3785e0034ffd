// Activation checkpointing: a body that keeps only its inputs (in CPU memory when offloaded) and runs again
// in backward as its forward ran; `accelerate::checkpoint` and fully sharded training's units
// (fsdp_activation_checkpointing) alike (include/accelerate/activation_checkpoint.h).
#include "accelerator/activation_checkpoint.h"

#include <accelerate/activation_checkpoint.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <tuple>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/variable.h>

namespace accelerate::fsdp::detail {
namespace {

std::atomic<UnitHost*> host{nullptr};

} // namespace

UnitHost* active_host() {
  return host.load(std::memory_order_acquire);
}

} // namespace accelerate::fsdp::detail

namespace accelerate::detail {

thread_local bool recomputing = false;

fsdp::detail::UnitHost* install_unit_host(fsdp::detail::UnitHost* installed) {
  return fsdp::detail::host.exchange(installed);
}

void remove_unit_host(fsdp::detail::UnitHost* installed, fsdp::detail::UnitHost* previous) {
  fsdp::detail::host.compare_exchange_strong(installed, previous);
}

RecomputedUnits::RecomputedUnits() : previous_(install_unit_host(this)) {}

RecomputedUnits::~RecomputedUnits() {
  remove_unit_host(this, previous_);
}

void RecomputedUnits::add_model(torch::nn::Module& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& module : model.modules(/*include_self=*/false)) {
    modules_.insert(module.get());
  }
}

void* RecomputedUnits::enter(torch::nn::Module& module, const std::type_info& type) {
  // A class that inherits its forward (and the unit call in it) from its base is not a unit, as under fsdp.
  if (!fsdp::detail::is_unit_type(type)) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return modules_.count(&module) != 0 ? &module : nullptr;
}

/// The state a body ran under in forward that its second run in backward must see again: the random number
/// generators of the devices its tensors are on (dropout draws the same mask) and autocast.
struct ForwardState {
  std::vector<std::pair<at::Generator, torch::Tensor>> generators;
  std::vector<std::tuple<c10::DeviceType, bool, at::ScalarType>> autocast;

  static ForwardState capture(const std::vector<torch::Tensor>& tensors) {
    ForwardState state;
    std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
    for (const auto& tensor : tensors) {
      if (tensor.defined() && std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {
        devices.push_back(tensor.device());
      }
    }
    for (const auto& device : devices) {
      if (device.is_cpu() || device.is_cuda()) {
        auto generator = at::globalContext().defaultGenerator(device);
        std::lock_guard<std::mutex> lock(generator.mutex());
        state.generators.emplace_back(generator, generator.get_state());
      }
      if (state.autocast.end() ==
          std::find_if(state.autocast.begin(), state.autocast.end(),
                       [&](const auto& a) { return std::get<0>(a) == device.type(); })) {
        state.autocast.emplace_back(device.type(), at::autocast::is_autocast_enabled(device.type()),
                                    at::autocast::get_autocast_dtype(device.type()));
      }
    }
    return state;
  }

  /// Makes this state current; returns the one it replaced.
  ForwardState restore() const {
    ForwardState previous;
    for (const auto& [generator, saved] : generators) {
      auto current = generator;
      std::lock_guard<std::mutex> lock(current.mutex());
      previous.generators.emplace_back(current, current.get_state());
      current.set_state(saved);
    }
    for (const auto& [type, enabled, dtype] : autocast) {
      previous.autocast.emplace_back(type, at::autocast::is_autocast_enabled(type),
                                     at::autocast::get_autocast_dtype(type));
      at::autocast::set_autocast_enabled(type, enabled);
      at::autocast::set_autocast_dtype(type, dtype);
    }
    return previous;
  }
};

std::shared_ptr<ForwardState> capture_forward_state(const std::vector<torch::Tensor>& inputs) {
  return std::make_shared<ForwardState>(ForwardState::capture(inputs));
}

namespace {

/// The backward of a checkpointed body: runs it again with autograd on detached inputs and differentiates
/// what it computes (a backward inside the backward, as PyTorch's reentrant checkpoint does). Its next edges
/// are the inputs that require a gradient, then the module's trainable parameters (its units' included), and
/// it hands on the gradients of both: so the engine sums the gradients of a unit that ran twice before it
/// accumulates them once, as it does without checkpointing, and the loss reaches every parameter, where the
/// runtime looks for the parameters a backward trains. A placeholder leaf stands in when there are no
/// edges.
class CheckpointBackward final : public torch::autograd::Node {
public:
  /// An input as the unit keeps it (itself, or offloaded, a copy in CPU memory) and where it came from.
  struct Kept {
    torch::Tensor tensor;
    c10::Device device = c10::Device(c10::kCPU);
    bool requires_grad = false;
  };

  CheckpointBackward(const std::vector<torch::Tensor>& inputs, bool offload,
                     std::vector<torch::Tensor> parameters, bool placeholder, Recompute recompute,
                     ForwardState state)
      : parameters_(std::move(parameters)), placeholder_(placeholder), recompute_(std::move(recompute)),
        state_(std::move(state)) {
    kept_.reserve(inputs.size());
    for (const auto& input : inputs) {
      if (!input.defined()) { // an undefined tensor among the inputs: passed on as it is
        kept_.push_back(Kept{});
        continue;
      }
      Kept kept{input.detach(), input.device(), input.requires_grad()};
      if (offload) {
        // Pinned and not waited for from a GPU: the copy runs on the current stream, before anything later
        // on it can reuse the input's memory, and the copy back in backward is ordered after it.
        kept.tensor =
            torch::empty(
                input.sizes(),
                input.options().device(torch::kCPU).requires_grad(false).pinned_memory(input.is_cuda()))
                .copy_(input.detach(), /*non_blocking=*/true);
      }
      kept_.push_back(std::move(kept));
    }
  }

  std::string name() const override { return "accelerate::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override {
    std::vector<torch::Tensor> detached;
    detached.reserve(kept_.size());
    for (const auto& kept : kept_) {
      if (!kept.tensor.defined()) {
        detached.push_back(kept.tensor);
        continue;
      }
      // Back on its device (a copy when offloaded; the tensor itself otherwise), detached for the second run.
      detached.push_back(
          kept.tensor.to(kept.device, /*non_blocking=*/true).detach().requires_grad_(kept.requires_grad));
    }
    std::vector<torch::Tensor> outputs;
    {
      const ForwardState previous = state_.restore();
      struct Restore {
        const ForwardState& previous;
        bool was_recomputing;
        ~Restore() {
          previous.restore();
          recomputing = was_recomputing;
        }
      } restore{previous, recomputing};
      recomputing = true;
      torch::AutoGradMode grad(true);
      outputs = recompute_(detached);
    }
    std::vector<torch::Tensor> roots, seeds;
    for (size_t i = 0; i < outputs.size() && i < gradients.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && gradients[i].defined()) {
        roots.push_back(outputs[i]);
        seeds.push_back(gradients[i]);
      }
    }
    torch::autograd::variable_list wanted;
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].requires_grad) {
        wanted.push_back(detached[i]);
      }
    }
    wanted.insert(wanted.end(), parameters_.begin(), parameters_.end());
    torch::autograd::variable_list result(wanted.size());
    if (!roots.empty() && !wanted.empty()) {
      result = torch::autograd::grad(roots, wanted, seeds, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
    }
    if (placeholder_) {
      result.emplace_back();
    }
    kept_.clear(); // what the unit kept is freed with its backward
    parameters_.clear();
    recompute_ = nullptr;
    return result;
  }

private:
  std::vector<Kept> kept_;
  std::vector<torch::Tensor> parameters_;
  bool placeholder_;
  Recompute recompute_;
  ForwardState state_;
};

} // namespace

std::vector<torch::Tensor> checkpoint_outputs(const std::shared_ptr<ForwardState>& state,
                                              torch::nn::Module& module,
                                              const std::vector<torch::Tensor>& inputs,
                                              const std::vector<torch::Tensor>& outputs, Recompute recompute,
                                              bool offload) {
  torch::autograd::variable_list edges;
  for (const auto& input : inputs) {
    if (input.defined() && input.requires_grad()) {
      edges.push_back(input);
    }
  }
  std::vector<torch::Tensor> parameters;
  for (const auto& parameter : module.parameters()) {
    if (parameter.requires_grad()) {
      parameters.push_back(parameter);
      edges.push_back(parameter);
    }
  }
  const bool placeholder = edges.empty();
  if (placeholder) {
    edges.push_back(torch::empty({0}, torch::TensorOptions().requires_grad(true)));
  }
  auto node =
      std::shared_ptr<CheckpointBackward>(new CheckpointBackward(inputs, offload, std::move(parameters),
                                                                 placeholder, std::move(recompute), *state),
                                          torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(edges));
  std::vector<torch::Tensor> attached;
  attached.reserve(outputs.size());
  for (const auto& output : outputs) {
    if (!output.defined() || !(output.is_floating_point() || output.is_complex())) {
      attached.push_back(output); // no gradient flows through it
      continue;
    }
    auto out = output.detach();
    torch::autograd::create_gradient_edge(out, node);
    attached.push_back(std::move(out));
  }
  return attached;
}

} // namespace accelerate::detail
