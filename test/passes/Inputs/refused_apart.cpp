// Two training loops that share no object: main calls each with no argument. The refusal in one leaves the
// other rewritten.
#include "datasets.h"

#include <iostream>

double pretrain() {
  torch::nn::Linear net(2, 1);
  auto scale = torch::randn({1});
  torch::optim::SGD extra({scale}, 0.01);
  torch::optim::SGD opt(net->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  double total = 0;
  for (auto& batch : *loader) {
    opt.zero_grad();
    extra.zero_grad();
    auto loss = torch::mse_loss(net->forward(batch.data) * scale, batch.target);
    loss.backward();
    opt.step();
    extra.step();
    total += loss.item<double>();
  }
  return total;
}

double finetune() {
  torch::nn::Linear net(2, 1);
  torch::optim::SGD opt(net->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  double total = 0;
  for (auto& batch : *loader) {
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(batch.data), batch.target);
    loss.backward();
    opt.step();
    total += loss.item<double>();
  }
  return total;
}

int main() {
  std::cout << pretrain() << std::endl;
  std::cout << finetune() << std::endl;
}
