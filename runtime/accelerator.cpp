// The Accelerator: environment, device, process group, prepare and the synchronised backward.
#include <accelerate/accelerator.h>

#include "process_group.h"
#include "state.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace accelerate {
namespace {

std::atomic<Accelerator*> current_accelerator{nullptr};

constexpr std::chrono::minutes kDefaultInitTimeout{10};

/// Flattens `tensors` into one buffer, runs `collective` on it, and copies the result back: one message per
/// step instead of one per tensor.
template <typename Collective>
void run_coalesced(const std::vector<torch::Tensor>& tensors, Collective&& collective) {
  if (tensors.empty()) {
    return;
  }
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    flat.push_back(tensor.detach().reshape({-1}));
  }
  auto buffer = torch::cat(flat);
  collective(buffer);
  int64_t offset = 0;
  for (const auto& tensor : tensors) {
    auto count = tensor.numel();
    tensor.detach().copy_(buffer.slice(0, offset, offset + count).view_as(tensor));
    offset += count;
  }
}

} // namespace

Accelerator::Accelerator(AcceleratorOptions options) : state_(std::make_unique<detail::AcceleratorState>()) {
  auto& state = *state_;
  state.options = options;
  state.environment = detail::discover_launch_environment();
  const bool use_cpu = options.cpu_.value_or(false) || !torch::cuda::is_available();
  state.device = use_cpu ? torch::Device(torch::kCPU)
                         : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(state.environment.local_rank));
  if (state.environment.world_size > 1) {
    auto timeout = options.init_timeout_.value_or(kDefaultInitTimeout);
    state.process_group = detail::create_process_group(state.environment, timeout);
  }
  current_accelerator.store(this);
}

Accelerator::~Accelerator() {
  Accelerator* self = this;
  current_accelerator.compare_exchange_strong(self, nullptr);
  if (state_->process_group) {
    state_->process_group->shutdown();
  }
}

Accelerator& Accelerator::current() {
  Accelerator* accelerator = current_accelerator.load();
  if (accelerator == nullptr) {
    throw std::logic_error(
        "accelerate::Accelerator::current(): no Accelerator exists in this process; construct one first");
  }
  return *accelerator;
}

torch::Device Accelerator::device() const { return state_->device; }
int Accelerator::num_processes() const { return state_->environment.world_size; }
int Accelerator::process_index() const { return state_->environment.rank; }
int Accelerator::local_process_index() const { return state_->environment.local_rank; }
bool Accelerator::is_main_process() const { return process_index() == 0; }
bool Accelerator::is_local_main_process() const { return local_process_index() == 0; }

DistributedType Accelerator::distributed_type() const {
  if (num_processes() == 1) {
    return DistributedType::NO;
  }
  return state_->device.is_cuda() ? DistributedType::MULTI_GPU : DistributedType::MULTI_CPU;
}

void Accelerator::prepare_model(torch::nn::Module& model) {
  auto& models = state_->models;
  if (std::find(models.begin(), models.end(), &model) != models.end()) {
    throw std::invalid_argument("accelerate::Accelerator::prepare: model '" + model.name() +
                                "' was already prepared; prepare each model once");
  }
  model.to(state_->device);
  if (state_->process_group) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> tensors;
    for (const auto& parameter : model.parameters()) {
      tensors.push_back(parameter);
    }
    for (const auto& buffer : model.buffers()) {
      tensors.push_back(buffer);
    }
    run_coalesced(tensors, [&](torch::Tensor& flat) {
      std::vector<torch::Tensor> list{flat};
      state_->process_group->broadcast(list, c10d::BroadcastOptions{0})->wait();
    });
  }
  models.push_back(&model);
}

void Accelerator::prepare_optimizer(torch::optim::Optimizer& optimizer) {
  auto& optimizers = state_->optimizers;
  if (std::find(optimizers.begin(), optimizers.end(), &optimizer) != optimizers.end()) {
    throw std::invalid_argument("accelerate::Accelerator::prepare: this optimizer was already prepared");
  }
  optimizers.push_back(&optimizer);
}

void Accelerator::backward(const torch::Tensor& loss, const torch::Tensor& gradient,
                           std::optional<bool> retain_graph, bool create_graph) {
  loss.backward(gradient, retain_graph, create_graph);
  if (!state_->process_group) {
    return;
  }
  std::vector<torch::Tensor> gradients;
  for (auto* model : state_->models) {
    for (const auto& parameter : model->parameters()) {
      if (parameter.requires_grad() && parameter.grad().defined()) {
        gradients.push_back(parameter.grad());
      }
    }
  }
  const double world_size = num_processes();
  run_coalesced(gradients, [&](torch::Tensor& flat) {
    std::vector<torch::Tensor> list{flat};
    state_->process_group->allreduce(list, c10d::AllreduceOptions{})->wait();
    flat.div_(world_size); // Gloo has no AVG: sum, then divide.
  });
}

void Accelerator::wait_for_everyone() {
  if (state_->process_group) {
    state_->process_group->barrier()->wait();
  }
}

} // namespace accelerate
