// A plain single-device libtorch training loop: a GAN learns a ring of eight Gaussians in the plane. Two
// models and two optimizers: the discriminator takes a step on a real and a generated batch, then the
// generator takes one through the discriminator. Each sample pairs a real point with the latent vector the
// generator draws from, both made once by a seeded generator, so sample i is the same whatever the batch
// size. Nothing here knows about distributed training: accelerate_target() rewrites it at build time.
//
//   gan [batch_size=64] [steps=300]
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>

constexpr int64_t kLatent = 4;

/// Points on a ring of eight Gaussians (data) with a latent vector each (target).
class Ring : public torch::data::datasets::Dataset<Ring> {
public:
  explicit Ring(int64_t size) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
    auto angle = at::randint(8, {size}, generator, at::kLong).to(at::kFloat) * (2 * M_PI / 8);
    points_ = at::stack({angle.cos(), angle.sin()}, 1) * 2 + 0.05 * at::randn({size, 2}, generator);
    latents_ = at::randn({size, kLatent}, generator);
  }
  torch::data::Example<> get(size_t index) override { return {points_[index], latents_[index]}; }
  torch::optional<size_t> size() const override { return points_.size(0); }

private:
  torch::Tensor points_, latents_;
};

int main(int argc, char** argv) {
  const int64_t batch_size = argc > 1 ? std::atoll(argv[1]) : 64;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 300;
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Ring(8192).map(torch::data::transforms::Stack<>()), batch_size);
  torch::nn::Sequential generator(torch::nn::Linear(kLatent, 64), torch::nn::ReLU(),
                                  torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 2));
  torch::nn::Sequential discriminator(torch::nn::Linear(2, 64), torch::nn::LeakyReLU(),
                                      torch::nn::Linear(64, 64), torch::nn::LeakyReLU(),
                                      torch::nn::Linear(64, 1));
  generator->to(device);
  discriminator->to(device);
  torch::optim::Adam generator_optimizer(generator->parameters(),
                                         torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
  torch::optim::Adam discriminator_optimizer(discriminator->parameters(),
                                             torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));

  int64_t step = 0;
  while (step < steps) {
    for (auto& batch : *loader) {
      auto real = batch.data.to(device);
      auto latent = batch.target.to(device);

      // The discriminator: real points are 1, generated ones 0.
      discriminator_optimizer.zero_grad();
      auto real_logits = discriminator->forward(real);
      auto d_loss_real = torch::binary_cross_entropy_with_logits(real_logits, torch::ones_like(real_logits));
      d_loss_real.backward();
      auto fake = generator->forward(latent);
      auto fake_logits = discriminator->forward(fake.detach());
      auto d_loss_fake = torch::binary_cross_entropy_with_logits(fake_logits, torch::zeros_like(fake_logits));
      d_loss_fake.backward();
      discriminator_optimizer.step();

      // The generator: make the discriminator call its points real.
      generator_optimizer.zero_grad();
      auto judged = discriminator->forward(fake);
      auto g_loss = torch::binary_cross_entropy_with_logits(judged, torch::ones_like(judged));
      g_loss.backward();
      generator_optimizer.step();

      if (++step % 10 == 1) {
        std::cout << "step " << step << std::setprecision(8) << " d_loss_real " << d_loss_real.item<double>()
                  << " d_loss_fake " << d_loss_fake.item<double>() << " g_loss " << g_loss.item<double>()
                  << std::endl;
      }
      if (step == steps) {
        break;
      }
    }
  }
  torch::save(generator, "generator.pt");
  return 0;
}
