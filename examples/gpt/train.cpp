// A plain single-device libtorch training loop: a character-level GPT (the `gpt-small` workload: byte
// vocabulary of 256, width 128, 4 heads, 2 pre-norm blocks, context 64, AdamW 3e-4) learns to continue a
// text. Training windows start at offsets drawn once from a seeded generator, so window i is the same
// whatever the batch size. Nothing here knows about distributed training: accelerate_target() rewrites it at
// build time.
//
//   gpt [batch_size=8] [steps=200] [text=examples/gpt/data/coriolanus.txt]
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

constexpr int64_t kVocab = 256, kDim = 128, kHeads = 4, kLayers = 2, kContext = 64;

/// Windows of kContext + 1 bytes of a text: the input is the first kContext bytes, the target the same
/// shifted by one.
class TextWindows : public torch::data::datasets::Dataset<TextWindows> {
public:
  TextWindows(const std::string& text, int64_t windows) {
    auto bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
    std::memcpy(bytes.data_ptr(), text.data(), text.size());
    tokens_ = bytes.to(torch::kLong);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1234);
    offsets_ = at::randint(tokens_.size(0) - kContext - 1, {windows}, generator, at::kLong);
  }
  torch::data::Example<> get(size_t index) override {
    auto window = tokens_.narrow(0, offsets_[index].item<int64_t>(), kContext + 1);
    return {window.narrow(0, 0, kContext), window.narrow(0, 1, kContext)};
  }
  torch::optional<size_t> size() const override { return offsets_.size(0); }

private:
  torch::Tensor tokens_, offsets_;
};

/// Pre-norm block: x + proj(attention(ln1(x))), then x + fc2(gelu(fc(ln2(x)))), causal attention.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    qkv = register_module("qkv", torch::nn::Linear(kDim, 3 * kDim));
    proj = register_module("proj", torch::nn::Linear(kDim, kDim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    fc = register_module("fc", torch::nn::Linear(kDim, 4 * kDim));
    fc2 = register_module("fc2", torch::nn::Linear(4 * kDim, kDim));
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto batch = x.size(0), time = x.size(1);
    auto parts =
        qkv->forward(ln1->forward(x)).view({batch, time, 3, kHeads, kDim / kHeads}).permute({2, 0, 3, 1, 4});
    auto attended =
        at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
    x = x + proj->forward(attended.transpose(1, 2).reshape({batch, time, kDim}));
    return x + fc2->forward(torch::gelu(fc->forward(ln2->forward(x))));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl() {
    token = register_module("token", torch::nn::Embedding(kVocab, kDim));
    position = register_module("position", torch::nn::Embedding(kContext, kDim));
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int64_t i = 0; i < kLayers; ++i) {
      blocks->push_back(Block());
    }
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    head = register_module("head", torch::nn::Linear(kDim, kVocab));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    auto positions = torch::arange(tokens.size(1), tokens.options());
    auto x = token->forward(tokens) + position->forward(positions);
    return head->forward(ln->forward(blocks->forward(x)));
  }
  torch::nn::Embedding token{nullptr}, position{nullptr};
  torch::nn::Sequential blocks{nullptr};
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Gpt);

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw std::runtime_error("gpt: cannot read the training text '" + path +
                             "'; pass its path as the third argument");
  }
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

int main(int argc, char** argv) {
  const int64_t batch_size = argc > 1 ? std::atoll(argv[1]) : 8;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 200;
  const std::string text_path = argc > 3 ? argv[3] : "examples/gpt/data/coriolanus.txt";
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto dataset = TextWindows(read_text(text_path), 8192).map(torch::data::transforms::Stack<>());
  auto loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(dataset), batch_size);
  Gpt model;
  model->to(device);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-4));

  int64_t step = 0;
  while (step < steps) {
    for (auto& batch : *loader) {
      auto inputs = batch.data.to(device);
      auto targets = batch.target.to(device);

      optimizer.zero_grad();
      auto logits = model->forward(inputs);
      auto loss = torch::nn::functional::cross_entropy(logits.view({-1, kVocab}), targets.view({-1}));
      loss.backward();
      optimizer.step();

      if (++step % 10 == 1) {
        std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
      }
      if (step == steps) {
        break;
      }
    }
  }
  torch::save(model, "gpt.pt");
  return 0;
}
