// A plain single-device training loop that saves its model every other step, rewritten by
// accelerate_target(): the rewrite saves a checkpoint there (accelerator.save_state("checkpoint")) and,
// before the epoch loop, loads it back when the launcher restarted the job. resume_test.py kills one process
// at a chosen step on the first start and checks that the restarted job ends with exactly the parameters of
// an uninterrupted one, and that the loop's step counter went on from the checkpoint (the rewrite registers
// it with register_counter). resume_train_logged also logs the printed loss (LOG_WITH jsonl) at that step.
//
// Test hook: CRASH_AT_STEP=<n> makes process 1 (RANK) exit with code 3 right before step n on the first start
// only (TORCHELASTIC_RESTART_COUNT unset or 0). float64 and one intra-op thread, so equal runs are
// bit-identical.
#include <torch/torch.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>

namespace {

/// 40 examples computed from their index: the same on every process and in every run.
class Sines : public torch::data::datasets::Dataset<Sines> {
public:
  torch::data::Example<> get(size_t index) override {
    auto x = torch::arange(4, torch::kFloat64).mul(0.3).add(static_cast<double>(index)).sin();
    auto y = x.sum().cos().reshape({1});
    return {x, y};
  }
  torch::optional<size_t> size() const override { return 40; }
};

struct Net : torch::nn::Module {
  explicit Net(int64_t width) {
    hidden = register_module("hidden", torch::nn::Linear(4, width));
    output = register_module("output", torch::nn::Linear(width, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return output->forward(torch::tanh(hidden->forward(x))); }
  torch::nn::Linear hidden{nullptr}, output{nullptr};
};

/// The step before which this process stops on the first start (0: never), from CRASH_AT_STEP and RANK.
int crash_step() {
  const char* step = std::getenv("CRASH_AT_STEP");
  const char* rank = std::getenv("RANK");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool first_start = restart == nullptr || std::string(restart) == "0";
  return step != nullptr && rank != nullptr && std::string(rank) == "1" && first_start ? std::atoi(step) : 0;
}

} // namespace

// resume_train [WIDTH]: the hidden layer's width (default 8); another width is another model.
int main(int argc, char** argv) {
  const int64_t width = argc > 1 ? std::atoll(argv[1]) : 8;
  torch::set_num_threads(1);
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  torch::manual_seed(3);
  const int crash_before = crash_step();
  auto model = std::make_shared<Net>(width);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto loader = torch::data::make_data_loader(Sines().map(torch::data::transforms::Stack<>()),
                                              torch::data::DataLoaderOptions(4));
  int step = 0;
  int trained = 0; // the steps this start trains (step, the loop's counter, continues from a checkpoint)
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      ++step;
      ++trained;
      if (step == crash_before) {
        std::cerr << "resume_train: stopping before step " << step << " (CRASH_AT_STEP)" << std::endl;
        std::_Exit(3);
      }
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
      if (step % 2 == 0) {
        torch::save(model, "model.pt");
      }
    }
  }
  std::cout << "trained " << trained << " steps, step counter " << step << std::endl;
  for (const auto& parameter : model->named_parameters()) {
    std::cout << "parameter " << parameter.key() << " sum " << std::setprecision(17)
              << parameter.value().sum().item<double>() << std::endl;
  }
}
