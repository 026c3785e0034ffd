// Inputs/datasets.h: small map-style datasets for the data-loader and device tests.
#pragma once
#include <torch/torch.h>

#include <tuple>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t index) override;
  std::optional<size_t> size() const override;
};

/// Batches are tuples: `std::get<0>(batch)` is the input.
struct Pairs : torch::data::datasets::Dataset<Pairs, std::tuple<torch::Tensor, torch::Tensor>> {
  using BatchType = std::tuple<torch::Tensor, torch::Tensor>;
  std::tuple<torch::Tensor, torch::Tensor> get(size_t index) override;
  std::optional<size_t> size() const override;
};
