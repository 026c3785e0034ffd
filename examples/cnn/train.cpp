// A plain single-device libtorch training loop: a small convolutional network classifies synthetic 16x16
// images (four classes, each a fixed random pattern under noise). No BatchNorm and no dropout, so the result
// does not depend on how the batch is split. Nothing here knows about distributed training:
// accelerate_target() rewrites it at build time.
//
//   cnn [batch_size=32] [steps=100]
#include <torch/torch.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

/// Grayscale 16x16 images: the pattern of the image's class plus noise, drawn once from a seeded generator.
class SyntheticImages : public torch::data::datasets::Dataset<SyntheticImages> {
public:
  SyntheticImages(int64_t size, int64_t classes) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
    auto patterns = at::randn({classes, 1, 16, 16}, generator);
    labels_ = at::randint(classes, {size}, generator, at::kLong);
    images_ = patterns.index_select(0, labels_) + 1.5 * at::randn({size, 1, 16, 16}, generator);
  }
  torch::data::Example<> get(size_t index) override { return {images_[index], labels_[index]}; }
  torch::optional<size_t> size() const override { return images_.size(0); }

private:
  torch::Tensor images_, labels_;
};

struct ConvNet : torch::nn::Module {
  explicit ConvNet(int64_t classes) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(16 * 4 * 4, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2); // 8 x 8 x 8
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2); // 16 x 4 x 4
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc{nullptr};
};

int main(int argc, char** argv) {
  const int64_t batch_size = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 100;
  const int64_t classes = 4;
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto dataset = SyntheticImages(2048, classes).map(torch::data::transforms::Stack<>());
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), batch_size);
  auto model = std::make_shared<ConvNet>(classes);
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(2e-3));

  int64_t step = 0;
  while (step < steps) {
    for (auto& batch : *loader) {
      auto images = batch.data.to(device);
      auto labels = batch.target.to(device);

      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
      loss.backward();
      optimizer.step();

      if (++step % 5 == 1) {
        std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
      }
      if (step == steps) {
        break;
      }
    }
  }
  torch::save(model, "cnn.pt");
  return 0;
}
