// A plain single-device training loop that prints its loss at every step, the input of two
// accelerate_target() builds in test/tracking: with PROFILE (profile_plain: the rewrite runs it under
// accelerator.profile(), stepped after each optimizer step; profile_test.py's `rewritten` scenario reads each
// process's trace) and with LOG_WITH mlflow (mlflow_plain: the tracking pass logs the printed loss;
// mlflow_test.py's `rewritten` scenario reads the run back from a real MLflow server). Both run it on 2
// processes.
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
  int step = 0;
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
    loss.backward();
    optimizer.step();
    std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
    ++step;
  }
  std::cout << "done" << std::endl;
  return 0;
}
