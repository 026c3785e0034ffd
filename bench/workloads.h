// The reference workloads of shared/DESIGN.md §6 (mlp-mnist, gpt-small, gpt-86m): models and synthetic data.
#pragma once

#include <torch/torch.h>

#include <string>

namespace accelerate::bench {

/// 784-512-512-10 MLP; labels come from a fixed random teacher network.
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 512));
    fc2 = register_module("fc2", torch::nn::Linear(512, 512));
    fc3 = register_module("fc3", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3->forward(torch::relu(fc2->forward(torch::relu(fc1->forward(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

struct GptConfig {
  int64_t vocab = 256, dim = 128, heads = 4, layers = 2, context = 64, batch = 8;
  static GptConfig small() { return {}; }
  static GptConfig gpt_86m() { return {256, 768, 12, 12, 1024, 16}; }
};

/// Pre-norm block: x + proj(sdpa(qkv(ln1(x)))), then x + fc2(gelu(fc(ln2(x)))), causal attention.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c) : heads(c.heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    qkv = register_module("qkv", torch::nn::Linear(c.dim, 3 * c.dim));
    proj = register_module("proj", torch::nn::Linear(c.dim, c.dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    fc = register_module("fc", torch::nn::Linear(c.dim, 4 * c.dim));
    fc2 = register_module("fc2", torch::nn::Linear(4 * c.dim, c.dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto batch = x.size(0), time = x.size(1), dim = x.size(2);
    auto parts =
        qkv->forward(ln1->forward(x)).view({batch, time, 3, heads, dim / heads}).permute({2, 0, 3, 1, 4});
    auto attended =
        at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
    x = x + proj->forward(attended.transpose(1, 2).reshape({batch, time, dim}));
    return x + fc2->forward(torch::gelu(fc->forward(ln2->forward(x))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c) {
    token = register_module("token", torch::nn::Embedding(c.vocab, c.dim));
    position = register_module("position", torch::nn::Embedding(c.context, c.dim));
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int64_t i = 0; i < c.layers; ++i) {
      blocks->push_back(Block(c));
    }
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
    head = register_module("head", torch::nn::Linear(c.dim, c.vocab));
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

} // namespace accelerate::bench
