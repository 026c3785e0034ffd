// test/passes/Inputs/torch/torch.h: a small mirror of libtorch 2.11's declarations, for fast pass tests.
// Namespaces, class names and signatures match the real headers (ATen/core/TensorBase.h, TensorBody.h,
// ATen/TensorOperators.h, c10/core/Device.h, torch/csrc/api/include/torch/...) for everything declared here;
// bodies are omitted. Add a declaration only when a test needs it, copied from the real header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace c10 {
template <typename T> class ArrayRef {
public:
  ArrayRef() = default;
  ArrayRef(const std::vector<T>& vec);
  ArrayRef(const std::initializer_list<T>& list);
  size_t size() const;
};
using IntArrayRef = ArrayRef<int64_t>;

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;
using DeviceIndex = int8_t;

struct Device final {
  /* implicit */ Device(DeviceType type, DeviceIndex index = -1);
  /* implicit */ Device(const std::string& device_string);
  DeviceType type() const noexcept;
  bool is_cuda() const noexcept;
  bool is_cpu() const noexcept;
};

enum class ScalarType : int8_t { Long = 4, Float = 6, Double = 7 };
constexpr ScalarType kLong = ScalarType::Long;
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kDouble = ScalarType::Double;

struct TensorOptions {
  TensorOptions() = default;
  /* implicit */ TensorOptions(Device device);
  template <typename... Args, typename = std::enable_if_t<std::is_constructible_v<Device, Args&&...>>>
  /* implicit */ TensorOptions(Args&&... args);
  /* implicit */ TensorOptions(ScalarType dtype);
  TensorOptions device(std::optional<Device> device) const noexcept;
  TensorOptions dtype(std::optional<ScalarType> dtype) const noexcept;
};
} // namespace c10

namespace at {
using c10::ArrayRef;
using c10::Device;
using c10::DeviceType;
using c10::IntArrayRef;
using c10::kCPU;
using c10::kCUDA;
using c10::kDouble;
using c10::kFloat;
using c10::kLong;
using c10::ScalarType;
using c10::TensorOptions;

class TensorBase {
public:
  TensorBase() = default;
  int64_t dim() const;
  int64_t size(int64_t dim) const;
  bool defined() const;
  template <typename T> T item() const;
};

class Tensor;
using TensorList = ArrayRef<Tensor>;

class Tensor : public TensorBase {
public:
  Tensor() = default;
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, std::optional<TensorList> inputs = std::nullopt) const;
  Tensor cpu() const;
  Tensor cuda() const;
  Tensor to(at::TensorOptions options = {}, bool non_blocking = false, bool copy = false) const;
  Tensor to(at::Device device, at::ScalarType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor to(at::ScalarType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor to(const at::Tensor& other, bool non_blocking = false, bool copy = false) const;
  Tensor sum() const;
  Tensor mean() const;
  Tensor detach() const;
  Tensor& grad() const;
  Tensor add(const Tensor& other) const;
  Tensor mul(const Tensor& other) const;
  Tensor view(IntArrayRef size) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor eq(const Tensor& other) const;
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
};

Tensor operator+(const Tensor& self, const Tensor& other);
Tensor operator-(const Tensor& self, const Tensor& other);
Tensor operator*(const Tensor& self, const Tensor& other);
Tensor operator/(const Tensor& self, double other);
bool operator<(const Tensor& self, double other);
std::ostream& operator<<(std::ostream& out, const Tensor& t); // ATen/core/Formatting.h
Tensor randn(IntArrayRef size, TensorOptions options = {});
Tensor zeros(IntArrayRef size, TensorOptions options = {});
Tensor ones_like(const Tensor& self);
Tensor relu(const Tensor& self);
Tensor stack(TensorList tensors, int64_t dim = 0);
Tensor mse_loss(const Tensor& self, const Tensor& target, int64_t reduction = 1);
Tensor nll_loss(const Tensor& self, const Tensor& target);
} // namespace at

namespace torch {
using namespace at; // As torch/types.h does.
using Dtype = at::ScalarType;

namespace autograd {
using Variable = at::Tensor;
using variable_list = std::vector<Variable>;                       // torch/csrc/autograd/function.h
void backward(const variable_list& tensors, const variable_list& grad_tensors = {}, // autograd.h
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const variable_list& inputs = {});
} // namespace autograd

struct NoGradGuard {
  NoGradGuard();
  ~NoGradGuard();
};

namespace cuda {
bool is_available();
size_t device_count();
} // namespace cuda

namespace serialize {
class OutputArchive {
public:
  void save_to(const std::string& filename);
};
class InputArchive;
} // namespace serialize

namespace nn {
template <typename Contained> class ModuleHolder;

class Module {
public:
  virtual ~Module() = default;
  std::vector<Tensor> parameters(bool recurse = true) const;
  virtual void train(bool on = true);
  void eval();
  virtual void zero_grad(bool set_to_none = true);
  virtual void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false);
  virtual void to(torch::Dtype dtype, bool non_blocking = false);
  virtual void to(torch::Device device, bool non_blocking = false);
  virtual void save(serialize::OutputArchive& archive) const;
  template <typename ModuleType>
  std::shared_ptr<ModuleType> register_module(std::string name, std::shared_ptr<ModuleType> module);
  template <typename ModuleType>
  std::shared_ptr<ModuleType> register_module(std::string name, ModuleHolder<ModuleType> module_holder);
};

template <typename Contained> class ModuleHolder {
public:
  using ContainedType = Contained;
  /* implicit */ ModuleHolder(std::nullptr_t);
  /* implicit */ ModuleHolder(std::shared_ptr<Contained> module);
  Contained* operator->();
  const Contained* operator->() const;
  Contained& operator*();
  const Contained& operator*() const;
  const std::shared_ptr<Contained>& ptr() const;
};

class LinearImpl : public Module {
public:
  LinearImpl(int64_t in_features, int64_t out_features);
  Tensor forward(const Tensor& input);
  Tensor weight;
  Tensor bias;
};

class Linear : public ModuleHolder<LinearImpl> { // TORCH_MODULE(Linear)
public:
  using ModuleHolder<LinearImpl>::ModuleHolder;
  Linear(int64_t in_features, int64_t out_features);
};

// torch/nn/modules/transformerlayer.h, reduced to the members a test needs (a composite module: it holds
// other modules).
class TransformerEncoderLayerImpl : public Module {
public:
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead);
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {});
  Linear linear1 = nullptr;
  Linear linear2 = nullptr;
};

class TransformerEncoderLayer : public ModuleHolder<TransformerEncoderLayerImpl> { // TORCH_MODULE
public:
  using ModuleHolder<TransformerEncoderLayerImpl>::ModuleHolder;
  TransformerEncoderLayer(int64_t d_model, int64_t nhead);
};

namespace functional {
Tensor cross_entropy(const Tensor& input, const Tensor& target);
} // namespace functional

namespace utils {
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);
} // namespace utils
} // namespace nn

namespace optim {
struct OptimizerOptions {
  double get_lr() const;
  void set_lr(const double lr);
};
class OptimizerParamGroup {
public:
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
};
class Optimizer {
public:
  using LossClosure = std::function<Tensor()>;
  virtual ~Optimizer() = default;
  virtual Tensor step(LossClosure closure = nullptr) = 0;
  virtual void zero_grad(bool set_to_none = true);
  std::vector<OptimizerParamGroup>& param_groups() noexcept;
  const std::vector<OptimizerParamGroup>& param_groups() const noexcept;
  OptimizerOptions& defaults() noexcept;
};

struct SGDOptions {
  SGDOptions(double lr);
  SGDOptions& momentum(const double& new_momentum);
};

class SGD : public Optimizer {
public:
  explicit SGD(const std::vector<Tensor>& params, SGDOptions defaults);
  Tensor step(LossClosure closure = nullptr) override;
};

struct AdamOptions {
  AdamOptions(double lr = 1e-3);
};

class Adam : public Optimizer {
public:
  explicit Adam(const std::vector<Tensor>& params, AdamOptions defaults = {});
  Tensor step(LossClosure closure = nullptr) override;
};

class LRScheduler {
public:
  LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();
};

class StepLR : public LRScheduler {
public:
  StepLR(torch::optim::Optimizer& optimizer, const unsigned step_size, const double gamma = 0.1);
};

class ReduceLROnPlateauScheduler { // torch/optim/schedulers/reduce_on_plateau_scheduler.h: no LRScheduler
public:
  enum SchedulerMode { min, max };
  ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode = min, float factor = 0.1, int patience = 10);
  void step(float metric);
};
} // namespace optim

namespace data {
template <typename Data = at::Tensor, typename Target = at::Tensor> struct Example {
  Example() = default;
  Example(Data data, Target target);
  Data data;
  Target target;
};

namespace samplers {
class Sampler {
public:
  virtual ~Sampler() = default;
};
class RandomSampler : public Sampler {
public:
  explicit RandomSampler(int64_t size);
};
class SequentialSampler : public Sampler {
public:
  explicit SequentialSampler(size_t size);
};
} // namespace samplers

namespace datasets {
template <typename SourceDataset, typename AppliedTransform> class MapDataset;

template <typename Self, typename SingleExample = Example<>> class Dataset {
public:
  using ExampleType = SingleExample;
  using BatchType = std::vector<SingleExample>;
  static constexpr bool is_stateful = false;
  virtual ~Dataset() = default;
  virtual ExampleType get(size_t index) = 0;
  virtual std::optional<size_t> size() const = 0;
  template <typename TransformType> MapDataset<Self, TransformType> map(TransformType transform) &&;
};

template <typename SourceDataset, typename AppliedTransform> class MapDataset {
public:
  using BatchType = typename AppliedTransform::OutputBatchType;
  static constexpr bool is_stateful = false;
  std::optional<size_t> size() const noexcept;
};
} // namespace datasets

namespace transforms {
template <typename T = Example<>> struct Stack {
  using OutputBatchType = T;
};
} // namespace transforms

struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(size_t batch_size);
  DataLoaderOptions& batch_size(size_t new_batch_size);
  DataLoaderOptions& workers(size_t new_workers);
  DataLoaderOptions& drop_last(bool new_drop_last);
};

template <typename Batch> class Iterator {
public:
  Batch& operator*();
  Batch* operator->();
  Iterator& operator++();
  bool operator!=(const Iterator& other) const;
};

template <typename Dataset, typename Sampler> class StatelessDataLoader {
public:
  using BatchType = typename Dataset::BatchType;
  Iterator<BatchType> begin();
  Iterator<BatchType> end();
};

template <typename Dataset, typename Sampler>
std::enable_if_t<!Dataset::is_stateful, std::unique_ptr<StatelessDataLoader<Dataset, Sampler>>>
make_data_loader(Dataset dataset, Sampler sampler, DataLoaderOptions options);

template <typename Sampler = samplers::RandomSampler, typename Dataset>
std::enable_if_t<!Dataset::is_stateful && std::is_constructible_v<Sampler, size_t>,
                 std::unique_ptr<StatelessDataLoader<Dataset, Sampler>>>
make_data_loader(Dataset dataset, DataLoaderOptions options = DataLoaderOptions());
} // namespace data

template <typename Value, typename... SaveToArgs> void save(const Value& value, SaveToArgs&&... args);
template <typename Value, typename... LoadFromArgs> void load(Value& value, LoadFromArgs&&... args);
} // namespace torch
