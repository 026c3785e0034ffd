// The training program the whole-process checkpoint tests run (checkpoint_driver.py): an MLP with dropout
// and input noise, AdamW and StepLR, a shuffled sharded loader, periodic save_state, resume from the latest
// checkpoint; it logs every batch it consumes and writes its final state as safetensors for comparison.
#include <accelerate/accelerate.h>
#include <accelerate/safetensors.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>

namespace {

struct Args {
  int64_t steps = 24;      // optimizer steps to reach
  int64_t save_every = 4;  // save_state() after every k-th optimizer step (0: never)
  std::string project;     // project_dir: automatic checkpoint naming under project/checkpoints
  bool resume = false;     // load_state() the latest checkpoint first, when one exists
  std::string log;         // per-process log prefix: <log>.<rank> gets one line per batch consumed
  std::string final_state; // per-process final state prefix: <final>.<rank>.safetensors
  bool float64 = false;
  int64_t global_batch = 12; // samples per global batch (split evenly across processes)
  int64_t dataset = 100;
  int64_t hidden = 32;
  double dropout = 0.1;
  double noise = 1e-3;
  int accumulation = 1;
  int total_limit = 0;
  int step_delay_ms = 0;
  int timeout_s = 10;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument("checkpoint_train: " + flag + " needs a value");
      }
      return argv[++i];
    };
    if (flag == "--steps")
      args.steps = std::stoll(value());
    else if (flag == "--save-every")
      args.save_every = std::stoll(value());
    else if (flag == "--project")
      args.project = value();
    else if (flag == "--resume")
      args.resume = true;
    else if (flag == "--log")
      args.log = value();
    else if (flag == "--final")
      args.final_state = value();
    else if (flag == "--float64")
      args.float64 = true;
    else if (flag == "--global-batch")
      args.global_batch = std::stoll(value());
    else if (flag == "--dataset")
      args.dataset = std::stoll(value());
    else if (flag == "--hidden")
      args.hidden = std::stoll(value());
    else if (flag == "--dropout")
      args.dropout = std::stod(value());
    else if (flag == "--noise")
      args.noise = std::stod(value());
    else if (flag == "--accumulation")
      args.accumulation = std::stoi(value());
    else if (flag == "--total-limit")
      args.total_limit = std::stoi(value());
    else if (flag == "--step-delay-ms")
      args.step_delay_ms = std::stoi(value());
    else if (flag == "--timeout")
      args.timeout_s = std::stoi(value());
    else
      throw std::invalid_argument("checkpoint_train: unknown flag " + flag);
  }
  return args;
}

struct Mlp : torch::nn::Module {
  Mlp(int64_t hidden, double dropout) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    drop = register_module("drop", torch::nn::Dropout(dropout));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3->forward(torch::tanh(fc2->forward(drop->forward(torch::tanh(fc1->forward(x))))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::nn::Dropout drop{nullptr};
};

/// A fixed regression problem; each batch carries its sample indices, for the log.
struct Regression {
  Regression(int64_t size, torch::Dtype dtype) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(2024);
    x = at::randn({size, 8}, generator, torch::kFloat64);
    y = (x.sum(1, true) * 0.5).sin() + 0.1 * x.narrow(1, 0, 1);
    x = x.to(dtype);
    y = y.to(dtype);
  }
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> get_batch(const std::vector<size_t>& indices) {
    std::vector<int64_t> rows(indices.begin(), indices.end());
    auto index = torch::tensor(rows, torch::kInt64);
    return {x.index_select(0, index), y.index_select(0, index), index};
  }
  size_t size() const { return static_cast<size_t>(x.size(0)); }
  torch::Tensor x, y;
};

/// Parameters, optimizer state, learning rate and the CPU generator: everything that must match bit for bit.
std::map<std::string, torch::Tensor> final_state(Mlp& model, accelerate::Optimizer& optimizer) {
  std::map<std::string, torch::Tensor> state;
  for (const auto& item : model.named_parameters()) {
    state["model." + item.key()] = item.value().detach();
    const auto& slot = optimizer.unwrap().state().at(item.value().unsafeGetTensorImpl());
    auto& adam = static_cast<torch::optim::AdamWParamState&>(*slot);
    state["optimizer." + item.key() + ".exp_avg"] = adam.exp_avg();
    state["optimizer." + item.key() + ".exp_avg_sq"] = adam.exp_avg_sq();
    state["optimizer." + item.key() + ".step"] = torch::tensor(adam.step());
  }
  state["optimizer.lr"] = torch::tensor(optimizer.param_groups()[0].options().get_lr(), torch::kFloat64);
  state["rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  return state;
}

int run(const Args& args) {
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions()
                                          .cpu(true)
                                          .init_timeout(std::chrono::seconds(args.timeout_s))
                                          .project_dir(args.project)
                                          .automatic_checkpoint_naming(true)
                                          .total_limit(args.total_limit)
                                          .gradient_accumulation_steps(args.accumulation));
  const int world = accelerator.num_processes();
  const int rank = accelerator.process_index();
  if (args.global_batch % world != 0) {
    throw std::invalid_argument("checkpoint_train: --global-batch " + std::to_string(args.global_batch) +
                                " is not a multiple of the " + std::to_string(world) + " processes");
  }
  // Each process its own dropout and noise stream; the data order and rank 0's initial weights are shared.
  accelerator.set_seed(1234, /*device_specific=*/true);
  const auto dtype = args.float64 ? torch::kFloat64 : torch::kFloat32;
  auto model = std::make_shared<Mlp>(args.hidden, args.dropout);
  model->to(dtype);
  accelerator.prepare(model);
  auto optimizer =
      accelerator.prepare(torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(3e-3)));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(*optimizer, /*step_size=*/5, /*gamma=*/0.7));
  auto loader = accelerator.prepare_data_loader(
      Regression(args.dataset, dtype),
      accelerate::DataLoaderOptions(static_cast<size_t>(args.global_batch / world)));

  const auto& gradients = *accelerator.gradient_state();
  if (args.resume) {
    try {
      accelerator.load_state();
      accelerator.print("resumed ", gradients.optimizer_steps);
    } catch (const std::invalid_argument& error) {
      if (std::string(error.what()).find("no checkpoint found") == std::string::npos) {
        throw;
      }
      accelerator.print("nothing to resume");
    }
  }
  std::ofstream log;
  if (!args.log.empty()) {
    log.open(args.log + "." + std::to_string(rank), std::ios::app);
  }
  int64_t step = gradients.optimizer_steps;
  while (step < args.steps) {
    for (auto& [x, y, index] : *loader) {
      const int64_t before = gradients.optimizer_steps;
      {
        auto guard = accelerator.accumulate(model);
        optimizer.zero_grad();
        auto out = model->forward(x);
        if (args.noise > 0) {
          out = out + args.noise * torch::randn_like(out);
        }
        accelerator.backward(torch::mse_loss(out, y));
        optimizer.step();
        scheduler.step();
      }
      if (log.is_open()) {
        log << before;
        for (int64_t i = 0; i < index.size(0); ++i) {
          log << ' ' << index[i].item<int64_t>();
        }
        log << '\n' << std::flush;
      }
      step = gradients.optimizer_steps;
      if (step == before) {
        continue; // an accumulation micro-step
      }
      accelerator.print("step ", step);
      if (args.save_every > 0 && step % args.save_every == 0) {
        const auto directory = accelerator.save_state();
        accelerator.print("saved ", step, " ", directory);
      }
      if (step >= args.steps) {
        break;
      }
      if (args.step_delay_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(args.step_delay_ms));
      }
    }
  }
  if (!args.final_state.empty()) {
    accelerate::save_safetensors(final_state(*model, optimizer),
                                 args.final_state + "." + std::to_string(rank) + ".safetensors");
  }
  accelerator.print("done ", step);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::cerr << "checkpoint_train: error: " << error.what() << std::endl;
    return 1;
  }
}
