// The training program the tracking tests run (tracking_test.py): a small regression trained on a prepared
// loader, logging its mean-reduced loss, the learning rate, the step and, now and then, a text to the
// trackers
// `--log-with` names; the main process prints every value it logged (`logged <step> <name> <hex float>`) so
// the tests compare what the readers return with exactly what was written.
#include <accelerate/accelerate.h>

#include <torch/torch.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::vector<std::string> log_with;
  std::string project_dir; // empty: the option stays unset (ACCEL_PROJECT_DIR, else ./runs)
  std::string project = "run";
  int64_t dataset = 64;
  int64_t batch = 4; // per process
  int step_delay_ms = 0;
  int text_every = 3;     // log a text every k steps (0: never)
  bool progress = false;  // iterate the loader through accelerate::progress_bar
  int64_t bar_steps = -1; // >= 0: an accelerate::ProgressBar over this many steps, updated by hand
  int print_every = 0;    // accelerator.print a line at the start of every k-th step (0: never)
  bool bad_value = false; // also log a tensor that is not a number
  bool log_before_init = false;
  bool logger = false;                // print through accelerate::get_logger
  bool every_process_tracker = false; // register "every_process", a custom tracker run on every process
  std::string checkpoint;             // save_state here every `save_every` steps; a restart loads it
  int save_every = 0;
  int64_t crash_at_step = -1; // the first start (not a restart) exits 3 at this step, before training it
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> names;
  for (size_t start = 0; start < text.size();) {
    size_t comma = text.find(',', start);
    comma = comma == std::string::npos ? text.size() : comma;
    names.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

Args parse(int argc, char** argv) {
  Args args;
  const std::map<std::string, bool*> switches = {{"--progress", &args.progress},
                                                 {"--bad-value", &args.bad_value},
                                                 {"--log-before-init", &args.log_before_init},
                                                 {"--logger", &args.logger},
                                                 {"--every-process-tracker", &args.every_process_tracker}};
  const std::map<std::string, std::function<void(const std::string&)>> options = {
      {"--log-with", [&](const std::string& v) { args.log_with = split(v); }},
      {"--project-dir", [&](const std::string& v) { args.project_dir = v; }},
      {"--project", [&](const std::string& v) { args.project = v; }},
      {"--dataset", [&](const std::string& v) { args.dataset = std::stoll(v); }},
      {"--batch", [&](const std::string& v) { args.batch = std::stoll(v); }},
      {"--step-delay-ms", [&](const std::string& v) { args.step_delay_ms = std::stoi(v); }},
      {"--text-every", [&](const std::string& v) { args.text_every = std::stoi(v); }},
      {"--bar-steps", [&](const std::string& v) { args.bar_steps = std::stoll(v); }},
      {"--print-every", [&](const std::string& v) { args.print_every = std::stoi(v); }},
      {"--checkpoint", [&](const std::string& v) { args.checkpoint = v; }},
      {"--save-every", [&](const std::string& v) { args.save_every = std::stoi(v); }},
      {"--crash-at-step", [&](const std::string& v) { args.crash_at_step = std::stoll(v); }}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (auto found = switches.find(flag); found != switches.end()) {
      *found->second = true;
    } else if (auto option = options.find(flag); option != options.end() && i + 1 < argc) {
      option->second(argv[++i]);
    } else {
      throw std::invalid_argument("tracking_train: unknown flag or missing value: " + flag);
    }
  }
  return args;
}

struct Regression {
  explicit Regression(int64_t size) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
    x = at::randn({size, 8}, generator);
    y = (x.sum(1, true) * 0.5).sin();
  }
  std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<size_t>& indices) {
    auto index = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kInt64);
    return {x.index_select(0, index), y.index_select(0, index)};
  }
  size_t size() const { return static_cast<size_t>(x.size(0)); }
  torch::Tensor x, y;
};

/// The exact value, for the test to read back with float.fromhex.
std::string hex(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%a", value);
  return text;
}

/// A custom tracker that runs on every process: each call becomes a line of `calls.<process>.txt` in the
/// run's directory (`config name=value ...`, `log <step> name=value ...`, `finish`), numbers in hex.
class EveryProcessTracker : public accelerate::Tracker {
public:
  explicit EveryProcessTracker(const accelerate::TrackerRun& run) {
    for (size_t slash = run.directory.find('/', 1);; slash = run.directory.find('/', slash + 1)) {
      ::mkdir(run.directory.substr(0, slash).c_str(), 0755); // mkdir -p; an existing part is fine
      if (slash == std::string::npos) {
        break;
      }
    }
    const std::string path = run.directory + "/calls." + std::to_string(run.process_index) + ".txt";
    file_.open(path);
    if (!file_) {
      throw std::runtime_error("cannot write " + path);
    }
  }
  void store_init_configuration(const accelerate::TrackedValues& config) override { line("config", config); }
  void log(const accelerate::TrackedValues& values, std::optional<int64_t> step) override {
    line("log " + (step ? std::to_string(*step) : std::string("none")), values);
  }
  void finish() override { file_ << "finish\n" << std::flush; }

private:
  void line(const std::string& head, const accelerate::TrackedValues& values) {
    file_ << head;
    for (const auto& value : values) {
      file_ << " " << value.name << "=" << (value.is_number() ? hex(value.number()) : "text");
    }
    file_ << "\n" << std::flush;
  }
  std::ofstream file_;
};

int run(const Args& args) {
  at::set_num_threads(1);
  if (args.every_process_tracker) {
    accelerate::register_tracker(
        "every_process",
        [](const accelerate::TrackerRun& run) { return std::make_unique<EveryProcessTracker>(run); },
        /*main_process_only=*/false);
  }
  auto options = accelerate::AcceleratorOptions()
                     .cpu(true)
                     .init_timeout(std::chrono::seconds(20))
                     .log_with(args.log_with);
  if (!args.project_dir.empty()) {
    options.project_dir(args.project_dir);
  }
  accelerate::Accelerator accelerator(options);
  if (args.logger) {
    auto logger = accelerate::get_logger("tracking_train");
    logger.debug("a debug line");
    logger.info("an info line from the main process");
    logger.warning("a warning line");
    logger.on_every_process().info("an info line from process ", accelerator.process_index());
  }
  torch::manual_seed(0);
  auto model = torch::nn::Linear(8, 1);
  accelerator.prepare(model);
  const double lr = 0.05;
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), lr));
  auto loader =
      accelerator.prepare_data_loader(Regression(args.dataset), accelerate::DataLoaderOptions(args.batch));
  if (args.log_before_init) {
    accelerator.log({{"loss", 1.0}}, 0);
  }
  accelerator.init_trackers(args.project, {{"lr", lr},
                                           {"batch_size", args.batch},
                                           {"processes", accelerator.num_processes()},
                                           {"optimizer", "SGD"}});
  std::unique_ptr<accelerate::ProgressBar> bar;
  if (args.bar_steps >= 0) {
    bar = std::make_unique<accelerate::ProgressBar>(args.bar_steps, "steps");
  }
  int64_t step = 0;
  if (!args.checkpoint.empty()) {
    accelerator.register_counter("step", step);
    if (accelerate::restarted_with_checkpoint(args.checkpoint)) {
      accelerator.load_state(args.checkpoint); // after init_trackers: the trackers continue the saved run
      accelerator.print("resumed at step ", step);
    }
  }
  auto train_step = [&](const torch::Tensor& x, const torch::Tensor& y) {
    if (step == args.crash_at_step && !accelerate::is_restart()) {
      std::cerr << "tracking_train: crashing at step " << step << " as asked\n" << std::flush;
      std::_Exit(3);
    }
    if (args.print_every > 0 && step % args.print_every == 0) {
      accelerator.print("printed step ", step);
    }
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    accelerator.backward(loss);
    optimizer.step();
    // The mean over the processes, as a 0-d tensor: read by `log` itself, with no item() here.
    const auto mean_loss = accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN);
    accelerate::LogValues values = {{"loss", mean_loss}, {"lr", lr}, {"step_number", step}};
    if (args.text_every > 0 && step % args.text_every == 0) {
      values.push_back({"note", "step " + std::to_string(step) + ", \"quoted\" | piped"});
    }
    if (args.bad_value) {
      values.push_back({"not_a_number", torch::ones({2, 3})});
    }
    accelerator.log(values, step);
    if (accelerator.is_main_process()) {
      std::cout << "logged " << step << " loss " << hex(mean_loss.item<double>()) << "\n"
                << "logged " << step << " lr " << hex(lr) << "\n"
                << "logged " << step << " step_number " << hex(static_cast<double>(step)) << "\n"
                << std::flush;
    }
    ++step;
    if (args.save_every > 0 && !args.checkpoint.empty() && step % args.save_every == 0) {
      accelerator.save_state(args.checkpoint);
    }
    if (bar) {
      bar->update();
    }
    if (args.step_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(args.step_delay_ms));
    }
  };
  if (args.progress) {
    for (auto& [x, y] : accelerate::progress_bar(*loader, "epoch 0")) {
      train_step(x, y);
    }
  } else {
    for (auto& [x, y] : *loader) {
      train_step(x, y);
    }
  }
  if (bar) {
    bar->close();
  }
  accelerator.end_training();
  accelerator.print("done ", step, " steps");
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return run(parse(argc, argv));
}
