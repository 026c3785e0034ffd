// The refused object is in main; the helper that trains main's model would be rewritten on its own.
#include "datasets.h"

#include <iostream>

template <typename Loader>
double run_epoch(torch::nn::Linear& model, torch::optim::Optimizer& opt, Loader& loader, torch::Device device) {
  double total = 0;
  for (auto& batch : loader) {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(batch.data.to(device)), batch.target.to(device));
    loss.backward();
    opt.step();
    total += loss.item<double>();
  }
  return total;
}

int main() {
  torch::Device device(torch::kCPU);
  torch::nn::Linear model(2, 1);
  model->to(device);
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto bias = torch::randn({1});
  torch::optim::SGD extra({bias}, 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  for (int epoch = 0; epoch < 3; ++epoch)
    std::cout << run_epoch(model, opt, *loader, device) << std::endl;
  extra.step();
}
