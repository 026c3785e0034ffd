// ACCELERATE_DEBUG_MODE: the replica checksum (debug_mode.h). Debug mode's check of every collective is
// transport/collective_checks.cpp.
#include "accelerator/debug_mode.h"

#include "accelerator/optimizer_state.h"
#include "accelerator/state.h"
#include "common/durable_file.h"
#include "parallel/engine.h"
#include "transport/collective_checks.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace accelerate::detail {
namespace {

// ---- The replica checksum --------------------------------------------------------------------------------

struct Checksums {
  std::vector<std::string> labels;
  std::vector<int64_t> hashes;
  void add(const std::string& label, const torch::Tensor& tensor) {
    if (!tensor.defined()) {
      return;
    }
    const auto bytes = tensor.detach().to(torch::kCPU).contiguous();
    labels.push_back(label);
    hashes.push_back(static_cast<int64_t>(
        content_hash(std::string_view(static_cast<const char*>(bytes.data_ptr()),
                                      static_cast<size_t>(bytes.numel()) * bytes.element_size()))));
  }
  void add(const std::string& label, int64_t value) { add(label, torch::tensor(value)); }
};

template <typename ParamState>
bool add_adam_like(const torch::optim::OptimizerParamState& state, const std::string& label, Checksums& out) {
  auto* adam = dynamic_cast<const ParamState*>(&state);
  if (adam == nullptr) {
    return false;
  }
  out.add(label + " step", adam->step());
  out.add(label + " exp_avg", adam->exp_avg());
  out.add(label + " exp_avg_sq", adam->exp_avg_sq());
  out.add(label + " max_exp_avg_sq", adam->max_exp_avg_sq());
  return true;
}

/// The state tensors of one parameter's optimizer state, for the optimizers libtorch ships.
void add_optimizer_state(const torch::optim::OptimizerParamState& state, const std::string& label,
                         Checksums& out) {
  if (add_adam_like<torch::optim::AdamParamState>(state, label, out) ||
      add_adam_like<torch::optim::AdamWParamState>(state, label, out)) {
    return;
  }
  if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    out.add(label + " momentum_buffer", sgd->momentum_buffer());
  } else if (auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    out.add(label + " step", adagrad->step());
    out.add(label + " sum", adagrad->sum());
  } else if (auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    out.add(label + " step", rmsprop->step());
    out.add(label + " square_avg", rmsprop->square_avg());
    out.add(label + " momentum_buffer", rmsprop->momentum_buffer());
    out.add(label + " grad_avg", rmsprop->grad_avg());
  }
  // Other optimizers' state is not compared: their parameters, which it drives, are.
}

Checksums local_checksums(AcceleratorState& state) {
  Checksums sums;
  std::unordered_map<const void*, std::string> names;
  const auto expected = state.engine->replica_expectation();
  for (size_t m = 0; m < state.models.size(); ++m) {
    const std::string prefix = state.models.size() == 1 ? "" : "model " + std::to_string(m) + " ";
    auto& model = state.models[m]->model();
    for (const auto& item : model.named_parameters(true)) {
      names[item.value().unsafeGetTensorImpl()] = prefix + item.key();
      if (expected.parameters) {
        sums.add(prefix + item.key(), item.value());
      }
    }
    // Buffers are not compared: between synchronised backwards they follow each process's own batches
    // (BatchNorm's running statistics), and every synchronised backward replaces them with the main process's
    // (as DDP's broadcast_buffers does at each forward), so a difference here is expected and never lasts.
  }
  for (size_t o = 0; o < state.optimizers.size(); ++o) {
    auto& optimizer = *state.optimizers[o]->optimizer;
    size_t index = 0;
    // Learning rates first: a scheduler or a set_lr that ran on one process shows here before it moves any
    // parameter, and names its group.
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
      sums.add("optimizer " + std::to_string(o) + " param group " + std::to_string(g) + " learning rate",
               torch::tensor(optimizer.param_groups()[g].options().get_lr(), torch::kFloat64));
    }
    if (!expected.optimizer_state) {
      // Each process holds a share of the optimizer state (the strategy says so): nothing to compare.
      continue;
    }
    for (auto& group : optimizer.param_groups()) {
      for (auto& param : group.params()) {
        const auto found = optimizer.state().find(param.unsafeGetTensorImpl());
        if (found != optimizer.state().end() && found->second) {
          const auto name = names.find(param.unsafeGetTensorImpl());
          const std::string what = name != names.end() ? name->second : "parameter " + std::to_string(index);
          add_optimizer_state(*found->second, "optimizer " + std::to_string(o) + " state of " + what, sums);
        }
        ++index;
      }
    }
  }
  return sums;
}

std::vector<at::Tensor> all_gather(c10d::ProcessGroup& group, const at::Tensor& mine) {
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int rank = 0; rank < group.getSize(); ++rank) {
    outputs[0].push_back(torch::empty_like(mine));
  }
  std::vector<at::Tensor> inputs{mine};
  group.allgather(outputs, inputs)->wait();
  return outputs[0];
}

int64_t checksum_interval() {
  const char* text = std::getenv("ACCELERATE_DEBUG_CHECKSUM_EVERY");
  if (text == nullptr || *text == '\0') {
    return 100;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < 0) {
    throw std::invalid_argument(std::string("accelerate: ACCELERATE_DEBUG_CHECKSUM_EVERY must be a number of "
                                            "optimizer steps >= 0 (0 turns the check off); got '") +
                                text + "'");
  }
  return value;
}

} // namespace

void check_replicas_agree(AcceleratorState& state, const std::string& when) {
  if (!state.process_group) {
    return;
  }
  auto& group = *state.process_group;
  const auto sums = local_checksums(state);
  const auto counts = all_gather(group, torch::tensor({static_cast<int64_t>(sums.hashes.size())}));
  for (int rank = 0; rank < group.getSize(); ++rank) {
    const auto count = counts[static_cast<size_t>(rank)].item<int64_t>();
    if (count != static_cast<int64_t>(sums.hashes.size())) {
      throw std::runtime_error(
          "accelerate debug mode: " + when + ", process " + std::to_string(rank) + " holds " +
          std::to_string(count) + " parameter and optimizer-state tensors and process " +
          std::to_string(group.getRank()) + " holds " + std::to_string(sums.hashes.size()) +
          ": the processes prepared different models or optimizers");
    }
  }
  const auto gathered = all_gather(group, torch::tensor(sums.hashes, torch::kInt64));
  const size_t world = gathered.size();
  std::vector<std::vector<std::string>> differing(
      world); // per rank: the tensors that differ from the reference
  for (size_t i = 0; i < sums.hashes.size(); ++i) {
    std::map<int64_t, size_t> votes;
    for (const auto& hashes : gathered) {
      ++votes[hashes[static_cast<int64_t>(i)].item<int64_t>()];
    }
    int64_t reference = gathered[0][static_cast<int64_t>(i)].item<int64_t>();
    for (const auto& [hash, count] : votes) {
      if (2 * count > world) {
        reference = hash; // a strict majority; otherwise process 0's copy is the reference
      }
    }
    for (size_t rank = 0; rank < world; ++rank) {
      if (gathered[rank][static_cast<int64_t>(i)].item<int64_t>() != reference) {
        differing[rank].push_back(sums.labels[i]);
      }
    }
  }
  const auto first =
      std::find_if(differing.begin(), differing.end(), [](const auto& list) { return !list.empty(); });
  if (first == differing.end()) {
    return;
  }
  const auto rank = static_cast<int>(first - differing.begin());
  std::string tensors;
  for (size_t i = 0; i < first->size() && i < 5; ++i) {
    tensors += (i == 0 ? "" : ", ") + (*first)[i];
  }
  if (first->size() > 5) {
    tensors += " and " + std::to_string(first->size() - 5) + " more";
  }
  std::vector<int> others;
  for (size_t r = static_cast<size_t>(rank) + 1; r < world; ++r) {
    if (!differing[r].empty()) {
      others.push_back(static_cast<int>(r));
    }
  }
  throw std::runtime_error(
      "accelerate debug mode: the processes' replicas diverged (checked " + when + "): process " +
      std::to_string(rank) + " is the first that differs from the others, in " + tensors +
      (others.empty() ? "" : "; " + name_processes(others) + " differ too") +
      ". Under data parallelism every process holds identical parameters and optimizer state; something "
      "changed process " +
      std::to_string(rank) +
      "'s copy outside accelerator.backward and optimizer.step (a rank-dependent update, a non-deterministic "
      "op, or a gradient computed with a plain loss.backward())");
}

void debug_mode_before_backward(AcceleratorState& state) {
  if (!state.process_group || !state.config.even_batches) {
    return; // with uneven batches a joined process does not call backward: a checksum would not match up
  }
  const auto& gradients = *state.gradient_state;
  if (gradients.backwards_since_step != 0 || state.debug_checked_step == gradients.optimizer_steps) {
    return;
  }
  const int64_t every = checksum_interval();
  if (every == 0 || gradients.optimizer_steps % every != 0) {
    return;
  }
  state.debug_checked_step = gradients.optimizer_steps;
  check_replicas_agree(state, "before the backward of optimizer step " +
                                  std::to_string(gradients.optimizer_steps + 1) +
                                  " (ACCELERATE_DEBUG_CHECKSUM_EVERY=" + std::to_string(every) + ")");
}

} // namespace accelerate::detail
