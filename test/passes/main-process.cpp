// The main-process pass: in training and evaluation code, std::cout lines become accelerator.print (a loss the
// function runs backward on printed as its mean over the processes); other output is guarded.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  std::cout << "Training on " << 4 << " features" << std::endl;
  // CHECK: {{^}}  accelerator.print("Training on ", 4, " features");{{$}}
  std::ofstream log("train.log");
  for (int step = 0; step < 100; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
    if (step % 10 == 0)
      std::cout << "step " << step << " loss " << std::setprecision(8) << loss.item<double>() << std::endl;
    // CHECK: {{^}}      accelerator.print("step ", step, " loss ", std::setprecision(8), accelerator.reduce(loss, accelerate::ReduceOp::MEAN).item<double>());{{$}}
    std::cout << "loss: " << loss.item<float>() << "\n";
    // CHECK: {{^}}    accelerator.print("loss: ", accelerator.reduce(loss, accelerate::ReduceOp::MEAN).item<float>());{{$}}
    if (loss.item<double>() < 0.1)
      std::cout << "converged at " << loss.item<double>() << std::endl;
    // A condition on the local loss: printed as it is (the mean is a collective that only some would reach).
    // CHECK: {{^}}      accelerator.print("converged at ", loss.item<double>());{{$}}
    std::cout << "on the device: " << loss.cuda().item<double>() << std::endl;
    // Another pass edits inside an operand: the line is converted around it.
    // CHECK: {{^}}    accelerator.print("on the device: ", loss.to(accelerator.device()).item<double>());{{$}}
    std::cout << "." << std::flush;
    // CHECK: {{^}}    if (accelerator.is_main_process()) std::cout << "." << std::flush;{{$}}
    std::cerr << "step done" << std::endl;
    // CHECK: {{^}}    if (accelerator.is_main_process()) std::cerr << "step done" << std::endl;{{$}}
    std::printf("step %d\n", step);
    // CHECK: {{^}}    if (accelerator.is_main_process()) std::printf("step %d\n", step);{{$}}
    log << step << ' ' << loss.item<double>() << '\n';
    // CHECK: {{^}}    if (accelerator.is_main_process()) log << step << ' ' << loss.item<double>() << '\n';{{$}}
    if (step == 50)
      std::cout << "halfway" << std::endl;
    else
      std::cout << "step " << step;
    // CHECK:      {{^}}    if (step == 50){{$}}
    // CHECK-NEXT: {{^}}      accelerator.print("halfway");{{$}}
    // CHECK-NEXT: {{^}}    else{{$}}
    // CHECK-NEXT: {{^}}      if (accelerator.is_main_process()) std::cout << "step " << step;{{$}}
    if (step == 60)
      std::cerr << "guarded in braces" << std::endl;
    else
      std::cout << "done\n";
    // CHECK:      {{^}}    if (step == 60){{$}}
    // CHECK-NEXT: {{^}}      { if (accelerator.is_main_process()) std::cerr << "guarded in braces" << std::endl; }{{$}}
    // CHECK-NEXT: {{^}}    else{{$}}
    // CHECK-NEXT: {{^}}      accelerator.print("done");{{$}}
  }
}

// Evaluation code (it holds a NoGradGuard) prints on the main process too.
void evaluate(torch::nn::Linear& model) {
  torch::NoGradGuard no_grad;
  auto accuracy = model->forward(torch::randn({8, 4})).mean().item<double>();
  std::printf("accuracy %.2f\n", accuracy);
  // CHECK: {{^}}  if (accelerator.is_main_process()) std::printf("accuracy %.2f\n", accuracy);{{$}}
}

// Negative: a helper that neither trains nor evaluates prints on every process, as before.
void usage() {
  std::cout << "usage: train [steps]" << std::endl;
  // CHECK: {{^}}  std::cout << "usage: train [steps]" << std::endl;{{$}}
}

// A loss a training step returns (a function or a lambda that runs backward on the variable it returns) is
// printed as its mean too; a tensor some other function returns is not a loss.
torch::Tensor fit_step(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  optimizer.zero_grad();
  auto loss = model->forward(torch::randn({8, 4})).sum();
  loss.backward();
  optimizer.step();
  return loss;
}
// The tensors of torch::autograd::backward({...}) are losses too: printed as their mean over the processes.
void autograd_losses() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int i = 0; i < 10; ++i) {
    auto main_loss = model->forward(torch::randn({8, 4})).sum();
    auto aux_loss = model->forward(torch::randn({8, 4})).sum();
    torch::autograd::backward({main_loss, aux_loss});
    optimizer.step();
    std::cout << "main " << main_loss.item<double>() << std::endl;
    // CHECK: {{^}}    accelerator.print("main ", accelerator.reduce(main_loss, accelerate::ReduceOp::MEAN).item<double>());{{$}}
  }
}
torch::Tensor score_of(torch::nn::Linear& model) { return model->forward(torch::randn({8, 4})).sum(); }
void returned_losses() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto step = [&]() {
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    return loss;
  };
  for (int i = 0; i < 10; ++i) {
    auto loss = fit_step(model, optimizer);
    std::cout << "loss " << loss.item<double>() << std::endl;
    // CHECK: {{^}}    accelerator.print("loss ", accelerator.reduce(loss, accelerate::ReduceOp::MEAN).item<double>());{{$}}
    auto other = step();
    std::cout << "other " << other.item<double>() << std::endl;
    // CHECK: {{^}}    accelerator.print("other ", accelerator.reduce(other, accelerate::ReduceOp::MEAN).item<double>());{{$}}
    auto score = score_of(model);
    std::cout << "score " << score.item<double>() << std::endl;
    // CHECK: {{^}}    accelerator.print("score ", score.item<double>());{{$}}
  }
}
