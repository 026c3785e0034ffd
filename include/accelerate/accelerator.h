// Accelerator: the one object a training program talks to, as in Hugging Face Accelerate.
#pragma once

#include <accelerate/options.h>

#include <memory>
#include <optional>
#include <type_traits>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

namespace accelerate {

namespace detail {
struct AcceleratorState;

template <typename T, typename = void>
struct is_module_holder : std::false_type {};
template <typename T>
struct is_module_holder<T, std::void_t<typename T::ContainedType>>
    : std::is_base_of<torch::nn::ModuleHolder<typename T::ContainedType>, T> {};

template <typename T>
struct is_module_pointer : std::false_type {};
template <typename M>
struct is_module_pointer<std::shared_ptr<M>> : std::is_base_of<torch::nn::Module, M> {};

template <typename T>
struct is_optimizer_pointer : std::false_type {};
template <typename O>
struct is_optimizer_pointer<std::shared_ptr<O>> : std::is_base_of<torch::optim::Optimizer, O> {};
template <typename O>
struct is_optimizer_pointer<std::unique_ptr<O>> : std::is_base_of<torch::optim::Optimizer, O> {};

template <typename>
inline constexpr bool unsupported_type = false;
} // namespace detail

/// How the job is distributed, with Hugging Face Accelerate's names.
enum class DistributedType { NO, MULTI_CPU, MULTI_GPU };

/// The entry point of the runtime. Construct one per process, at the start of training: it reads the
/// launcher's environment (torchrun, `accel launch`, Hugging Face's `accelerate launch`, mpirun, srun), picks
/// the device, and forms the process group when there is more than one process.
///
/// ```
/// accelerate::Accelerator accelerator;
/// auto model = Net();
/// torch::optim::SGD optimizer(model->parameters(), 0.1);
/// accelerator.prepare(model, optimizer);
/// for (...) {
///   optimizer.zero_grad();
///   auto loss = torch::mse_loss(model->forward(x.to(accelerator.device())), y.to(accelerator.device()));
///   accelerator.backward(loss);
///   optimizer.step();
/// }
/// ```
class Accelerator {
public:
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions());
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  /// The process's accelerator, for code that was not handed one. Throws if none is alive.
  static Accelerator& current();

  /// The device this process trains on: `cuda:<local rank>` when CUDA is available, else the CPU.
  torch::Device device() const;
  int num_processes() const;
  int process_index() const;
  int local_process_index() const;
  bool is_main_process() const;
  bool is_local_main_process() const;
  DistributedType distributed_type() const;

  /// Prepares each object for distributed training. Models (module holders, `shared_ptr`s or modules) are
  /// moved to `device()` and their parameters and buffers broadcast from the main process; optimizers are
  /// registered so their gradients are synchronised by `backward`.
  template <typename... Objects>
  void prepare(Objects&... objects) {
    (prepare_one(objects), ...);
  }
  void prepare_model(torch::nn::Module& model);
  void prepare_optimizer(torch::optim::Optimizer& optimizer);

  /// Runs `loss.backward(gradient, retain_graph, create_graph)`, then averages the gradients of the prepared
  /// models across processes. Takes the arguments of `torch::Tensor::backward`.
  void backward(const torch::Tensor& loss, const torch::Tensor& gradient = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

  /// Blocks until every process reaches this call.
  void wait_for_everyone();

private:
  template <typename T>
  void prepare_one(T& object) {
    if constexpr (std::is_base_of_v<torch::nn::Module, T>) {
      prepare_model(object);
    } else if constexpr (detail::is_module_holder<T>::value || detail::is_module_pointer<T>::value) {
      prepare_model(*object);
    } else if constexpr (std::is_base_of_v<torch::optim::Optimizer, T>) {
      prepare_optimizer(object);
    } else if constexpr (detail::is_optimizer_pointer<T>::value) {
      prepare_optimizer(*object);
    } else {
      static_assert(detail::unsupported_type<T>,
                    "accelerate::Accelerator::prepare: unsupported object; pass a torch::nn::Module (module "
                    "holder, shared_ptr or object) or a torch::optim::Optimizer");
    }
  }

  std::unique_ptr<detail::AcceleratorState> state_;
};

} // namespace accelerate
