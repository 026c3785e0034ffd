// Helper of safetensors_interop.py: writes, with Accelerator::save_model, a module holding every dtype the
// format shares with libtorch, tied and non-contiguous weights (in one file, or in shards of at most
// MAX_SHARD_SIZE); checks that save_model refuses pickle files; and compares two safetensors files bit by
// bit.
#include <accelerate/accelerate.h>
#include <accelerate/safetensors.h>

#include <torch/torch.h>

#include <cstring>
#include <iostream>

namespace {

/// The values safetensors_interop.py expects, tensor by tensor.
struct Sample : torch::nn::Module {
  Sample() {
    auto ramp = torch::arange(12, torch::kFloat64).reshape({3, 4}) / 7 - 0.5;
    register_parameter("f32", ramp.to(torch::kFloat32));
    register_parameter("f64", ramp.clone());
    register_parameter("f16", ramp.to(torch::kFloat16));
    register_parameter("bf16", ramp.to(torch::kBFloat16));
    register_buffer("f8_e4m3", torch::tensor({0.5, -1.0, 2.0, 448.0}).to(torch::kFloat8_e4m3fn));
    register_buffer("f8_e5m2", torch::tensor({0.25, -3.0, 1024.0, 57344.0}).to(torch::kFloat8_e5m2));
    register_buffer("i64", torch::arange(-2, 3, torch::kInt64));
    register_buffer("flags", torch::tensor({true, false, true}));
    // A transposed weight: non-contiguous, saved by value.
    register_parameter("transposed", (torch::arange(6, torch::kFloat32).reshape({2, 3}) + 0.25).t());
    // Tied weights: one tensor under two names, as a language model's embedding and output head share one.
    auto shared = torch::linspace(-1, 1, 10).reshape({5, 2});
    register_module("embed", std::make_shared<Holder>(shared));
    register_module("head", std::make_shared<Holder>(shared));
  }
  struct Holder : torch::nn::Module {
    explicit Holder(const torch::Tensor& weight) { register_parameter("weight", weight); }
  };
};

int compare(const std::string& a, const std::string& b) {
  const auto left = accelerate::load_safetensors(a).tensors;
  const auto right = accelerate::load_safetensors(b).tensors;
  int differences = 0;
  for (const auto& [name, tensor] : left) {
    const auto other = right.find(name);
    if (other == right.end()) {
      std::cout << name << ": only in " << a << "\n";
      ++differences;
      continue;
    }
    const auto x = tensor.contiguous();
    const auto y = other->second.contiguous();
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
      std::cout << name << ": differs (" << x.scalar_type() << x.sizes() << " vs " << y.scalar_type()
                << y.sizes() << ")\n";
      ++differences;
    }
  }
  for (const auto& [name, tensor] : right) {
    if (left.find(name) == left.end()) {
      std::cout << name << ": only in " << b << "\n";
      ++differences;
    }
  }
  std::cout << (differences == 0 ? "identical: " : "different: ") << left.size() << " tensors" << std::endl;
  return differences == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: safetensors_tool write-sample DIR [MAX_SHARD_SIZE] | refuse-pickle DIR | "
                            "compare A.safetensors B.safetensors";
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "write-sample" && (argc == 3 || argc == 4)) {
      accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
      Sample sample;
      accelerate::SaveModelOptions options;
      if (argc == 4) {
        options.max_shard_size(argv[3]);
      }
      accelerator.save_model(sample, argv[2], options);
      std::cout << "wrote " << argv[2] << " (max_shard_size " << options.max_shard_size_ << ")" << std::endl;
      return 0;
    }
    if (command == "refuse-pickle" && argc == 3) {
      accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
      Sample sample;
      try {
        accelerator.save_model(sample, argv[2], accelerate::SaveModelOptions().safe_serialization(false));
      } catch (const std::invalid_argument& error) {
        std::cout << error.what() << std::endl;
        return 0;
      }
      std::cerr << "safetensors_tool: save_model wrote with safe_serialization(false)" << std::endl;
      return 1;
    }
    if (command == "compare" && argc == 4) {
      return compare(argv[2], argv[3]);
    }
    std::cerr << usage << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "safetensors_tool: error: " << error.what() << std::endl;
    return 1;
  }
}
