// LocalSGD (include/accelerate/local_sgd.h): a `no_sync` scope whose parameters are averaged every K steps,
// built on the Accelerator's public collectives, as Accelerate's accelerate/local_sgd.py.
#include <accelerate/local_sgd.h>

#include "accelerator/state.h"

#include <cstdio>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace accelerate {

LocalSGD::LocalSGD(Accelerator& accelerator, torch::nn::Module& model, int64_t local_sgd_steps, bool enabled)
    : accelerator_(accelerator), model_(model), local_sgd_steps_(local_sgd_steps),
      enabled_(enabled && accelerator.num_processes() > 1) {
  if (local_sgd_steps < 1) {
    throw std::invalid_argument("accelerate: LocalSGD's local_sgd_steps is " +
                                std::to_string(local_sgd_steps) +
                                "; it must be >= 1 (the optimizer steps between two averages)");
  }
  const std::string& strategy = detail::internal_state(accelerator).config.parallel_strategy;
  if (enabled && strategy != "ddp") {
    throw std::invalid_argument(
        "accelerate: LocalSGD averages whole replicas, and parallel_strategy '" + strategy +
        "' shards them; use LocalSGD under the ddp strategy, or pass enabled = false");
  }
  if (enabled_) {
    no_sync_.emplace(accelerator.no_sync(model));
  }
}

LocalSGD::~LocalSGD() {
  if (ended_ || !enabled_) {
    return;
  }
  if (std::uncaught_exceptions() > 0) {
    no_sync_.reset();
    return;
  }
  try {
    end();
  } catch (const std::exception& error) {
    // A destructor cannot throw: say why the last average did not happen.
    std::fprintf(stderr, "accelerate: LocalSGD's final average failed: %s\n", error.what());
  }
}

void LocalSGD::step() {
  if (ended_) {
    throw std::logic_error("accelerate: LocalSGD::step() after end(): the scope is over");
  }
  if (!enabled_) {
    return;
  }
  if (++steps_ % local_sgd_steps_ == 0) {
    average();
  }
}

void LocalSGD::end() {
  if (ended_) {
    return;
  }
  ended_ = true;
  if (!enabled_) {
    return;
  }
  average();
  no_sync_.reset();
}

void LocalSGD::average() {
  accelerator_.wait_for_everyone();
  torch::NoGradGuard no_grad;
  // One all-reduce per dtype and device: every parameter of that kind flattened into one buffer.
  std::map<std::pair<c10::ScalarType, std::string>, std::vector<torch::Tensor>> kinds;
  for (const auto& parameter : model_.parameters()) {
    kinds[{parameter.scalar_type(), parameter.device().str()}].push_back(parameter);
  }
  for (auto& [kind, parameters] : kinds) {
    std::vector<torch::Tensor> flat;
    for (const auto& parameter : parameters) {
      flat.push_back(parameter.detach().reshape(-1));
    }
    auto averaged = accelerator_.reduce(torch::cat(flat), ReduceOp::MEAN);
    int64_t offset = 0;
    for (auto& parameter : parameters) {
      parameter.detach().copy_(averaged.slice(0, offset, offset + parameter.numel()).view_as(parameter));
      offset += parameter.numel();
    }
  }
  ++averages_;
}

} // namespace accelerate
