// Checkpoints kept in the repository (test/checkpoint/data/) must keep loading: this program writes one, with
// the values it must restore, and checks that a checkpoint loads back to exactly those values.
//
//   checkpoint_fixture write <dir>   (1 process, or N ranks with torchrun's variables) writes
//   <dir>/checkpoint
//                                    and, from process 0, <dir>/expected.safetensors
//   checkpoint_fixture check <dir>   (1 process) loads <dir>/checkpoint into a program built with another
//   seed
//                                    and compares it with <dir>/expected.safetensors; exits 1 on a difference
//
// What is saved: a model of two small Linear layers (and a buffer), Adam after a few steps, StepLR, a
// shuffled loader in the middle of its second epoch, a registered counter, and each process's generator.
#include <accelerate/accelerate.h>
#include <accelerate/safetensors.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 6));
    fc2 = register_module("fc2", torch::nn::Linear(6, 2));
    register_buffer("seen", torch::zeros({1}, torch::kInt64));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

/// Sample i: 4 features from a generator seeded by i; the target carries nothing random.
struct Samples {
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> get_batch(const std::vector<size_t>& indices) {
    std::vector<torch::Tensor> x;
    for (auto index : indices) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(index);
      x.push_back(at::randn({4}, generator));
    }
    auto features = torch::stack(x);
    std::vector<int64_t> rows(indices.begin(), indices.end());
    return {features, torch::stack({features.sum(1).sin(), features.mean(1)}, 1), torch::tensor(rows)};
  }
  size_t size() const { return 20; }
};

struct Counter {
  int64_t value = 0;
  void save(torch::serialize::OutputArchive& archive) const { archive.write("value", torch::tensor(value)); }
  void load(torch::serialize::InputArchive& archive) {
    torch::Tensor saved;
    archive.read("value", saved);
    value = saved.item<int64_t>();
  }
};

struct Training {
  Training(uint64_t seed, size_t batch_size)
      : accelerator(accelerate::AcceleratorOptions().cpu(true).seed(seed)), model(std::make_shared<Net>()) {
    accelerator.prepare(model);
    optimizer.emplace(accelerator.prepare(torch::optim::Adam(model->parameters(), 1e-2)));
    scheduler.emplace(accelerator.prepare(torch::optim::StepLR(**optimizer, 3, 0.5)));
    loader = accelerator.prepare_data_loader(Samples(), accelerate::DataLoaderOptions(batch_size));
    accelerator.register_for_checkpointing(counter);
  }

  /// Trains `steps` optimizer steps in passes over the loader, calling `after_step(k, indices)` after the
  /// k-th inside the pass (where a program saves its checkpoints) with the global batch's sample indices. A
  /// pass left early starts its epoch over; one resumed by load_state continues.
  void train(int steps, const std::function<void(int, const torch::Tensor&)>& after_step) {
    int done = 0;
    while (done < steps) {
      for (auto& [x, y, index] : *loader) {
        optimizer->zero_grad();
        auto out = model->forward(x) + 1e-3 * torch::randn({x.size(0), 2});
        accelerator.backward(torch::mse_loss(out, y));
        optimizer->step();
        scheduler->step();
        ++counter.value;
        {
          torch::NoGradGuard no_grad;
          model->named_buffers()["seen"].add_(1);
        }
        after_step(++done, accelerator.gather(index));
        if (done == steps) {
          break;
        }
      }
    }
  }

  /// Everything a checkpoint restores, by name, as tensors.
  std::map<std::string, torch::Tensor> values(const std::string& prefix) {
    std::map<std::string, torch::Tensor> out;
    for (const auto& item : model->named_parameters()) {
      out[prefix + "model." + item.key()] = item.value().detach().clone();
      const auto& slot = optimizer->unwrap().state().at(item.value().unsafeGetTensorImpl());
      const auto& adam = static_cast<const torch::optim::AdamParamState&>(*slot);
      out[prefix + "optimizer." + item.key() + ".exp_avg"] = adam.exp_avg().clone();
      out[prefix + "optimizer." + item.key() + ".exp_avg_sq"] = adam.exp_avg_sq().clone();
      out[prefix + "optimizer." + item.key() + ".step"] = torch::tensor(adam.step());
    }
    for (const auto& item : model->named_buffers()) {
      out[prefix + "model." + item.key()] = item.value().clone();
    }
    out[prefix + "optimizer.lr"] =
        torch::tensor(optimizer->param_groups()[0].options().get_lr(), torch::kFloat64);
    out[prefix + "scheduler.steps"] = torch::tensor(scheduler->steps());
    const auto position = loader->state();
    out[prefix + "data.epoch"] = torch::tensor(static_cast<int64_t>(position.epoch));
    out[prefix + "data.batches_consumed"] = torch::tensor(static_cast<int64_t>(position.batches_consumed));
    out[prefix + "data.global_batch_size"] = torch::tensor(static_cast<int64_t>(position.global_batch_size));
    out[prefix + "counter.value"] = torch::tensor(counter.value);
    out[prefix + "steps"] = torch::tensor(accelerator.gradient_state()->optimizer_steps);
    out[prefix + "rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
    return out;
  }

  accelerate::Accelerator accelerator;
  std::shared_ptr<Net> model;
  std::optional<accelerate::Optimizer> optimizer;
  std::optional<accelerate::Scheduler> scheduler;
  std::unique_ptr<accelerate::DataLoader<Samples>> loader;
  Counter counter;
};

/// 7 global batches an epoch with 1 process (batch 2 of epoch 1 is saved), 4 with 2 (batch 1 of epoch 2).
constexpr int kStepsBeforeSave = 9;

int write(const std::string& directory) {
  at::set_num_threads(1);
  Training run(/*seed=*/17, /*batch_size=*/3);
  run.accelerator.set_seed(17, /*device_specific=*/true);
  std::map<std::string, torch::Tensor> expected;
  run.train(kStepsBeforeSave + 1, [&](int step, const torch::Tensor& indices) {
    if (step == kStepsBeforeSave) {
      run.accelerator.save_state(directory + "/checkpoint");
      expected = run.values("");
      expected["world_size"] = torch::tensor(static_cast<int64_t>(run.accelerator.num_processes()));
      return;
    }
    if (step == kStepsBeforeSave + 1) { // what the first step after load_state must take and reach
      expected["next.batch"] = indices;
      for (auto& [name, value] : run.values("next.")) {
        if (name.rfind("next.model.", 0) == 0 || name == "next.optimizer.lr" ||
            name == "next.scheduler.steps") {
          expected[name] = value;
        }
      }
    }
  });
  if (run.accelerator.is_main_process()) {
    accelerate::save_safetensors(expected, directory + "/expected.safetensors");
  }
  run.accelerator.wait_for_everyone();
  std::cout << "checkpoint_fixture: wrote " << directory << "/checkpoint" << std::endl;
  return 0;
}

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  auto x = a.contiguous();
  auto y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

int check(const std::string& directory) {
  at::set_num_threads(1);
  const auto expected = accelerate::load_safetensors(directory + "/expected.safetensors").tensors;
  const int64_t saved_world = expected.at("world_size").item<int64_t>();
  // One process taking the whole global batch the checkpoint was counted in.
  const auto batch = static_cast<size_t>(expected.at("data.global_batch_size").item<int64_t>());
  Training run(/*seed=*/99, batch);               // another seed: everything must come from the checkpoint
  run.train(2, [](int, const torch::Tensor&) {}); // and another state than the saved one
  run.accelerator.load_state(directory + "/checkpoint");
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::cerr << "checkpoint_fixture: " << directory << ": " << what << std::endl;
    ++failures;
  };
  const auto loaded = run.values("");
  for (const auto& [name, value] : loaded) {
    const auto want = expected.find(name);
    if (want == expected.end()) {
      fail("no expected value for " + name);
    } else if (!same_bytes(value, want->second)) {
      fail(name + " differs after load_state");
    }
  }
  torch::Tensor next;
  run.train(1, [&](int, const torch::Tensor& indices) { next = indices; });
  auto sorted = [](const torch::Tensor& indices) { return std::get<0>(indices.sort()); };
  if (!torch::equal(sorted(next), sorted(expected.at("next.batch")))) {
    fail("the next batch holds other samples than the run that saved the checkpoint took");
  }
  for (const auto& [name, value] : run.values("next.")) {
    const auto want = expected.find(name);
    if (want == expected.end()) {
      continue;
    }
    // Counters exactly; the one step's arithmetic to rounding, and only where it repeats the saved run's
    // processes (with more processes, the gradient is averaged in another order, with their own noise).
    if (name == "next.optimizer.lr" || name == "next.scheduler.steps") {
      if (!same_bytes(value, want->second)) {
        fail(name + " differs one step after load_state");
      }
    } else if (saved_world == 1 && !torch::allclose(value, want->second, 1e-6, 1e-7)) {
      fail(name + " differs one step after load_state");
    }
  }
  if (failures == 0) {
    std::cout << "checkpoint_fixture: " << directory << ": " << loaded.size()
              << " values and the next step match" << std::endl;
  }
  return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc == 3 ? argv[1] : "";
    if (mode == "write") {
      return write(argv[2]);
    }
    if (mode == "check") {
      return check(argv[2]);
    }
    std::cerr << "usage: checkpoint_fixture write|check <dir>" << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "checkpoint_fixture: error: " << error.what() << std::endl;
    return 1;
  }
}
