// GraphedStep's runtime half: warm-up, capture of one whole training step in a CUDA graph, and replays that
// repeat the host side of the step (step counters) the graph cannot.
//
// A replay runs the device work of the captured step and nothing else. What the step changes on the host is
// measured across the capture (GradientState's counters, each optimizer's fused-step count and libtorch's
// per-parameter Adam step counts) and added again after every replay, so that checkpoints, schedulers and
// `Optimizer::fused_steps` see the same numbers as without the graph. The learning rate is the one value the
// host changes between steps (a scheduler): while capturing, the fused kernels read it from a device tensor
// (OptimizerState::graph_lrs) that each replay refreshes when the host value moved.
#include <accelerate/accelerator.h>
#include <accelerate/graphed_step.h>

#include "accelerator/optimizer_state.h"
#include "accelerator/state.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/autocast_mode.h>

#ifdef ACCEL_WITH_CUDA_GRAPH
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace accelerate::detail {
namespace {

/// Eager calls on the side stream before the capture: lazy initialisation (cuBLAS handles and workspaces,
/// the optimizer's state, the autograd engine's streams) must not happen inside it.
constexpr int kWarmupCalls = 3;

/// The host counters one step moves.
struct Counters {
  int64_t optimizer_steps = 0;
  int backwards_since_step = 0;
  std::vector<int64_t> fused_steps;                               // per prepared optimizer
  std::vector<std::vector<std::pair<void*, int64_t>>> adam_steps; // per prepared optimizer
  std::vector<int64_t> scheduler_steps;                           // per prepared scheduler
};

#ifdef ACCEL_WITH_CUDA_GRAPH
Counters read_counters(const AcceleratorState& state) {
  Counters counters;
  counters.optimizer_steps = state.gradient_state->optimizer_steps;
  counters.backwards_since_step = state.gradient_state->backwards_since_step;
  for (const auto& optimizer : state.optimizers) {
    counters.fused_steps.push_back(optimizer->fused_steps);
    counters.adam_steps.push_back(adam_step_counts(*optimizer));
  }
  for (const auto& scheduler : state.schedulers) {
    counters.scheduler_steps.push_back(scheduler->steps);
  }
  return counters;
}

/// `to - from` per parameter key, for the keys whose count differs (both sorted by key).
std::vector<std::pair<void*, int64_t>> count_deltas(const std::vector<std::pair<void*, int64_t>>& from,
                                                    const std::vector<std::pair<void*, int64_t>>& to) {
  std::vector<std::pair<void*, int64_t>> deltas;
  for (const auto& [key, count] : to) {
    auto it = std::lower_bound(from.begin(), from.end(), std::make_pair(key, INT64_MIN));
    const int64_t previous = it != from.end() && it->first == key ? it->second : 0;
    if (count != previous) {
      deltas.emplace_back(key, count - previous);
    }
  }
  return deltas;
}

/// Moves `state`'s counters by `to - from` (`backwards_since_step` becomes `to`'s): forward after a replay
/// (from before the capture to after it), back after a failed capture (from now to before it).
void move_counters(AcceleratorState& state, const Counters& from, const Counters& to) {
  auto& gradients = *state.gradient_state;
  gradients.optimizer_steps += to.optimizer_steps - from.optimizer_steps;
  gradients.backwards_since_step = to.backwards_since_step;
  for (size_t i = 0; i < state.optimizers.size() && i < from.fused_steps.size() && i < to.fused_steps.size();
       ++i) {
    auto& optimizer = *state.optimizers[i];
    optimizer.fused_steps += to.fused_steps[i] - from.fused_steps[i];
    if (to.fused_steps[i] > from.fused_steps[i]) {
      optimizer.last_step_skipped = false;
    }
    advance_adam_step_counts(optimizer, count_deltas(from.adam_steps[i], to.adam_steps[i]));
  }
}

/// A side stream that starts after the current stream's work so far; `join` makes the current stream wait
/// for what was queued on the side stream.
class SideStream {
public:
  explicit SideStream(c10::DeviceIndex index)
      : current_(c10::cuda::getCurrentCUDAStream(index)),
        side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)) {
    at::cuda::CUDAEvent ready;
    ready.record(current_);
    ready.block(side_);
  }
  c10::cuda::CUDAStream stream() const { return side_; }
  void join() const {
    at::cuda::CUDAEvent done;
    done.record(side_);
    done.block(current_);
  }

private:
  c10::cuda::CUDAStream current_;
  c10::cuda::CUDAStream side_;
};

/// What makes a captured graph stale: the parameters' storage and the optimizer state objects and step
/// tensors it reads. `load_state`, `Optimizer::load` or a new `prepare` change some of them.
std::vector<const void*> fingerprint(const AcceleratorState& state) {
  std::vector<const void*> marks;
  for (const auto& optimizer : state.optimizers) {
    marks.push_back(optimizer.get());
    for (const auto& group : optimizer->optimizer->param_groups()) {
      for (const auto& param : group.params()) {
        marks.push_back(param.unsafeGetTensorImpl());
        marks.push_back(param.data_ptr());
        auto slot = optimizer->optimizer->state().find(param.unsafeGetTensorImpl());
        marks.push_back(slot == optimizer->optimizer->state().end() ? nullptr : slot->second.get());
        auto step = optimizer->step_tensors.find(param.unsafeGetTensorImpl());
        marks.push_back(step == optimizer->step_tensors.end() ? nullptr
                                                              : step->second.first.unsafeGetTensorImpl());
      }
    }
  }
  for (const auto& model : state.models) {
    marks.push_back(model.get());
  }
  return marks;
}

#endif

/// Why `state` cannot be captured, or "" (checked whenever `cuda_graph` is on, on any device, so that a
/// configuration is refused alike on the CPU where it is developed and on the GPU where it runs).
std::string refusal(const AcceleratorState& state) {
  const auto& config = state.config;
  if (state.environment.world_size > 1) {
    return "it captures one process's step; with " + std::to_string(state.environment.world_size) +
           " processes the gradient all-reduce would have to be captured too, which the runtime does not do";
  }
  if (config.gradient_accumulation_steps > 1) {
    return "gradient_accumulation_steps is " + std::to_string(config.gradient_accumulation_steps) +
           ": micro-steps differ from each other (only the last one steps the optimizer), so one graph "
           "cannot replay them all";
  }
  if (config.mixed_precision == "fp16" || config.mixed_precision == "fp8") {
    return "mixed_precision " + config.mixed_precision +
           " keeps state on the host between steps (fp16: the grad scaler's skip decision; fp8: the scaling "
           "recipe); use bf16 or no";
  }
  if (config.debug) {
    return "debug mode compares the processes' replicas on the host during the step";
  }
  for (const auto& optimizer : state.optimizers) {
    if (!fused_step_possible(*optimizer)) {
      return "a prepared optimizer does not step through a fused kernel (Adam, AdamW and SGD do), so its "
             "step reads its counts on the host";
    }
  }
  return "";
}

} // namespace

struct StepGraph::Impl {
  AcceleratorState* state = nullptr;
  bool graphing = false;
  bool checked = false;
  int64_t replays = 0;
  int64_t eager_calls = 0;
  int64_t captures = 0;
  int warmups_left = kWarmupCalls;

  std::vector<at::Tensor> static_inputs;
  at::Tensor static_output;
  /// Each stepped parameter and the gradient tensor the graph writes (set back after eager calls reset it).
  std::vector<std::pair<at::Tensor, at::Tensor>> gradients;
  /// Per optimizer, per param group: the device learning rate the graph reads, and the value it holds.
  std::vector<std::vector<std::pair<at::Tensor, double>>> learning_rates;
  Counters before;
  Counters after;
  std::vector<const void*> marks;
#ifdef ACCEL_WITH_CUDA_GRAPH
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif

  void check() {
    if (checked) {
      return;
    }
    const std::string why = refusal(*state);
    if (!why.empty()) {
      throw std::invalid_argument("accelerate: cuda_graph(true) cannot capture this training step: " + why +
                                  ". Turn it off (AcceleratorOptions().cuda_graph(false)) to run the step as "
                                  "written");
    }
    checked = true;
  }

  bool matches(const std::vector<at::Tensor>& inputs) const {
    if (inputs.size() != static_inputs.size()) {
      return false;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined() || inputs[i].sizes() != static_inputs[i].sizes() ||
          inputs[i].scalar_type() != static_inputs[i].scalar_type()) {
        return false;
      }
    }
    return true;
  }

  void drop_graph() {
#ifdef ACCEL_WITH_CUDA_GRAPH
    graph.reset();
#endif
    static_inputs.clear();
    static_output = at::Tensor();
    gradients.clear();
    learning_rates.clear();
    marks.clear();
  }

#ifdef ACCEL_WITH_CUDA_GRAPH
  at::Tensor on_side_stream(const std::vector<at::Tensor>& inputs, const Body& body) {
    SideStream side(state->device.index());
    at::Tensor output;
    {
      c10::cuda::CUDAStreamGuard guard(side.stream());
      output = body(inputs);
    }
    side.join();
    return output;
  }

  at::Tensor capture(const std::vector<at::Tensor>& inputs, const Body& body) {
    drop_graph();
    checked = false; // objects prepared since the first call are checked too
    check();
    for (const auto& input : inputs) {
      static_inputs.push_back(input.detach().to(state->device, /*non_blocking=*/false, /*copy=*/true));
    }
    before = read_counters(*state);
    // The fused kernels read the learning rate from these while the graph is captured.
    for (const auto& optimizer : state->optimizers) {
      std::vector<std::pair<at::Tensor, double>> groups;
      optimizer->graph_lrs.clear();
      for (const auto& group : optimizer->optimizer->param_groups()) {
        const double lr = group.options().get_lr();
        groups.emplace_back(at::full({}, lr, at::TensorOptions(at::kFloat).device(state->device)), lr);
        optimizer->graph_lrs.push_back(groups.back().first);
      }
      learning_rates.push_back(std::move(groups));
    }
    auto restore = [&] {
      for (const auto& optimizer : state->optimizers) {
        optimizer->graph_lrs.clear();
      }
    };

    SideStream side(state->device.index());
    graph = std::make_unique<at::cuda::CUDAGraph>();
    // Autocast's cast cache would hand tensors from the graph's memory to eager code after the capture.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    at::Tensor output;
    try {
      c10::cuda::CUDAStreamGuard guard(side.stream());
      graph->capture_begin();
      try {
        output = body(static_inputs);
      } catch (...) {
        try {
          graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      graph->capture_end();
    } catch (const std::exception& error) {
      at::autocast::set_autocast_cache_enabled(cache);
      restore();
      undo_host_side_of_capture();
      drop_graph();
      throw std::runtime_error(
          std::string(
              "accelerate: cuda_graph(true): the training step could not be captured in a CUDA graph: ") +
          error.what() +
          "\nA captured step must not wait for the device: no .item(), no printing of tensors, no branching "
          "on tensor values, no tensors created from host data. Read such values outside the graphed step "
          "(from the tensor it returns), or turn cuda_graph off");
    }
    at::autocast::set_autocast_cache_enabled(cache);
    restore();
    side.join();

    after = read_counters(*state);
    if (after.scheduler_steps != before.scheduler_steps) {
      undo_host_side_of_capture();
      drop_graph();
      throw std::invalid_argument(
          "accelerate: cuda_graph(true): the graphed step calls scheduler.step(); a replay repeats only the "
          "device work, so the scheduler would step once, at capture. Call scheduler.step() after the "
          "graphed step instead (the learning rate it sets reaches every replay)");
    }
    if (!output.defined()) {
      drop_graph();
      throw std::invalid_argument(
          "accelerate: cuda_graph(true): the graphed step returned an undefined tensor; return the loss");
    }
    static_output = output;
    for (const auto& optimizer : state->optimizers) {
      for (const auto& group : optimizer->optimizer->param_groups()) {
        for (const auto& param : group.params()) {
          gradients.emplace_back(param, param.grad());
        }
      }
    }
    marks = fingerprint(*state);
    ++captures;
    // Capturing ran nothing on the device: this call's step is the first replay (its host side already ran).
    graph->replay();
    ++replays;
    return static_output;
  }

  /// A failed capture ran the step's host code but none of its device work: take the counters back, and drop
  /// the gradients it made (tensors the capture allocated but never computed).
  void undo_host_side_of_capture() {
    for (const auto& optimizer : state->optimizers) {
      for (auto& group : optimizer->optimizer->param_groups()) {
        for (auto& param : group.params()) {
          param.mutable_grad().reset();
        }
      }
    }
    move_counters(*state, read_counters(*state), before);
  }

  at::Tensor replay(const std::vector<at::Tensor>& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      static_inputs[i].copy_(inputs[i], /*non_blocking=*/true);
    }
    for (size_t i = 0; i < state->optimizers.size(); ++i) {
      const auto& groups = state->optimizers[i]->optimizer->param_groups();
      for (size_t g = 0; g < groups.size() && g < learning_rates[i].size(); ++g) {
        auto& [tensor, value] = learning_rates[i][g];
        const double lr = groups[g].options().get_lr();
        if (lr != value) {
          tensor.fill_(lr); // ordered before the replay on the same stream; no host synchronisation
          value = lr;
        }
      }
    }
    graph->replay();
    ++replays;
    move_counters(*state, before, after); // the host side of the replayed step
    for (auto& [param, gradient] : gradients) {
      if (gradient.defined() && !param.grad().is_same(gradient)) {
        param.mutable_grad() = gradient;
      }
    }
    return static_output;
  }
#endif
};

StepGraph::StepGraph(Accelerator& accelerator) : impl_(std::make_unique<Impl>()) {
  impl_->state = &internal_state(accelerator);
  impl_->state->graphed_step_made = true;
#ifdef ACCEL_WITH_CUDA_GRAPH
  impl_->graphing = impl_->state->config.cuda_graph && impl_->state->device.is_cuda();
#endif
}

StepGraph::~StepGraph() = default;

at::Tensor StepGraph::run(const std::vector<at::Tensor>& inputs, const Body& body) {
  auto& impl = *impl_;
  if (impl.state->config.cuda_graph) {
    impl.check();
  }
  if (!impl.graphing) {
    ++impl.eager_calls;
    return body(inputs);
  }
#ifdef ACCEL_WITH_CUDA_GRAPH
  for (const auto& input : inputs) {
    if (!input.defined()) {
      throw std::invalid_argument("accelerate: GraphedStep: an input tensor is undefined");
    }
  }
  if (impl.graph && !impl.matches(inputs)) {
    ++impl.eager_calls; // another shape (a short last batch): as written, outside the graph
    return body(inputs);
  }
  if (impl.graph && fingerprint(*impl.state) != impl.marks) {
    impl.drop_graph(); // the parameters or the optimizer state were replaced: warm up and capture again
    impl.warmups_left = 1;
  }
  if (impl.graph) {
    return impl.replay(inputs);
  }
  if (impl.warmups_left > 0) {
    --impl.warmups_left;
    ++impl.eager_calls;
    return impl.on_side_stream(inputs, body);
  }
  return impl.capture(inputs, body);
#else
  ++impl.eager_calls;
  return body(inputs);
#endif
}

bool StepGraph::graphing() const {
  return impl_->graphing;
}
bool StepGraph::captured() const {
#ifdef ACCEL_WITH_CUDA_GRAPH
  return impl_->graph != nullptr;
#else
  return false;
#endif
}
int64_t StepGraph::replays() const {
  return impl_->replays;
}
int64_t StepGraph::eager_calls() const {
  return impl_->eager_calls;
}
int64_t StepGraph::captures() const {
  return impl_->captures;
}

} // namespace accelerate::detail
