// Input for prepare.cpp: a model and its optimizer at namespace scope, the loop in a function that uses them.
#include <torch/torch.h>

torch::nn::Linear net(4, 1);
torch::optim::SGD optimizer(net->parameters(), 0.01);

void train() {
  for (int i = 0; i < 3; ++i) {
    optimizer.zero_grad();
    net->forward(torch::randn({2, 4})).sum().backward();
    optimizer.step();
  }
}

int main() {
  train();
}
