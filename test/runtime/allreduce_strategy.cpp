// A parallel strategy added by one file and one registration line: "test_allreduce" replicates the model
// like "ddp", and averages each gradient with a plain all-reduce after backward. The proof that a strategy
// needs nothing else from the runtime (multirank test Strategy.AStrategyAddedByOneFileTrainsLikeDdp).
#include "../../runtime/parallel/engine.h"

#include <atomic>

namespace {

std::atomic<int64_t> averaged_gradients{0};

class AllreduceModel final : public accelerate::detail::PreparedModel {
public:
  using PreparedModel::PreparedModel;

  std::string synchronisation() const override { return "test_allreduce"; }

  void arm(const torch::Tensor&) override {
    broadcast_buffers();
    armed_ = true;
  }

  void finish_backward() override {
    if (!std::exchange(armed_, false)) {
      return;
    }
    torch::NoGradGuard no_grad;
    for (const auto& parameter : parameters()) {
      auto& gradient = parameter.mutable_grad();
      if (!gradient.defined()) {
        gradient = torch::zeros_like(parameter);
      }
      std::vector<torch::Tensor> tensors{gradient};
      process_group()->allreduce(tensors)->wait();
      gradient.div_(process_group()->getSize());
      ++averaged_gradients;
    }
  }

  void disarm() override { armed_ = false; }

  void shadow_armed_backward() override {
    broadcast_buffers();
    for (const auto& parameter : parameters()) {
      std::vector<torch::Tensor> zeros{torch::zeros_like(parameter)};
      process_group()->allreduce(zeros)->wait();
    }
  }

private:
  bool armed_ = false;
};

class AllreduceEngine final : public accelerate::detail::ParallelEngine {
public:
  using ParallelEngine::ParallelEngine;
  std::string name() const override { return "test_allreduce"; }
  std::shared_ptr<accelerate::detail::PreparedModel> prepare_model(torch::nn::Module& model) override {
    place_and_broadcast(model);
    return std::make_shared<AllreduceModel>(model, context().process_group, context().tracker);
  }
};

const accelerate::detail::ParallelEngineRegistration
    registration("test_allreduce", [](const accelerate::detail::ParallelContext& context) {
      return std::make_unique<AllreduceEngine>(context);
    });

} // namespace

/// How many gradients the strategy has averaged in this process so far (declared where the test reads it).
int64_t test_allreduce_averaged_gradients();
int64_t test_allreduce_averaged_gradients() {
  return averaged_gradients.load();
}
