// Two training loops in main: the first hands its objects to a helper whose refusal withdraws the statements
// of main that made them and the helper's call; the second, over objects of its own, is rewritten.
#include "datasets.h"

#include <iostream>

template <typename Loader> double train_a(torch::nn::Linear& model, torch::optim::Optimizer& opt, Loader& loader) {
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

int main() {
  torch::nn::Linear a(2, 1);
  torch::optim::SGD opt_a(a->parameters(), 0.1);
  auto loader_a = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  std::cout << train_a(a, opt_a, *loader_a) << std::endl;

  torch::nn::Linear b(2, 1);
  torch::optim::SGD opt_b(b->parameters(), 0.1);
  auto loader_b = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  for (auto& batch : *loader_b) {
    opt_b.zero_grad();
    torch::mse_loss(b->forward(batch.data), batch.target).backward();
    opt_b.step();
  }
}
