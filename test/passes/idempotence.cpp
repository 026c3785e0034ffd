// Running accel-rewrite on its own output changes nothing (every pass leaves functions that already use the
// runtime alone), on a file that exercises every default pass.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/once.cpp
// RUN: not diff -q %s %t/once.cpp
// RUN: %accel-rewrite %t/once.cpp -- -std=c++17 -I%S/Inputs > %t/twice.cpp 2> %t/twice.stderr
// RUN: diff %t/once.cpp %t/twice.cpp
// RUN: %accel-rewrite %t/once.cpp --check -- -std=c++17 -I%S/Inputs
// In place, a second run leaves the file as it was:
// RUN: cp %t/once.cpp %t/inplace.cpp && %accel-rewrite %t/inplace.cpp -i -- -std=c++17 -I%S/Inputs
// RUN: diff %t/once.cpp %t/inplace.cpp

#include "datasets.h"

#include <iostream>
#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

void train_step(torch::Tensor loss) { loss.backward(); }

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto model = std::make_shared<Net>();
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::StepLR scheduler(optimizer, 10);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 8);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      auto data = batch.data.to(device);
      optimizer.zero_grad();
      torch::Tensor loss = model->forward(data).sum();
      loss.backward(torch::ones_like(loss), true);
      (loss * loss).backward();
      torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      optimizer.step();
      std::cout << "loss " << loss.item<double>() << std::endl;
      torch::save(model, "model.pt");
    }
    scheduler.step();
  }
}
