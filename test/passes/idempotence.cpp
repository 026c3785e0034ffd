// Running accel-rewrite on its own output changes nothing.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/once.cpp
// RUN: not diff -q %s %t/once.cpp
// RUN: %accel-rewrite %t/once.cpp -- -std=c++17 -I%S/Inputs > %t/twice.cpp
// RUN: diff %t/once.cpp %t/twice.cpp
// In place, a second run leaves the file as it was:
// RUN: cp %t/once.cpp %t/inplace.cpp && %accel-rewrite %t/inplace.cpp -i -- -std=c++17 -I%S/Inputs
// RUN: diff %t/once.cpp %t/inplace.cpp

#include <torch/torch.h>

void train_step(torch::Tensor loss) { loss.backward(); }

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    torch::Tensor loss = model->forward(torch::randn({2, 4})).sum();
    optimizer.zero_grad();
    loss.backward(torch::ones_like(loss), true);
    (loss * loss).backward();
    optimizer.step();
  }
}
