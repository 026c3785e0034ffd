// The training program the profiler tests run (profile_test.py): a small regression on a prepared loader,
// profiled by `accelerator.profile(...)` and stepped once per optimizer step. Flags set the ProfileKwargs;
// what a flag leaves unset comes from the settings (ACCEL_PROFILE_DIR, ACCEL_PROFILE_SCHEDULE). The program
// prints `trace <path>` (where stop() wrote, empty for none) and `steps <n>`.
#include <accelerate/accelerate.h>

#include <torch/torch.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Args {
  int64_t steps = 8;
  std::optional<accelerate::ProfileSchedule> schedule;
  std::vector<std::string> activities;
  std::optional<std::string> trace_dir;
  bool memory = false;
  bool shapes = false;
  bool flops = false;
  bool cycle_files = false; // on_trace_ready writes each cycle to <trace dir>/cycle_<process>_<step>.json
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    comma = comma == std::string::npos ? text.size() : comma;
    parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--memory") {
      args.memory = true;
    } else if (flag == "--shapes") {
      args.shapes = true;
    } else if (flag == "--flops") {
      args.flops = true;
    } else if (flag == "--cycle-files") {
      args.cycle_files = true;
    } else if (flag == "--steps" && has_value) {
      args.steps = std::stoll(argv[++i]);
    } else if (flag == "--activities" && has_value) {
      args.activities = split(argv[++i]);
    } else if (flag == "--trace-dir" && has_value) {
      args.trace_dir = argv[++i];
    } else if (flag == "--schedule" && has_value) {
      // wait,warmup,active,repeat as ProfileKwargs().schedule_option takes them (checked by the runtime).
      const auto numbers = split(argv[++i]);
      accelerate::ProfileSchedule schedule;
      schedule.wait = std::stoi(numbers.at(0));
      schedule.warmup = std::stoi(numbers.at(1));
      schedule.active = std::stoi(numbers.at(2));
      schedule.repeat = numbers.size() > 3 ? std::stoi(numbers[3]) : 0;
      args.schedule = schedule;
    } else {
      throw std::invalid_argument("profile_train: unknown flag or missing value: " + flag);
    }
  }
  return args;
}

struct Regression : torch::data::datasets::Dataset<Regression> {
  torch::Tensor x = torch::linspace(-1, 1, 64).unsqueeze(1);
  torch::Tensor y = 3 * x + 1;
  torch::data::Example<> get(size_t i) override { return {x[i], y[i]}; }
  torch::optional<size_t> size() const override { return 64; }
};

} // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    accelerate::Accelerator accelerator;
    torch::manual_seed(0);
    auto model = torch::nn::Sequential(torch::nn::Linear(1, 16), torch::nn::ReLU(), torch::nn::Linear(16, 1));
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.05));
    auto loader = accelerator.prepare_data_loader(Regression().map(torch::data::transforms::Stack<>()),
                                                  torch::data::DataLoaderOptions(4));

    accelerate::ProfileKwargs kwargs;
    kwargs.activities(args.activities)
        .profile_memory(args.memory)
        .record_shapes(args.shapes)
        .with_flops(args.flops);
    if (args.schedule) {
      kwargs.schedule_option(*args.schedule);
    }
    if (args.trace_dir) {
      kwargs.output_trace_dir(*args.trace_dir);
    }
    if (args.cycle_files) {
      // Beside the trace stop() writes: <trace dir>/cycle_<process>_<step>.json.
      const int index = accelerator.process_index();
      kwargs.on_trace_ready([index](accelerate::Profiler& profiler) {
        const std::string& path = profiler.trace_path();
        profiler.export_chrome_trace(path.substr(0, path.rfind('/') + 1) + "cycle_" + std::to_string(index) +
                                     "_" + std::to_string(profiler.step_num()) + ".json");
      });
    }

    auto profiler = accelerator.profile(kwargs);
    int64_t step = 0;
    while (step < args.steps) {
      for (auto& batch : *loader) {
        if (step == args.steps) {
          break;
        }
        optimizer.zero_grad();
        auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
        accelerator.backward(loss);
        optimizer.step();
        profiler.step();
        ++step;
      }
    }
    const std::string path = profiler.trace_path();
    profiler.stop();
    std::cout << "trace " << path << "\nsteps " << step << std::endl;
    return 0;
  } catch (const std::exception& error) {
    std::cerr << error.what() << std::endl;
    return 1;
  }
}
