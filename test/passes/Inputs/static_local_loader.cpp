// A static local data loader: made when fit() first runs, after main's Accelerator (loader-static.cpp).
#include "datasets.h"

void fit(torch::nn::Linear& head, torch::optim::SGD& opt) {
  static auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  for (auto& batch : *loader) {
    opt.zero_grad();
    torch::mse_loss(head->forward(batch.data), batch.target).backward();
    opt.step();
  }
}

int main() {
  torch::nn::Linear head(2, 1);
  torch::optim::SGD opt(head->parameters(), 0.1);
  fit(head, opt);
}
