// accelerate::nn::Linear: torch::nn::Linear's options, parameters and initialisation, forward through
// at::linear (or fp8 GEMMs inside an fp8 autocast window, runtime/precision/fp8.cpp).
#include <accelerate/nn.h>

#include "precision/fp8.h"

#include <cmath>

#include <torch/nn/init.h>

namespace accelerate::nn {

LinearImpl::LinearImpl(const torch::nn::LinearOptions& options_) : options(options_) {
  TORCH_CHECK(options.in_features() >= 0 && options.out_features() >= 0,
              "accelerate::nn::Linear: in_features and out_features must be >= 0 (got in_features=",
              options.in_features(), ", out_features=", options.out_features(), ")");
  LinearImpl::reset();
}

void LinearImpl::reset() {
  weight = register_parameter("weight", torch::empty({options.out_features(), options.in_features()}));
  if (options.bias()) {
    bias = register_parameter("bias", torch::empty(options.out_features()));
  } else {
    bias = register_parameter("bias", {}, /*requires_grad=*/false);
  }
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  // The same draws, in the same order, as torch::nn::LinearImpl: one seed gives both modules equal weights.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5));
  if (bias.defined()) {
    auto [fan_in, fan_out] = torch::nn::init::_calculate_fan_in_and_fan_out(weight);
    (void)fan_out;
    const auto bound = 1 / std::sqrt(static_cast<double>(fan_in));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "accelerate::nn::Linear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << options.bias() << ")";
}

torch::Tensor LinearImpl::forward(const torch::Tensor& input) {
  if (detail::fp8_autocast_enabled()) {
    return detail::fp8_layer_forward(*this, input);
  }
  return at::linear(input, weight, bias);
}

} // namespace accelerate::nn
