// A trainer class: main hands it the model, its constructor builds the optimizer member over it, and the
// refused object is local to one method. The class, its methods and main share the objects.
#include "datasets.h"

#include <iostream>
#include <memory>

struct Trainer {
  explicit Trainer(torch::nn::Linear model) : model(model), opt(model->parameters(), 0.1) {}
  template <typename Loader> double fit(Loader& loader) {
    auto scale = torch::randn({1});
    torch::optim::SGD extra({scale}, 0.01);
    double total = 0;
    for (auto& batch : loader) {
      opt.zero_grad();
      torch::Tensor loss = torch::mse_loss(model->forward(batch.data) * scale, batch.target);
      loss.backward();
      opt.step();
      extra.step();
      total += loss.item<double>();
    }
    return total;
  }
  torch::nn::Linear model;
  torch::optim::SGD opt;
};

int main() {
  torch::nn::Linear model(2, 1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  Trainer trainer(model);
  for (int epoch = 0; epoch < 3; ++epoch)
    std::cout << trainer.fit(*loader) << std::endl;
}
