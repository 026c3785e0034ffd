// GraphedStep: one training step, captured once in a CUDA graph and replayed
// (AcceleratorOptions::cuda_graph).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace accelerate {

class Accelerator;

namespace detail {

/// The non-template half of `GraphedStep` (runtime/accelerator/step_graph.cpp).
class StepGraph {
public:
  using Body = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

  explicit StepGraph(Accelerator& accelerator);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  at::Tensor run(const std::vector<at::Tensor>& inputs, const Body& body);
  bool graphing() const;
  bool captured() const;
  int64_t replays() const;
  int64_t eager_calls() const;
  int64_t captures() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace detail

/// One training step — `zero_grad`, forward, loss, `accelerator.backward`, `optimizer.step` — as a callable
/// that takes the batch's tensors and returns a tensor (the loss). Made by `Accelerator::graphed_step`.
///
/// With `AcceleratorOptions().cuda_graph(true)` on a CUDA device, the first calls run the step eagerly on a
/// side stream (warm-up), the next one captures it in a CUDA graph, and every later call copies its inputs
/// into the captured ones and replays the graph: one launch for the whole step. What the graph replays is
/// the device work only, so:
/// - the returned tensor is the same one every replay overwrites (clone it to keep a value);
/// - host code inside the step runs once, at capture: read values (`loss.item()`), log and step the
///   scheduler outside it (a scheduler stepped between calls takes effect: the learning rate is read from
///   the device at every replay);
/// - a call whose inputs differ in shape or dtype from the captured ones (a short last batch) runs eagerly;
/// - the step is captured again after `load_state`, `Optimizer::load` or anything else that replaces the
///   parameters or the optimizer's state tensors.
/// Without a CUDA device, or with `cuda_graph` off, every call runs the step as written.
template <typename Fn> class GraphedStep {
public:
  template <typename... Inputs> at::Tensor operator()(const Inputs&... inputs) {
    static_assert(
        (std::is_convertible_v<const Inputs&, const at::Tensor&> && ...),
        "accelerate::GraphedStep: pass the step's inputs as tensors (e.g. step(batch.data, batch.target))");
    return graph_->run({at::Tensor(inputs)...}, [this](const std::vector<at::Tensor>& captured) {
      return call(captured, std::index_sequence_for<Inputs...>{});
    });
  }

  /// True once the step runs from a CUDA graph.
  bool captured() const { return graph_->captured(); }
  /// Calls served by replaying the graph (the one after capture included).
  int64_t replays() const { return graph_->replays(); }
  /// Calls that ran the step as written (warm-up, other shapes, no CUDA device or `cuda_graph` off).
  int64_t eager_calls() const { return graph_->eager_calls(); }
  /// How many times the step was captured (more than once after `load_state` and the like).
  int64_t captures() const { return graph_->captures(); }

private:
  friend class Accelerator;
  GraphedStep(Accelerator& accelerator, Fn fn)
      : fn_(std::move(fn)), graph_(std::make_shared<detail::StepGraph>(accelerator)) {}

  template <size_t... I> at::Tensor call(const std::vector<at::Tensor>& inputs, std::index_sequence<I...>) {
    using Result = decltype(fn_(inputs[I]...));
    static_assert(std::is_convertible_v<Result, at::Tensor>,
                  "accelerate::GraphedStep: the step must return a tensor (e.g. the loss)");
    return at::Tensor(fn_(inputs[I]...));
  }

  Fn fn_;
  std::shared_ptr<detail::StepGraph> graph_;
};

} // namespace accelerate
