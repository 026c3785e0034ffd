// test/passes/Inputs/accelerate/accelerate.h: a mirror of the runtime's public API, for fast checks of rewritten
// test files. Signatures match include/accelerate/*.h for what is declared here; templates are simplified
// where the real ones only add checks.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

namespace accelerate {

enum class ReduceOp { SUM, MEAN, MAX };

class Optimizer {
public:
  void step();
  void zero_grad(bool set_to_none = true);
  torch::optim::Optimizer& unwrap() const;
  std::vector<torch::optim::OptimizerParamGroup>& param_groups() const;
  operator torch::optim::Optimizer&() const { return unwrap(); }
  torch::optim::Optimizer& operator*() const { return unwrap(); }
  const Optimizer* operator->() const { return this; }
  Optimizer* operator->() { return this; }
};

class Scheduler {
public:
  void step();
  torch::optim::LRScheduler& unwrap() const;
  torch::optim::LRScheduler& operator*() const { return unwrap(); }
  Scheduler* operator->() { return this; }
  const Scheduler* operator->() const { return this; }
};

struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(size_t batch_size);
  /* implicit */ DataLoaderOptions(const torch::data::DataLoaderOptions& options);
  DataLoaderOptions& shuffle(bool new_shuffle);
  DataLoaderOptions& workers(size_t new_workers);
};

template <typename Dataset> class DataLoader {
public:
  using BatchType = typename Dataset::BatchType;
  torch::data::Iterator<BatchType> begin();
  torch::data::Iterator<BatchType> end();
  uint64_t epoch() const;
};

struct AcceleratorOptions {
  AcceleratorOptions& log_with(std::vector<std::string> value);
  AcceleratorOptions& project_dir(std::string value);
};

struct SaveModelOptions {
  SaveModelOptions& max_shard_size(std::string size);
  SaveModelOptions& max_shard_size(std::uint64_t bytes);
  SaveModelOptions& safe_serialization(bool safe);
};

class LogValue {
public:
  template <typename Number, std::enable_if_t<std::is_arithmetic_v<Number>, int> = 0> LogValue(Number number);
  LogValue(const at::Tensor& tensor);
  LogValue(std::string text);
  LogValue(const char* text);
};
using LogValues = std::vector<std::pair<std::string, LogValue>>;

class ProgressBar;

struct ProfileKwargs {};
class Profiler {
public:
  Profiler(Profiler&& other) noexcept;
  ~Profiler();
  void step();
  void stop();
};

class Accelerator {
public:
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions());
  Accelerator(const Accelerator&) = delete;
  static Accelerator& current();

  torch::Device device() const;
  int num_processes() const;
  int process_index() const;
  int local_process_index() const;
  bool is_main_process() const;
  bool is_local_main_process() const;

  template <typename Model> Model& prepare(Model& model);
  template <typename Opt, std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, std::decay_t<Opt>>, int> = 0>
  Optimizer prepare(Opt&& optimizer);
  template <typename Sched,
            std::enable_if_t<std::is_base_of_v<torch::optim::LRScheduler, std::decay_t<Sched>>, int> = 0>
  Scheduler prepare(Sched&& scheduler);

  void prepare_model(torch::nn::Module& model);

  template <typename Dataset>
  std::unique_ptr<DataLoader<Dataset>> prepare_data_loader(Dataset dataset, DataLoaderOptions options = {});

  void backward(const torch::Tensor& loss, const torch::Tensor& gradient = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                std::optional<at::TensorList> inputs = std::nullopt);

  class AccumulateGuard {
  public:
    AccumulateGuard(AccumulateGuard&& other) noexcept;
    ~AccumulateGuard();
  };
  template <typename... Models> [[nodiscard]] AccumulateGuard accumulate(Models&... models);

  torch::Tensor clip_grad_norm_(const std::vector<torch::Tensor>& parameters, double max_norm,
                                double norm_type = 2.0);
  void clip_grad_value_(const std::vector<torch::Tensor>& parameters, double clip_value);

  std::string save_state(const std::string& directory = "");
  template <typename Integer> void register_counter(const std::string& name, Integer& counter);
  void register_counter(const std::string& name, ProgressBar& bar);
  void load_state(const std::string& directory = "");
  void save_model(const torch::nn::Module& model, const std::string& directory,
                  const SaveModelOptions& options = SaveModelOptions());

  torch::Tensor gather(const torch::Tensor& tensor);
  torch::Tensor gather_for_metrics(const torch::Tensor& tensor);
  torch::Tensor reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::SUM);
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>> T reduce(T value, ReduceOp op = ReduceOp::SUM);
  torch::Tensor broadcast(const torch::Tensor& tensor, int from_process = 0);
  void wait_for_everyone();
  [[nodiscard]] Profiler profile(const ProfileKwargs& kwargs = ProfileKwargs());

  class MainProcessFirstGuard {
  public:
    MainProcessFirstGuard(MainProcessFirstGuard&& other) noexcept;
    ~MainProcessFirstGuard() noexcept(false);
  };
  [[nodiscard]] MainProcessFirstGuard main_process_first();

  template <typename... Args> void print(const Args&... args) {
    if (is_main_process())
      (std::cout << ... << args) << std::endl;
  }
  std::ostream& main_process_stream(std::ostream& stream);

  void init_trackers(const std::string& project_name, const LogValues& config = {});
  void log(const LogValues& values, std::optional<int64_t> step = std::nullopt);
  void end_training();
};

namespace fsdp {
namespace detail {
template <typename All, size_t... I> decltype(auto) call_last(All all, std::index_sequence<I...>) {
  return std::get<sizeof...(I)>(all)(std::get<I>(all)...);
}
} // namespace detail
template <typename Module, typename... InputsAndBody> decltype(auto) unit(Module& module, InputsAndBody&&... rest) {
  return detail::call_last(std::forward_as_tuple(std::forward<InputsAndBody>(rest)...),
                           std::make_index_sequence<sizeof...(InputsAndBody) - 1>{});
}
} // namespace fsdp

class ProgressBar {
public:
  explicit ProgressBar(int64_t total = 0, std::string description = "");
  void update(int64_t steps = 1);
  void set_count(int64_t count);
  void close();
  int64_t count() const;
  bool shown() const;
};
template <typename Range> class ProgressRange {
public:
  ProgressRange(Range& range, std::string description);
  decltype(std::declval<Range&>().begin()) begin();
  decltype(std::declval<Range&>().end()) end();
  ProgressBar& bar();
};
template <typename Range> ProgressRange<Range> progress_bar(Range& range, std::string description = "");

bool is_restart();
bool checkpoint_exists(const std::string& directory);
bool restarted_with_checkpoint(const std::string& directory);

namespace nn {
class LinearImpl : public torch::nn::Module {
public:
  LinearImpl(int64_t in_features, int64_t out_features);
  torch::Tensor forward(const torch::Tensor& input);
  torch::Tensor weight;
  torch::Tensor bias;
};
class Linear : public torch::nn::ModuleHolder<LinearImpl> { // TORCH_MODULE(Linear)
public:
  using torch::nn::ModuleHolder<LinearImpl>::ModuleHolder;
  Linear(int64_t in_features, int64_t out_features);
};
} // namespace nn
} // namespace accelerate
