// A plain single-device training loop: regression of a fixed linear teacher on synthetic data.
//
//   train [batch_size=32] [epochs=2]
#include "model.h"

#include <torch/torch.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

class Synthetic : public torch::data::datasets::Dataset<Synthetic> {
public:
  explicit Synthetic(int64_t size) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
    inputs_ = at::randn({size, 16}, generator);
    targets_ = inputs_.matmul(at::randn({16, 1}, generator));
  }
  torch::data::Example<> get(size_t index) override { return {inputs_[index], targets_[index]}; }
  torch::optional<size_t> size() const override { return inputs_.size(0); }

private:
  torch::Tensor inputs_, targets_;
};

int main(int argc, char** argv) {
  const int64_t batch_size = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 2;
  torch::manual_seed(0);

  auto dataset = Synthetic(1024).map(torch::data::transforms::Stack<>());
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), batch_size);
  auto model = std::make_shared<Regressor>();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));

  int64_t step = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      if (++step % 4 == 1) {
        std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
      }
    }
  }
  return 0;
}
