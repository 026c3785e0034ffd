// test/passes/Inputs/torch/torch.h: a small mirror of libtorch 2.11's declarations, for fast pass tests.
// Namespaces, class names and signatures match the real headers (ATen/core/TensorBase.h, TensorBody.h,
// ATen/TensorOperators.h, torch/csrc/api/include/torch/...) for everything declared here; bodies are omitted.
// Add a declaration only when a test needs it, copied from the real header.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
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
} // namespace c10

namespace at {
using c10::ArrayRef;
using c10::IntArrayRef;

class TensorBase {
public:
  TensorBase() = default;
  int64_t dim() const;
  bool defined() const;
};

class Tensor;
using TensorList = ArrayRef<Tensor>;

class Tensor : public TensorBase {
public:
  Tensor() = default;
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, std::optional<TensorList> inputs = std::nullopt) const;
  Tensor sum() const;
  Tensor mean() const;
  Tensor detach() const;
  Tensor& grad() const;
  Tensor add(const Tensor& other) const;
  Tensor mul(const Tensor& other) const;
};

Tensor operator+(const Tensor& self, const Tensor& other);
Tensor operator-(const Tensor& self, const Tensor& other);
Tensor operator*(const Tensor& self, const Tensor& other);
Tensor randn(IntArrayRef size);
Tensor ones_like(const Tensor& self);
Tensor mse_loss(const Tensor& self, const Tensor& target, int64_t reduction = 1);
} // namespace at

namespace torch {
using namespace at; // As torch/types.h does.

namespace autograd {
using Variable = at::Tensor;
} // namespace autograd

namespace nn {
class Module {
public:
  virtual ~Module() = default;
  std::vector<Tensor> parameters(bool recurse = true) const;
};

template <typename Contained> class ModuleHolder {
public:
  Contained* operator->();
  const Contained* operator->() const;
};

class LinearImpl : public Module {
public:
  LinearImpl(int64_t in_features, int64_t out_features);
  Tensor forward(const Tensor& input);
};

class Linear : public ModuleHolder<LinearImpl> { // TORCH_MODULE(Linear)
public:
  Linear(int64_t in_features, int64_t out_features);
};
} // namespace nn

namespace optim {
class Optimizer {
public:
  using LossClosure = std::function<Tensor()>;
  virtual ~Optimizer() = default;
  virtual Tensor step(LossClosure closure = nullptr) = 0;
  virtual void zero_grad(bool set_to_none = true);
};

struct SGDOptions {
  SGDOptions(double lr);
};

class SGD : public Optimizer {
public:
  explicit SGD(const std::vector<Tensor>& params, SGDOptions defaults);
  Tensor step(LossClosure closure = nullptr) override;
};
} // namespace optim
} // namespace torch
