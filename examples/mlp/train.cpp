// A plain single-device libtorch training loop: an MLP on MNIST-shaped synthetic data whose labels come from
// a fixed teacher network (the `mlp-mnist` workload). Nothing here knows about distributed training:
// accelerate_target() rewrites it at build time.
#include <torch/torch.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 512));
    fc2 = register_module("fc2", torch::nn::Linear(512, 512));
    fc3 = register_module("fc3", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  const int64_t batch_size = 64;
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  // The teacher that labels the synthetic images.
  torch::nn::Linear teacher(784, 10);

  auto model = std::make_shared<Net>();
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  for (int step = 1; step <= steps; ++step) {
    auto images = torch::randn({batch_size, 784});
    auto labels = teacher->forward(images).argmax(1);
    images = images.to(device);
    labels = labels.to(device);

    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    loss.backward();
    optimizer.step();

    if (step == 1 || step % 20 == 0 || step == steps) {
      std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
    }
  }
  return 0;
}
