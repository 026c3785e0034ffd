// accel-test-program: the program `accel test` runs on the configured processes (as Accelerate's
// `accelerate test` runs its test_script.py). Each check runs on every process; the processes agree on each
// check's outcome (one all-reduce of the failure count), so a check that fails on one process fails on all
// and nobody is left waiting in a later collective. The main process prints one line per check and the
// verdict; the exit code is 0 only when every check passed on every process.
//
// The checks: the rendezvous (every process index once), every collective (gather, reduce SUM/MEAN/MAX,
// broadcast, pad_across_processes, split_between_processes, wait_for_everyone), the sharded data loader
// (every sample once per epoch, gather_for_metrics), the precision recipe (the forward's dtype under the
// autocast window accumulate opens), gradient synchronisation under the configured parallel strategy and
// accumulation (the prepared model after two optimizer steps against the same steps taken here on the whole
// global batch in float32), and a save_state/load_state round trip (a step taken after the load repeats, bit
// for bit, the step taken after the save).
#include <accelerate/accelerate.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <ftw.h>
#include <functional>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct Block : torch::nn::Module {
  Block(int64_t in, int64_t out, bool unit)
      : fc(register_module("fc", torch::nn::Linear(in, out))), unit(unit) {}
  torch::Tensor forward(torch::Tensor x) {
    auto body = [&](torch::Tensor x) { return torch::tanh(fc->forward(x)); };
    return unit ? accelerate::fsdp::unit(*this, x, body) : body(x);
  }
  torch::nn::Linear fc;
  bool unit;
};

/// Two fsdp units and a head: under `fsdp` each block's parameters exist whole only while it computes. The
/// reference computed here on one process, never prepared, runs its blocks as plain modules (`units` false).
struct Net : torch::nn::Module {
  explicit Net(bool units = true)
      : block1(register_module("block1", std::make_shared<Block>(8, 16, units))),
        block2(register_module("block2", std::make_shared<Block>(16, 16, units))),
        head(register_module("head", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return head->forward(block2->forward(block1->forward(x))); }
  std::shared_ptr<Block> block1, block2;
  torch::nn::Linear head;
};

/// Sample i: 8 features and a target, both a fixed function of i (the same on every process).
struct Samples : torch::data::datasets::Dataset<Samples> {
  explicit Samples(size_t size) : size_(size) {}
  torch::data::Example<> get(size_t index) override {
    auto generator = at::detail::createCPUGenerator(1000 + index);
    auto data = at::randn({8}, generator);
    return {data,
            torch::stack({data.sum().sin(), torch::tensor(static_cast<double>(index)).to(torch::kFloat)})};
  }
  std::optional<size_t> size() const override { return size_; }
  size_t size_;
};

/// What the running check found wrong on this process. A failed expectation is recorded, not thrown: the
/// check goes on, so every process runs every collective of the check in the same order whatever it found (a
/// process that left a check early would pair its next collective with another's and both would wait).
std::vector<std::string> found_wrong;

/// Records `what` (what was expected and what came instead) when `condition` does not hold.
void expect(bool condition, const std::string& what) {
  if (!condition) {
    found_wrong.push_back(what);
  }
}

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string values_of(const torch::Tensor& tensor) {
  std::ostringstream out;
  auto flat = tensor.to(torch::kDouble).cpu().reshape({-1});
  out << "[";
  for (int64_t i = 0; i < flat.numel(); ++i) {
    out << (i ? ", " : "") << flat[i].item<double>();
  }
  out << "]";
  return out.str();
}

class Checks {
public:
  explicit Checks(accelerate::Accelerator& accelerator) : accelerator_(accelerator) {}

  /// Runs `body` as the check `name` on this process, then agrees on its outcome with every process. The main
  /// process prints the line; a process whose own part failed prints its reason.
  void run(const std::string& name, const std::function<std::string()>& body) {
    std::string detail;
    std::string failure;
    found_wrong.clear();
    try {
      detail = body();
    } catch (const std::exception& error) {
      found_wrong.push_back(error.what());
    }
    for (const auto& what : found_wrong) {
      failure += (failure.empty() ? "" : "; ") + what;
    }
    int failed_here = failure.empty() ? 0 : 1;
    int failed_anywhere = failed_here;
    try {
      failed_anywhere = accelerator_.reduce(failed_here, accelerate::ReduceOp::SUM);
    } catch (const std::exception& error) {
      // The collective that agrees on the outcome broke: the process group itself is gone.
      std::cerr << "accel test: process " << accelerator_.process_index() << ": check '" << name
                << "': the processes could not agree on its outcome: " << error.what() << "\n";
      std::exit(1);
    }
    if (failed_here && !accelerator_.is_main_process()) { // the main process's reason is on its line below
      std::cerr << "accel test: process " << accelerator_.process_index() << ": check '" << name
                << "' failed: " << failure << "\n";
    }
    ++count_;
    if (failed_anywhere) {
      ++failed_;
    }
    if (accelerator_.is_main_process()) {
      std::string line = "accel test: " + name + std::string(name.size() < 26 ? 26 - name.size() : 1, ' ');
      if (failed_anywhere) {
        line += "FAILED on " + std::to_string(failed_anywhere) + " of " +
                std::to_string(accelerator_.num_processes()) + " processes" +
                (failed_here ? ": " + failure : "");
      } else {
        line += "ok" + (detail.empty() ? "" : " (" + detail + ")");
      }
      std::cout << line << std::endl;
    }
  }

  int count() const { return count_; }
  int failed() const { return failed_; }

private:
  accelerate::Accelerator& accelerator_;
  int count_ = 0;
  int failed_ = 0;
};

torch::TensorOptions float64_on(const accelerate::Accelerator& accelerator) {
  return torch::TensorOptions().dtype(torch::kDouble).device(accelerator.device());
}

std::string check_rendezvous(accelerate::Accelerator& accelerator) {
  const int n = accelerator.num_processes();
  const int index = accelerator.process_index();
  expect(index >= 0 && index < n,
         "process index " + std::to_string(index) + " is outside 0.." + std::to_string(n - 1));
  auto indices = accelerator.gather(torch::tensor({static_cast<double>(index)}, float64_on(accelerator)));
  auto sorted = std::get<0>(indices.cpu().sort());
  expect(sorted.equal(torch::arange(n, torch::kDouble)), "the processes' indices are " + values_of(indices) +
                                                             ", not each of 0.." + std::to_string(n - 1) +
                                                             " once");
  auto local = accelerator.gather(
      torch::tensor({static_cast<double>(accelerator.local_process_index())}, float64_on(accelerator)));
  int machines = static_cast<int>((local.cpu() == 0).sum().item<int64_t>());
  return std::to_string(n) + " process" + (n == 1 ? "" : "es") + " on " + std::to_string(machines) +
         " machine" + (machines == 1 ? "" : "s") + ", device " + accelerator.device().str();
}

/// `ACCEL_TEST_FAULT=reduce` makes process 1 see the collectives check's reduces one too high, as a transport
/// that corrupts data would: how to see (and test) that a failing check fails the run.
bool reduce_fault(const accelerate::Accelerator& accelerator) {
  const char* fault = std::getenv("ACCEL_TEST_FAULT");
  return fault && std::string(fault) == "reduce" && accelerator.process_index() == 1;
}

std::string check_collectives(accelerate::Accelerator& accelerator) {
  const int n = accelerator.num_processes();
  const double fault = reduce_fault(accelerator) ? 1.0 : 0.0;
  const double r = accelerator.process_index();
  const auto options = float64_on(accelerator);
  // gather: process r gives [10r, 10r + 1].
  auto gathered = accelerator.gather(torch::tensor({10 * r, 10 * r + 1}, options)).cpu();
  std::vector<double> expected;
  for (int k = 0; k < n; ++k) {
    expected.push_back(10.0 * k);
    expected.push_back(10.0 * k + 1);
  }
  expect(gathered.equal(torch::tensor(expected, torch::kDouble)),
         "gather gave " + values_of(gathered) + ", expected " + values_of(torch::tensor(expected)));
  // reduce: every process gives r + 1 (small integers: exact in float64 whatever the order of the sum).
  const double sum = n * (n + 1) / 2.0;
  auto value = torch::tensor({r + 1}, options);
  auto reduced_sum = accelerator.reduce(value.clone(), accelerate::ReduceOp::SUM).item<double>() + fault;
  expect(reduced_sum == sum, "reduce SUM gave " + text(reduced_sum) + ", expected " + text(sum));
  auto reduced_mean = accelerator.reduce(value.clone(), accelerate::ReduceOp::MEAN).item<double>() + fault;
  expect(reduced_mean == sum / n, "reduce MEAN gave " + text(reduced_mean) + ", expected " + text(sum / n));
  auto reduced_max = accelerator.reduce(value.clone(), accelerate::ReduceOp::MAX).item<double>() + fault;
  expect(reduced_max == n, "reduce MAX gave " + text(reduced_max) + ", expected " + std::to_string(n));
  // broadcast from the last process.
  auto broadcast = accelerator.broadcast(torch::tensor({r, -r}, options), n - 1).cpu();
  expect(broadcast.equal(torch::tensor({n - 1.0, 1.0 - n}, torch::kDouble)),
         "broadcast from process " + std::to_string(n - 1) + " gave " + values_of(broadcast));
  // pad_across_processes: process r has r + 1 rows; every process gets n rows, padded with -1.
  auto rows = torch::full({static_cast<int64_t>(r) + 1, 2}, r, options);
  auto padded = accelerator.pad_across_processes(rows, 0, -1).cpu();
  expect(padded.size(0) == n && padded.size(1) == 2, "pad_across_processes gave shape " +
                                                         c10::str(padded.sizes()) + ", expected [" +
                                                         std::to_string(n) + ", 2]");
  expect(padded.narrow(0, 0, static_cast<int64_t>(r) + 1).eq(r).all().item<bool>() &&
             padded.narrow(0, static_cast<int64_t>(r) + 1, n - static_cast<int64_t>(r) - 1)
                 .eq(-1)
                 .all()
                 .item<bool>(),
         "pad_across_processes gave " + values_of(padded));
  // split_between_processes: 2n + 1 items, each in exactly one share.
  std::vector<int> items(static_cast<size_t>(2 * n + 1));
  std::iota(items.begin(), items.end(), 0);
  auto share = accelerator.split_between_processes(items);
  auto mine = torch::zeros({2 * n + 1}, options);
  for (int item : share) {
    mine[item] += 1;
  }
  auto counted = accelerator.reduce(mine, accelerate::ReduceOp::SUM).cpu();
  expect(counted.eq(1).all().item<bool>(),
         "split_between_processes gave the items these counts across processes: " + values_of(counted));
  accelerator.wait_for_everyone();
  return "gather, reduce sum/mean/max, broadcast, pad_across_processes, split_between_processes, "
         "wait_for_everyone";
}

std::string check_data_loader(accelerate::Accelerator& accelerator) {
  const int n = accelerator.num_processes();
  const int64_t samples = 4 * n + 2; // the last global batch is short: even_batches pads it
  auto loader = accelerator.prepare_data_loader(
      Samples(static_cast<size_t>(samples)).map(torch::data::transforms::Stack<>()),
      accelerate::DataLoaderOptions(2));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<torch::Tensor> seen;
    for (auto& batch : *loader) {
      seen.push_back(accelerator.gather_for_metrics(batch.target.select(1, 1).contiguous()).cpu());
    }
    auto all = std::get<0>(torch::cat(seen).to(torch::kDouble).sort());
    expect(all.equal(torch::arange(samples, torch::kDouble)),
           "epoch " + std::to_string(epoch) + ": gather_for_metrics over the loader gave the samples " +
               values_of(all) + ", expected each of 0.." + std::to_string(samples - 1) + " once");
  }
  return std::to_string(samples) + " samples, each once per epoch over 2 epochs";
}

std::string check_precision(accelerate::Accelerator& accelerator,
                            const std::function<torch::Tensor(torch::Tensor)>& forward) {
  const std::string& precision = accelerator.mixed_precision();
  torch::Dtype expected = torch::kFloat;
  if (precision == "fp16") {
    expected = torch::kHalf;
  } else if (precision == "bf16" || precision == "fp8") {
    expected = torch::kBFloat16;
  }
  torch::Tensor out;
  {
    // autocast(), the window accumulate opens, without counting a micro-step.
    auto autocast = accelerator.autocast();
    torch::NoGradGuard no_grad;
    out = forward(torch::ones({2, 8}, torch::TensorOptions().device(accelerator.device())));
  }
  expect(out.scalar_type() == expected,
         "mixed_precision '" + precision + "': the forward under autocast gave " +
             std::string(c10::toString(out.scalar_type())) + ", expected " + c10::toString(expected));
  return "mixed_precision " + precision + ": the forward computes in " + c10::toString(expected);
}

/// The model's parameters, whole, as float64 on the CPU, in the order of named_parameters.
torch::Tensor flat_parameters(accelerate::Accelerator& accelerator, Net& model) {
  auto unshard = accelerator.unshard(model);
  std::vector<torch::Tensor> parts;
  for (const auto& parameter : model.parameters()) {
    parts.push_back(parameter.detach().to(torch::kCPU, torch::kDouble).reshape({-1}));
  }
  return torch::cat(parts);
}

/// Two SGD steps on the whole global batch, in float32 on the CPU, from `initial`: what the prepared model
/// must reach whatever the strategy.
torch::Tensor reference_steps(const torch::Tensor& initial, const std::vector<torch::Tensor>& data,
                              const std::vector<torch::Tensor>& targets, double lr) {
  auto reference = std::make_shared<Net>(/*units=*/false);
  {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (auto& parameter : reference->parameters()) {
      parameter.copy_(initial.narrow(0, offset, parameter.numel()).view_as(parameter));
      offset += parameter.numel();
    }
  }
  torch::optim::SGD optimizer(reference->parameters(), torch::optim::SGDOptions(lr));
  for (size_t step = 0; step < data.size(); ++step) {
    optimizer.zero_grad();
    torch::mse_loss(reference->forward(data[step]), targets[step]).backward();
    optimizer.step();
  }
  std::vector<torch::Tensor> parts;
  for (const auto& parameter : reference->parameters()) {
    parts.push_back(parameter.detach().to(torch::kDouble).reshape({-1}));
  }
  return torch::cat(parts);
}

/// Removes the folder `path` and everything in it, over POSIX: the PyPI libtorch exports its own copy of
/// std::filesystem, whose remove_all crashes in a program linked against it.
void remove_tree(const std::string& path) {
  nftw(
      path.c_str(), [](const char* entry, const struct stat*, int, struct FTW*) { return ::remove(entry); },
      16, FTW_DEPTH | FTW_PHYS);
}

} // namespace

int main() {
  std::unique_ptr<accelerate::Accelerator> accelerator_holder;
  try {
    accelerator_holder = std::make_unique<accelerate::Accelerator>();
  } catch (const std::exception& error) {
    std::cerr << "accel test: the accelerator could not start: " << error.what() << "\n";
    return 1;
  }
  auto& accelerator = *accelerator_holder;
  const int n = accelerator.num_processes();
  const int rank = accelerator.process_index();
  const int accumulation = accelerator.gradient_accumulation_steps();
  if (accelerator.is_main_process()) {
    std::cout << "accel test: running the checks on " << n << " process" << (n == 1 ? "" : "es") << std::endl;
  }
  Checks checks(accelerator);
  checks.run("rendezvous", [&] { return check_rendezvous(accelerator); });
  checks.run("collectives", [&] { return check_collectives(accelerator); });
  checks.run("data loader", [&] { return check_data_loader(accelerator); });

  // The model: the same initial weights on every process (seeded), prepared under the configured strategy.
  torch::manual_seed(0);
  auto model = std::make_shared<Net>();
  torch::Tensor initial;
  {
    std::vector<torch::Tensor> parts;
    for (const auto& parameter : model->parameters()) {
      parts.push_back(parameter.detach().to(torch::kFloat).reshape({-1}).clone());
    }
    initial = torch::cat(parts);
  }
  constexpr double kLr = 0.1;
  std::optional<accelerate::Optimizer> optimizer;
  std::string strategy;
  checks.run("strategy", [&] {
    accelerator.prepare(*model);
    optimizer.emplace(
        accelerator.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(kLr))));
    std::istringstream state(accelerator.state());
    std::string line;
    // One process has nothing to synchronise; several without a sharded strategy run DDP.
    std::string described = accelerator.num_processes() == 1 ? "one process: no parallel strategy" : "ddp";
    while (std::getline(state, line)) {
      if (line.rfind("zero:", 0) == 0 || line.rfind("fsdp:", 0) == 0) {
        described = line;
      }
    }
    strategy = described.substr(0, described.find(':'));
    return described;
  });
  if (!optimizer) {
    if (accelerator.is_main_process()) {
      std::cout << "accel test: FAILED: the model could not be prepared, so the training checks did not run"
                << std::endl;
    }
    return 1;
  }
  checks.run("mixed precision", [&] {
    return check_precision(accelerator, [&](torch::Tensor x) { return model->forward(x); });
  });

  // Gradient synchronisation: each process takes its own rows of each micro-batch; the global batch of an
  // optimizer step is every process's rows of every micro-batch.
  constexpr int kSteps = 2;
  constexpr int64_t kRows = 4; // per process per micro-batch
  checks.run("gradient synchronisation", [&] {
    std::vector<torch::Tensor> global_data, global_targets;
    for (int step = 0; step < kSteps; ++step) {
      auto generator = at::detail::createCPUGenerator(77 + step);
      const int64_t rows = kRows * n * accumulation;
      global_data.push_back(at::randn({rows, 8}, generator));
      global_targets.push_back(at::randn({rows, 1}, generator));
    }
    for (int step = 0; step < kSteps; ++step) {
      for (int micro = 0; micro < accumulation; ++micro) {
        auto step_guard = accelerator.accumulate(*model);
        const int64_t first = (static_cast<int64_t>(micro) * n + rank) * kRows;
        auto x = global_data[step].narrow(0, first, kRows).to(accelerator.device());
        auto y = global_targets[step].narrow(0, first, kRows).to(accelerator.device());
        auto loss = torch::mse_loss(model->forward(x).to(torch::kFloat), y);
        accelerator.backward(loss);
        optimizer->step();
        optimizer->zero_grad();
      }
    }
    // Each process's global batch, ordered as the processes' micro-batches were laid out: row blocks
    // (micro, rank). Mean loss over micro-batches of equal size is the mean over the global batch.
    auto expected = reference_steps(initial, global_data, global_targets, kLr);
    auto trained = flat_parameters(accelerator, *model);
    auto delta = expected - initial.to(torch::kDouble);
    // The error tolerated: float32 rounding (about 1e-6 of the update) under "no"; the rounding of the
    // forward in 16 bits (8 bits of mantissa for bf16: about 0.4% an operation) otherwise. A process that did
    // not synchronise trains on 1/n of the batch: its update is off by tens of percent.
    const double tolerance = accelerator.mixed_precision() == "no" ? 1e-3 : 5e-2;
    const double error = (trained - expected).norm().item<double>() / delta.norm().item<double>();
    expect(error <= tolerance, "after " + std::to_string(kSteps) + " optimizer steps the parameters are " +
                                   text(error * 100) +
                                   "% of the update away from the same steps on the whole "
                                   "batch on one process (tolerated: " +
                                   text(tolerance * 100) + "%)");
    auto same = accelerator.broadcast(trained.to(accelerator.device()), 0).cpu();
    expect(same.equal(trained), "the processes' parameters differ after the steps: their copies went apart");
    std::ostringstream detail;
    detail << kSteps << " steps of " << accumulation << " micro-batch" << (accumulation == 1 ? "" : "es")
           << " on " << n << " process" << (n == 1 ? "" : "es") << ", " << std::setprecision(2) << error * 100
           << "% of the update from one process on the whole batch";
    return detail.str();
  });

  // Checkpoint: save, step, load, step again: the two steps after the save must agree bit for bit.
  checks.run("save and load", [&] {
    std::string directory;
    torch::Tensor name_bytes = torch::zeros({1}, torch::kInt64);
    if (accelerator.is_main_process()) {
      const char* base = std::getenv("TMPDIR");
      std::string pattern = std::string(base && *base ? base : "/tmp") + "/accel-test-XXXXXX";
      std::vector<char> buffer(pattern.begin(), pattern.end());
      buffer.push_back('\0');
      if (mkdtemp(buffer.data())) {
        directory = buffer.data();
      } else {
        // Every process learns the empty name below and skips the round trip with this reason.
        expect(false,
               "cannot create a folder for the checkpoint from " + pattern + ": " + std::strerror(errno));
      }
      name_bytes = torch::zeros({static_cast<int64_t>(directory.size()) + 1}, torch::kInt64);
      for (size_t i = 0; i < directory.size(); ++i) {
        name_bytes[static_cast<int64_t>(i)] = static_cast<int64_t>(static_cast<unsigned char>(directory[i]));
      }
    }
    // Every process learns the folder: its length, then its bytes.
    auto length =
        accelerator.broadcast(torch::tensor({name_bytes.numel()}, torch::kInt64).to(accelerator.device()), 0)
            .item<int64_t>();
    if (!accelerator.is_main_process()) {
      name_bytes = torch::zeros({length}, torch::kInt64);
    }
    name_bytes = accelerator.broadcast(name_bytes.to(accelerator.device()), 0).cpu();
    directory.clear();
    for (int64_t i = 0; i + 1 < length; ++i) {
      directory.push_back(static_cast<char>(name_bytes[i].item<int64_t>()));
    }
    auto one_step = [&] {
      auto generator = at::detail::createCPUGenerator(500 + rank);
      for (int micro = 0; micro < accumulation; ++micro) {
        auto step_guard = accelerator.accumulate(*model);
        auto x = at::randn({kRows, 8}, generator).to(accelerator.device());
        auto y = at::randn({kRows, 1}, generator).to(accelerator.device());
        accelerator.backward(torch::mse_loss(model->forward(x).to(torch::kFloat), y));
        optimizer->step();
        optimizer->zero_grad();
      }
    };
    std::string failure;
    try {
      if (directory.empty()) {
        return std::string("not run: the main process has no folder to save in");
      }
      accelerator.save_state(directory);
      auto saved = flat_parameters(accelerator, *model);
      one_step();
      auto after_first = flat_parameters(accelerator, *model);
      accelerator.load_state(directory);
      auto loaded = flat_parameters(accelerator, *model);
      one_step();
      auto after_second = flat_parameters(accelerator, *model);
      if (!loaded.equal(saved)) {
        failure = "load_state did not restore the parameters save_state saved";
      } else if (!after_second.equal(after_first)) {
        failure = "the step after load_state differs from the step after save_state (" +
                  text((after_second - after_first).abs().max().item<double>()) + " at most)";
      }
    } catch (const std::exception& error) {
      failure = error.what();
    }
    accelerator.wait_for_everyone();
    if (accelerator.is_main_process()) {
      remove_tree(directory);
    }
    expect(failure.empty(), failure);
    return std::string("save_state, a step, load_state, the same step: bit for bit");
  });

  const bool passed = checks.failed() == 0;
  if (accelerator.is_main_process()) {
    if (passed) {
      std::cout << "accel test: all " << checks.count() << " checks passed on " << n << " process"
                << (n == 1 ? "" : "es") << " (" << strategy << ", mixed_precision "
                << accelerator.mixed_precision()
                << "). Test is a success! You are ready for your distributed training!" << std::endl;
    } else {
      std::cout << "accel test: FAILED: " << checks.failed() << " of " << checks.count()
                << " checks failed (the lines above say which and why)" << std::endl;
    }
  }
  // Nobody leaves before the main process has printed the verdict: a process that ended first with exit 1
  // would have the launcher stop the others, the verdict unprinted.
  accelerator.wait_for_everyone();
  accelerator.end_training();
  return passed ? 0 : 1;
}
