// Accelerator: the one object a training program talks to, as in Hugging Face Accelerate.
#pragma once

#include <accelerate/data_options.h>
#include <accelerate/detail/loader_context.h>
#include <accelerate/gradient_state.h>
#include <accelerate/graphed_step.h>
#include <accelerate/optimizer.h>
#include <accelerate/options.h>
#include <accelerate/profiler.h>
#include <accelerate/progress.h>
#include <accelerate/scheduler.h>
#include <accelerate/tracking.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <torch/data/dataloader_options.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

namespace accelerate {

class Accelerator;

namespace detail {
struct AcceleratorState;
/// The runtime's internal state of `accelerator`, for the runtime's own components and tests.
AcceleratorState& internal_state(Accelerator& accelerator);
/// Around a line `Accelerator::print` writes: a progress bar drawn in place on the terminal is cleared first
/// and drawn again under the line, as tqdm's `write` does (runtime/tracking/progress.cpp).
void before_printed_line();
void after_printed_line();

template <typename T, typename = void> struct is_module_holder : std::false_type {};
template <typename T>
struct is_module_holder<T, std::void_t<typename T::ContainedType>>
    : std::is_base_of<torch::nn::ModuleHolder<typename T::ContainedType>, T> {};

template <typename T> struct is_module_pointer : std::false_type {};
template <typename M> struct is_module_pointer<std::shared_ptr<M>> : std::is_base_of<torch::nn::Module, M> {};

template <typename T>
inline constexpr bool is_model_v =
    std::is_base_of_v<torch::nn::Module, T> || is_module_holder<T>::value || is_module_pointer<T>::value;
template <typename T> inline constexpr bool is_optimizer_v = std::is_base_of_v<torch::optim::Optimizer, T>;
template <typename T> inline constexpr bool is_scheduler_v = std::is_base_of_v<torch::optim::LRScheduler, T>;

template <typename> inline constexpr bool unsupported_type = false;

template <typename Model> torch::nn::Module& module_of(Model& model) {
  if constexpr (std::is_base_of_v<torch::nn::Module, Model>) {
    return model;
  } else {
    return *model;
  }
}
} // namespace detail

template <typename Dataset> class DataLoader;

/// How the job is distributed, with Hugging Face Accelerate's names.
enum class DistributedType { NO, MULTI_CPU, MULTI_GPU };

/// Reduction for `Accelerator::reduce`.
enum class ReduceOp { SUM, MEAN, MAX };

/// The entry point of the runtime. Construct one per process, at the start of training: it resolves the
/// configuration (options > `ACCELERATE_*` environment > `ACCELERATE_CONFIG_FILE` > defaults), reads the
/// launcher's rank variables (torchrun, `accel launch`, Hugging Face's `accelerate launch`, mpirun, srun),
/// picks the device, and forms the process group when there is more than one process.
///
/// ```
/// accelerate::Accelerator accelerator;
/// auto model = std::make_shared<Net>();
/// accelerator.prepare(model);
/// auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 3e-4));
/// auto loader = accelerator.prepare_data_loader(dataset, torch::data::DataLoaderOptions(64));
/// for (auto& batch : *loader) {
///   auto step = accelerator.accumulate(model);
///   optimizer.zero_grad();
///   auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
///   accelerator.backward(loss);
///   optimizer.step();
/// }
/// ```
class Accelerator {
public:
  /// Joins the job's process group. One Accelerator built while another lives in the process shares its
  /// launch environment, device and process group (as Hugging Face's `AcceleratorState`), instead of opening
  /// a second TCPStore; its options may not ask for another device. The group shuts down with the last of
  /// them.
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions());
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  /// The process's accelerator (the first one built, while it lives), for code that was not handed one.
  /// Throws if none is alive.
  static Accelerator& current();

  // ---- Where this process stands --------------------------------------------------------------------
  /// The device this process trains on: `cuda:<local rank>` when CUDA is available, else the CPU.
  torch::Device device() const;
  int num_processes() const;
  int process_index() const;
  int local_process_index() const;
  bool is_main_process() const;
  bool is_local_main_process() const;
  DistributedType distributed_type() const;
  /// "no", "fp16", "bf16" or "fp8".
  const std::string& mixed_precision() const;
  int gradient_accumulation_steps() const;
  /// True on a micro-step whose gradients are synchronised and whose optimizer step is real.
  bool sync_gradients() const;
  const std::shared_ptr<GradientState>& gradient_state() const;
  /// The resolved configuration, one `key: value` per line, with where each value came from.
  std::string state() const;

  // ---- Preparing objects --------------------------------------------------------------------------------
  /// Prepares a model in place (module holder, `shared_ptr` or module): moves it to `device()`, broadcasts
  /// its parameters and buffers from the main process, and attaches gradient synchronisation (c10d's
  /// Reducer) when there is more than one process. Returns the model.
  template <typename Model, std::enable_if_t<detail::is_model_v<std::decay_t<Model>>, int> = 0>
  Model& prepare(Model& model) {
    prepare_model(detail::module_of(model));
    return model;
  }
  /// Prepares an optimizer. An rvalue is moved into the returned handle; an lvalue stays the caller's and
  /// the handle refers to it (so `torch::save(optimizer, ...)` of the caller's object keeps working).
  template <typename Opt, std::enable_if_t<detail::is_optimizer_v<std::decay_t<Opt>>, int> = 0>
  Optimizer prepare(Opt&& optimizer) {
    using Type = std::decay_t<Opt>;
    if constexpr (std::is_lvalue_reference_v<Opt>) {
      return prepare_optimizer(std::shared_ptr<torch::optim::Optimizer>(std::shared_ptr<void>(), &optimizer));
    } else {
      return prepare_optimizer(std::make_shared<Type>(std::move(optimizer)));
    }
  }
  /// Prepares a learning-rate scheduler: it steps once per real optimizer step (see `Scheduler`).
  template <typename Sched, std::enable_if_t<detail::is_scheduler_v<std::decay_t<Sched>>, int> = 0>
  Scheduler prepare(Sched&& scheduler) {
    using Type = std::decay_t<Sched>;
    if constexpr (std::is_lvalue_reference_v<Sched>) {
      return prepare_scheduler(
          std::shared_ptr<torch::optim::LRScheduler>(std::shared_ptr<void>(), &scheduler));
    } else {
      return prepare_scheduler(std::make_shared<Type>(std::move(scheduler)));
    }
  }
  /// Prepares several objects at once; returns a tuple of what each single `prepare` returns.
  template <typename First, typename Second, typename... Rest>
  auto prepare(First&& first, Second&& second, Rest&&... rest) {
    return std::tuple<decltype(prepare(std::forward<First>(first))),
                      decltype(prepare(std::forward<Second>(second))),
                      decltype(prepare(std::forward<Rest>(rest)))...>(prepare(std::forward<First>(first)),
                                                                      prepare(std::forward<Second>(second)),
                                                                      prepare(std::forward<Rest>(rest))...);
  }
  /// Catches everything `prepare` does not know, with a message instead of a template error cascade.
  template <typename T, std::enable_if_t<!detail::is_model_v<std::decay_t<T>> &&
                                             !detail::is_optimizer_v<std::decay_t<T>> &&
                                             !detail::is_scheduler_v<std::decay_t<T>>,
                                         int> = 0>
  void prepare(T&&) {
    static_assert(
        detail::unsupported_type<T>,
        "accelerate::Accelerator::prepare: unsupported object; pass a torch::nn::Module (holder, "
        "shared_ptr or module), a torch::optim::Optimizer or a torch::optim::LRScheduler. Data loaders "
        "are built from their dataset with prepare_data_loader(dataset, options).");
  }

  void prepare_model(torch::nn::Module& model);
  Optimizer prepare_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  Scheduler prepare_scheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler);

  /// A distributed data loader over a map-style dataset (anything with `get_batch(indices)` and `size()`,
  /// such as `MNIST(...).map(Stack<>())`): each process gets its share of every global batch, on `device()`.
  /// `DataLoaderOptions` converts from libtorch's options and adds `shuffle` (default true).
  /// Defined in <accelerate/data.h>.
  template <typename Dataset>
  std::unique_ptr<DataLoader<Dataset>> prepare_data_loader(Dataset dataset, DataLoaderOptions options = {});

  // ---- The training step --------------------------------------------------------------------------------
  /// Runs `loss.backward(gradient, retain_graph, create_graph)` with gradient synchronisation armed for
  /// every prepared model the loss reaches (skipped inside `no_sync` and on non-final accumulation
  /// micro-steps). Takes the arguments of `torch::Tensor::backward`: gradient, retain_graph, create_graph,
  /// inputs.
  void backward(const torch::Tensor& loss, const torch::Tensor& gradient = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                std::optional<at::TensorList> inputs = std::nullopt);

  /// Wraps one training step (a callable taking the batch's tensors and returning the loss) so that, with
  /// `AcceleratorOptions().cuda_graph(true)` on a CUDA device, it is captured once in a CUDA graph and
  /// replayed; otherwise it runs as written. See `GraphedStep` for what a replay does and does not repeat.
  ///
  /// ```
  /// auto train_step = accelerator.graphed_step([&](const torch::Tensor& data, const torch::Tensor& target) {
  ///   optimizer.zero_grad();
  ///   auto loss = torch::cross_entropy_loss(model->forward(data), target);
  ///   accelerator.backward(loss);
  ///   optimizer.step();
  ///   return loss;
  /// });
  /// for (auto& batch : *loader) {
  ///   auto loss = train_step(batch.data, batch.target);
  ///   scheduler.step();
  /// }
  /// ```
  template <typename Fn> GraphedStep<Fn> graphed_step(Fn step) {
    return GraphedStep<Fn>(*this, std::move(step));
  }

  /// RAII guard for one micro-step of gradient accumulation (keep it alive across forward, backward and
  /// step). The last micro-step of each window, or the last batch of a prepared loader, synchronises the
  /// gradients of the models named (all prepared models when none is named); as in Hugging Face Accelerate,
  /// a prepared model not named synchronises at every micro-step, and the optimizer steps only at the end of
  /// the window. With more than one process, a model named that was not prepared is refused
  /// (std::invalid_argument): its gradients would never be synchronised.
  class AccumulateGuard {
  public:
    AccumulateGuard(AccumulateGuard&& other) noexcept;
    AccumulateGuard(const AccumulateGuard&) = delete;
    AccumulateGuard& operator=(const AccumulateGuard&) = delete;
    AccumulateGuard& operator=(AccumulateGuard&&) = delete;
    ~AccumulateGuard();

  private:
    friend class Accelerator;
    explicit AccumulateGuard(Accelerator* accelerator) : accelerator_(accelerator) {}
    Accelerator* accelerator_;
  };
  template <typename... Models> [[nodiscard]] AccumulateGuard accumulate(Models&... models) {
    return begin_accumulate({&detail::module_of(models)...});
  }

  /// RAII guard: backward passes inside it do not synchronise the given models' gradients.
  class NoSyncGuard {
  public:
    NoSyncGuard(NoSyncGuard&& other) noexcept;
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;
    ~NoSyncGuard();

  private:
    friend class Accelerator;
    NoSyncGuard(Accelerator* accelerator, std::vector<torch::nn::Module*> models)
        : accelerator_(accelerator), models_(std::move(models)) {}
    Accelerator* accelerator_;
    std::vector<torch::nn::Module*> models_;
  };
  template <typename Model> [[nodiscard]] NoSyncGuard no_sync(Model& model) {
    return begin_no_sync({&detail::module_of(model)});
  }

  /// RAII guard: while it lives, every process holds the whole parameters of a prepared model, as FSDP's
  /// `summon_full_params` and Accelerate's `unshard` give them (for EMA copies, logging, evaluation). Under a
  /// strategy that shards parameters (parallel_strategy "fsdp") it gathers them, a collective that every
  /// process must enter, and on leaving writes each process's slice of them back into its shard (so changes
  /// made the same way on every process are kept) and frees what it gathered; otherwise it does nothing.
  class UnshardGuard {
  public:
    UnshardGuard(UnshardGuard&& other) noexcept;
    UnshardGuard(const UnshardGuard&) = delete;
    UnshardGuard& operator=(const UnshardGuard&) = delete;
    UnshardGuard& operator=(UnshardGuard&&) = delete;
    ~UnshardGuard();

  private:
    friend class Accelerator;
    explicit UnshardGuard(std::function<void()> restore) : restore_(std::move(restore)) {}
    std::function<void()> restore_;
  };
  template <typename Model> [[nodiscard]] UnshardGuard unshard(Model& model) {
    return begin_unshard(detail::module_of(model));
  }

  /// Clips the gradients' total norm to `max_norm` on the device (no host synchronisation) and returns the
  /// total norm before clipping, as a tensor.
  torch::Tensor clip_grad_norm_(const std::vector<torch::Tensor>& parameters, double max_norm,
                                double norm_type = 2.0);
  /// Clamps every gradient to [-clip_value, clip_value].
  void clip_grad_value_(const std::vector<torch::Tensor>& parameters, double clip_value);

  /// The model as the user built it (prepare works in place, so this is the model itself).
  template <typename Model> Model& unwrap_model(Model& model) { return model; }

  /// Seeds the CPU and every CUDA generator and the prepared loaders' sampler with `seed` (plus the process
  /// index when `device_specific`).
  void set_seed(uint64_t seed, bool device_specific = false);

  /// Drops the runtime's references to prepared objects and their gradient hooks, and releases cached
  /// device memory.
  void free_memory();

  // ---- Mixed precision ---------------------------------------------------------------------------------
  /// RAII guard: autocast on for code outside a training step (evaluation); the `accumulate` guard already
  /// opens it for training steps. Does nothing with mixed precision "no".
  class AutocastGuard {
  public:
    AutocastGuard(AutocastGuard&& other) noexcept;
    AutocastGuard(const AutocastGuard&) = delete;
    AutocastGuard& operator=(const AutocastGuard&) = delete;
    AutocastGuard& operator=(AutocastGuard&&) = delete;
    ~AutocastGuard();

  private:
    friend class Accelerator;
    explicit AutocastGuard(Accelerator* accelerator) : accelerator_(accelerator) {}
    Accelerator* accelerator_;
  };
  [[nodiscard]] AutocastGuard autocast();
  /// True when the last optimizer step was skipped by the fp16 grad scaler (inf/nan gradients).
  bool optimizer_step_was_skipped() const;

  // ---- Checkpoints -------------------------------------------------------------------------------------
  /// Saves everything needed to resume, collectively (every process calls it): models (unwrapped keys),
  /// optimizers, schedulers, step counters, each process's RNG states, the data position of every prepared
  /// loader, and every registered object. Written to a temporary directory, then renamed: a crash at any
  /// moment leaves the previous checkpoint loadable. Without a directory: `project_dir/checkpoints/
  /// checkpoint_<n>` (automatic naming), pruned to `total_limit`. Returns the directory written.
  std::string save_state(const std::string& directory = "");
  /// Loads what `save_state` wrote (collectively); without a directory, the latest automatic checkpoint.
  void load_state(const std::string& directory = "");
  /// Adds an object to what `save_state`/`load_state` cover: anything with
  /// `void save(torch::serialize::OutputArchive&) const` and `void load(torch::serialize::InputArchive&)`.
  template <typename T> void register_for_checkpointing(T& object) {
    register_checkpoint_entry([&object](torch::serialize::OutputArchive& archive) { object.save(archive); },
                              [&object](torch::serialize::InputArchive& archive) { object.load(archive); });
  }
  /// Adds an integer the loop counts with (a step or epoch index, the step a tracker logs at) to what
  /// `save_state`/`load_state` cover, under `name`: `load_state` sets it to the saved value, and registered
  /// after a `load_state` it takes the loaded value at once, so the order of the two calls does not matter. A
  /// name registered again replaces the earlier registration; a checkpoint without the name leaves the
  /// counter as it is. The counter must outlive every later `save_state`/`load_state`. `accel-rewrite`
  /// registers the step counters it writes or finds.
  template <typename Integer> void register_counter(const std::string& name, Integer& counter) {
    static_assert(std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>,
                  "register_counter takes an integer variable");
    register_counter_entry(
        name, [&counter] { return static_cast<std::int64_t>(counter); },
        [&counter](std::int64_t value) { counter = static_cast<Integer>(value); });
  }
  /// A progress bar's count, the same way: `load_state` puts the bar at the count it had when the checkpoint
  /// was saved (`ProgressBar::set_count`), so a resumed run's bar goes on from there instead of from 0.
  /// Unlike an integer, the bar may go first: a bar gone out of scope is saved at its last count.
  /// `accel-rewrite --progress-bar` registers the bars it writes over a step count.
  void register_counter(const std::string& name, ProgressBar& bar);
  /// Saves a model's weights (main process), as Accelerate's `save_model` does: `model.safetensors`
  /// (readable by Python's safetensors), or above `options.max_shard_size` (default 10GB) the shards
  /// `model-00001-of-0000N.safetensors` ... and `model.safetensors.index.json` (transformers' and
  /// Accelerate's `load_checkpoint_in_model` read them), plus a libtorch archive `model.pt` (Module::save's
  /// layout), in `directory`. Weight names are the module's named parameters and buffers. Every file is
  /// written and fsync'd under a temporary name before any is renamed into place, so a failed save leaves the
  /// previous one whole; a save replacing one of another shard count removes the files it no longer uses.
  /// Call it on every process: where parameters are sharded (parallel_strategy "fsdp", outside `unshard`) it
  /// is a collective that gathers them onto the main process one unit at a time; elsewhere the other
  /// processes return at once. `safe_serialization(false)` (pickle files) is refused.
  void save_model(const torch::nn::Module& model, const std::string& directory,
                  const SaveModelOptions& options = SaveModelOptions());

  // ---- Profiling ----------------------------------------------------------------------------------------
  /// Starts libtorch's profiler (Kineto) on this process, as Accelerate's `accelerator.profile(kwargs)`:
  /// the returned `Profiler` records until its `stop()`, stepped by `step()` through its schedule, and
  /// writes `<output_trace_dir>/profile_<process_index>.json` (<accelerate/profiler.h>). What `kwargs`
  /// leaves unset comes from the `profile_trace_dir` and `profile_schedule` settings. A bad activity or
  /// schedule, or a trace directory that cannot be made, throws `std::invalid_argument` naming it.
  [[nodiscard]] Profiler profile(const ProfileKwargs& kwargs = ProfileKwargs());

  // ---- Collectives --------------------------------------------------------------------------------------
  /// Concatenates `tensor` from every process along dimension 0 (same shape on every process).
  torch::Tensor gather(const torch::Tensor& tensor);
  /// `gather`, minus the samples `even_batches` padding duplicated at the end of a prepared loader.
  torch::Tensor gather_for_metrics(const torch::Tensor& tensor);
  /// Sum, mean or max of `tensor` over all processes (same shape everywhere).
  torch::Tensor reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::SUM);
  /// The same for a number (a sum or a count over this process's share of the data, a mean of its losses),
  /// reduced in float64 and returned as its own type: `accelerator.reduce(correct,
  /// accelerate::ReduceOp::SUM)`.
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  T reduce(T value, ReduceOp op = ReduceOp::SUM) {
    auto reduced = reduce(torch::tensor(static_cast<double>(value), torch::kFloat64), op);
    return static_cast<T>(reduced.template item<double>());
  }
  /// Pads `tensor` along `dim` to the largest size any process has, with `pad_index`.
  torch::Tensor pad_across_processes(const torch::Tensor& tensor, int64_t dim = 0, double pad_index = 0,
                                     bool pad_first = false);
  /// `tensor` as the process `from_process` has it.
  torch::Tensor broadcast(const torch::Tensor& tensor, int from_process = 0);
  /// Blocks until every process reaches this call.
  void wait_for_everyone();

  /// RAII guard: the main process runs the guarded block first, the others after it (e.g. a download).
  class MainProcessFirstGuard {
  public:
    MainProcessFirstGuard(MainProcessFirstGuard&& other) noexcept;
    MainProcessFirstGuard(const MainProcessFirstGuard&) = delete;
    MainProcessFirstGuard& operator=(const MainProcessFirstGuard&) = delete;
    MainProcessFirstGuard& operator=(MainProcessFirstGuard&&) = delete;
    ~MainProcessFirstGuard() noexcept(false);

  private:
    friend class Accelerator;
    MainProcessFirstGuard(Accelerator* accelerator, bool local);
    Accelerator* accelerator_;
    bool local_;
  };
  [[nodiscard]] MainProcessFirstGuard main_process_first();
  [[nodiscard]] MainProcessFirstGuard local_main_process_first();

  /// This process's contiguous share of `items` (the first processes get one more when it does not divide;
  /// with `apply_padding`, every process gets as many, the last item repeated).
  template <typename T>
  std::vector<T> split_between_processes(const std::vector<T>& items, bool apply_padding = false) {
    auto [begin, end] = share_of(static_cast<int64_t>(items.size()));
    std::vector<T> share(items.begin() + begin, items.begin() + end);
    const int64_t longest = (static_cast<int64_t>(items.size()) + num_processes() - 1) / num_processes();
    while (apply_padding && !items.empty() && static_cast<int64_t>(share.size()) < longest) {
      share.push_back(items.back());
    }
    return share;
  }
  torch::Tensor split_between_processes(const torch::Tensor& tensor, bool apply_padding = false);

  /// Prints on the main process only (`accelerator.print("loss ", loss.item<double>())`), as a `std::cout`
  /// line would: with std::cout's format (precision, `std::fixed`, ...), and manipulators among the arguments
  /// stay set on std::cout for what follows.
  template <typename... Args> void print(const Args&... args) {
    if (is_main_process()) {
      std::ostringstream line;
      line.copyfmt(std::cout);
      (line << ... << args);
      detail::before_printed_line();
      std::cout << line.str() << std::endl;
      detail::after_printed_line();
      std::cout.copyfmt(line);
    }
  }
  /// `stream` on the main process; on the others, a stream that discards what it is given. For output whose
  /// operands must run on every process: in `accelerator.main_process_stream(std::cout) << "lr " <<
  /// halve_lr(optimizer)`, every process halves its learning rate and only the main process prints.
  std::ostream& main_process_stream(std::ostream& stream);

  // ---- Experiment tracking (docs/tracking.md) -----------------------------------------------------------
  /// Starts the trackers `AcceleratorOptions().log_with({...})` names, as Accelerate's `init_trackers`: each
  /// writes under `project_dir/project_name` (`project_dir` from the options or `ACCEL_PROJECT_DIR`, else
  /// `./runs`) and stores `config`, the run's hyperparameters. Trackers run on the main process only, except
  /// one registered with `main_process_only` false. Call it on every process, before the loop. A name no
  /// tracker is registered as, or a tracker that cannot start (a directory it cannot write), is reported with
  /// the fix and left out: training goes on.
  ///
  /// ```
  /// accelerate::Accelerator accelerator(
  ///     accelerate::AcceleratorOptions().log_with({"tensorboard"}).project_dir("runs"));
  /// accelerator.init_trackers("mnist", {{"lr", 3e-4}, {"batch_size", 64}});
  /// for (...) {
  ///   ...
  ///   accelerator.log({{"loss", loss}}, step);   // runs/mnist/events.out.tfevents.*
  /// }
  /// accelerator.end_training();
  /// ```
  void init_trackers(const std::string& project_name, const LogValues& config = {});
  /// Hands `values` (numbers, 0-d tensors, texts) at `step` to every started tracker; does nothing on a
  /// process that runs none. A value that is not a number (a tensor of more than one element) is reported and
  /// left out, the others are logged; a `log` before `init_trackers` is reported once. A tracker whose write
  /// fails (a full disk) is reported once and left out from then on: training goes on.
  void log(const LogValues& values, std::optional<int64_t> step = std::nullopt);
  /// The tracker `log_with` named `name`, for what only it can do (`dynamic_cast` to its type). On a process
  /// where it does not run (not the main process, or it failed to start), a tracker that ignores every call.
  /// Throws std::invalid_argument when `log_with` does not name it.
  Tracker& get_tracker(const std::string& name);
  /// Finishes every started tracker (its files flushed and closed), as Accelerate's `end_training`.
  void end_training();

  /// Raises a flag on this process that `check_trigger` sees on every process (e.g. early stopping).
  void set_trigger();
  /// True on every process if any process called `set_trigger` since the last check; resets the flag.
  bool check_trigger();

private:
  void register_counter_entry(const std::string& name, std::function<std::int64_t()> get,
                              std::function<void(std::int64_t)> set);
  void register_checkpoint_entry(std::function<void(torch::serialize::OutputArchive&)> save,
                                 std::function<void(torch::serialize::InputArchive&)> load);
  AccumulateGuard begin_accumulate(std::vector<torch::nn::Module*> models);
  void end_accumulate();
  NoSyncGuard begin_no_sync(std::vector<torch::nn::Module*> models);
  UnshardGuard begin_unshard(torch::nn::Module& model);
  void end_no_sync(const std::vector<torch::nn::Module*>& models);
  /// [begin, end) of this process's share of `count` items.
  std::pair<int64_t, int64_t> share_of(int64_t count) const;

  /// What `prepare_data_loader` hands the loader it builds.
  detail::LoaderContext loader_context() const;

  friend detail::AcceleratorState& detail::internal_state(Accelerator& accelerator);
  std::unique_ptr<detail::AcceleratorState> state_;
};

} // namespace accelerate

#include <accelerate/data.h>
