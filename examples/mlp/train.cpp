// A plain single-device libtorch training loop: an MLP on MNIST-shaped synthetic data whose labels come from
// a fixed teacher network (the `mlp-mnist` workload). Nothing here knows about distributed training:
// accelerate_target() rewrites it at build time.
//
//   mlp [batch_size=64] [epochs=3]
#include <torch/torch.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

/// 28x28 images drawn once from a seeded generator, labelled by a random linear teacher.
class SyntheticMnist : public torch::data::datasets::Dataset<SyntheticMnist> {
public:
  explicit SyntheticMnist(int64_t size) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(42);
    images_ = at::randn({size, 784}, generator);
    auto teacher = at::randn({784, 10}, generator);
    labels_ = images_.matmul(teacher).argmax(1);
  }
  torch::data::Example<> get(size_t index) override { return {images_[index], labels_[index]}; }
  torch::optional<size_t> size() const override { return images_.size(0); }

private:
  torch::Tensor images_, labels_;
};

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
  const int64_t batch_size = argc > 1 ? std::atoll(argv[1]) : 64;
  const int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 3;
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto dataset = SyntheticMnist(5120).map(torch::data::transforms::Stack<>());
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), batch_size);
  auto model = std::make_shared<Net>();
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  int64_t step = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : *loader) {
      auto images = batch.data.to(device);
      auto labels = batch.target.to(device);

      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
      loss.backward();
      optimizer.step();

      if (++step % 10 == 1) {
        std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
      }
    }
  }
  return 0;
}
