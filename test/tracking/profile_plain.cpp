// A plain single-device training loop, built by accelerate_target(... PROFILE): the rewrite runs it under
// accelerator.profile(), stepped after each optimizer step and stopped after the loop (the profile pass).
// profile_test.py's `rewritten` scenario runs it on 2 processes with ACCEL_PROFILE_SCHEDULE and
// ACCEL_PROFILE_DIR and reads each process's trace.
#include <torch/torch.h>

#include <iostream>

namespace {

class Lines : public torch::data::datasets::Dataset<Lines> {
public:
  torch::data::Example<> get(size_t index) override {
    auto x = torch::full({1}, static_cast<double>(index) / 32.0 - 1.0);
    return {x, 3 * x + 1};
  }
  torch::optional<size_t> size() const override { return 64; }
};

} // namespace

int main() {
  torch::manual_seed(0);
  auto model = torch::nn::Sequential(torch::nn::Linear(1, 16), torch::nn::ReLU(), torch::nn::Linear(16, 1));
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  auto loader = torch::data::make_data_loader(Lines().map(torch::data::transforms::Stack<>()), 4);
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
    loss.backward();
    optimizer.step();
  }
  std::cout << "done" << std::endl;
  return 0;
}
