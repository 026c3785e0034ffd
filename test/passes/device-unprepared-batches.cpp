// Batches of a loader that is not prepared stay on the CPU, while prepare moves the model to
// accelerator.device(): where a function that runs a prepared model hands such a tensor to a call, the device
// pass moves it there (on the CPU the move does nothing). An evaluation loader (never prepared), and with
// --disable=data-loader every loader. Not moved: a tensor already moved (there or further out), one passed as a
// `Tensor&`, one printed; and nothing with --disable=prepare (the model stays where it was).
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s --disable=data-loader -- -std=c++17 -I%S/Inputs 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=NOLOADER
// RUN: %accel-rewrite %s --disable=prepare -- -std=c++17 -I%S/Inputs 2>/dev/null | grep -v '^ *//' \
// RUN:   | FileCheck %s --check-prefix=NOPREPARE --implicit-check-not=data.to(accelerator \
// RUN:     --implicit-check-not=target.to(accelerator --implicit-check-not=inputs.to(accelerator

#include "datasets.h"

#include <iostream>
#include <memory>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

void fill(torch::Tensor& out);

int main() {
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto train = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  auto pairs = torch::data::make_data_loader(Pairs(), 64);
  auto test = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : *train) {
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(batch.data.view({-1, 4})), batch.target);
      // CHECK: {{^}}      auto loss = torch::mse_loss(model->forward(batch.data.view({-1, 4})), batch.target);{{$}}
      // NOLOADER: {{^}}      auto loss = torch::mse_loss(model->forward(batch.data.view({-1, 4}).to(accelerator.device())), batch.target.to(accelerator.device()));{{$}}
      // NOPREPARE: {{^}}      auto loss = torch::mse_loss(model->forward(batch.data.view({-1, 4})), batch.target);{{$}}
      loss.backward();
      optimizer.step();
    }
    for (auto& [inputs, labels] : *pairs) {
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(inputs), labels);
      // NOLOADER: {{^}}      auto loss = torch::mse_loss(model->forward(inputs.to(accelerator.device())), labels.to(accelerator.device()));{{$}}
      loss.backward();
      optimizer.step();
    }
    int64_t correct = 0;
    for (const auto& batch : *test) {
      auto input = batch.data / 255.0;
      auto output = model->forward(input);
      // CHECK: {{^}}      auto input = batch.data.to(accelerator.device()) / 255.0;{{$}}
      // CHECK: {{^}}      auto output = model->forward(input);{{$}}
      correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
      // CHECK: {{^}}      correct += output.argmax(1).eq(batch.target.to(accelerator.device())).sum().item<int64_t>();{{$}}
      auto scaled = model->forward(torch::ones_like(batch.data).to(torch::kFloat));
      // CHECK: {{^}}      auto scaled = model->forward(torch::ones_like(batch.data.to(accelerator.device())).to(torch::kFloat));{{$}}
      auto kept = model->forward(torch::ones_like(batch.data).cuda());
      // CHECK: {{^}}      auto kept = model->forward(torch::ones_like(batch.data).to(accelerator.device()));{{$}}
      torch::Tensor copy = batch.target;
      fill(copy);
      // CHECK: {{^}}      fill(copy);{{$}}
      std::cout << batch.target << std::endl;
      // CHECK: {{^}}      accelerator.print(batch.target);{{$}}
    }
  }
}
