// The Accelerator: configuration, device, process group, prepare, the synchronised backward, accumulation.
#include <accelerate/accelerator.h>

#include "accelerator/activation_checkpoint.h"
#include "accelerator/backward.h"
#include "accelerator/debug_mode.h"
#include "accelerator/estimate_memory.h"
#include "accelerator/optimizer_state.h"
#include "accelerator/state.h"
#include "data/dispatch.h"
#include "parallel/comm_hook.h"
#include "parallel/engine.h"
#include "precision/precision.h"
#include "transport/device.h"
#include "transport/hang_watch.h"
#include "transport/process_group.h"
#include "transport/shm_allreduce.h"
#include "watch/stacks.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unistd.h>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

namespace accelerate {
namespace detail {

/// The runtime-internal part of AcceleratorState that only this file touches.
struct TrainingState {
  std::shared_ptr<BackwardTracker> tracker = std::make_shared<BackwardTracker>();
  ReachAnalysis reach;
  std::shared_ptr<JoinCoordinator> join;
  /// The prepared models the open `accumulate` guard names: they synchronise only at the end of its window.
  /// Empty: every prepared model does.
  std::vector<PreparedModel*> accumulating;
};

AcceleratorState& internal_state(Accelerator& accelerator) {
  return *accelerator.state_;
}

} // namespace detail

namespace {

std::atomic<Accelerator*> current_accelerator{nullptr};

/// True while a loader this accelerator prepared is alive: with more than one process, each reads its share.
bool shards_data(const detail::LoaderRegistry& loaders) {
  return std::any_of(loaders.cores.begin(), loaders.cores.end(),
                     [](const auto& core) { return !core.expired(); });
}

/// The process's shared state while some Accelerator holds it.
std::mutex process_state_mutex;
std::weak_ptr<detail::ProcessState> process_state;

/// The process's shared state: the one alive, checked against what `config` asks for, or a new one.
std::shared_ptr<detail::ProcessState> acquire_process_state(const detail::ResolvedConfig& config) {
  std::lock_guard<std::mutex> lock(process_state_mutex);
  auto environment = detail::discover_launch_environment();
  if (!config.run_id.empty()) {
    environment.run_id = config.run_id;
  }
  const bool use_cpu = config.cpu || !torch::cuda::is_available();
  const torch::Device device =
      use_cpu ? torch::Device(torch::kCPU)
              : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(environment.local_rank));
  if (auto shared = process_state.lock()) {
    if (shared->device != device) {
      throw std::invalid_argument(
          "accelerate::Accelerator: another Accelerator of this process trains on " + shared->device.str() +
          ", and this one's options ask for " + device.str() +
          "; every Accelerator of a process shares one device and process group (as Hugging Face's "
          "AcceleratorState): give them the same cpu() option, or reach the first one with "
          "accelerate::Accelerator::current()");
    }
    return shared;
  }
  auto created = std::make_shared<detail::ProcessState>();
  created->environment = std::move(environment);
  created->device = device;
  if (device.is_cuda()) {
    detail::set_current_cuda_device(device.index());
  }
  // `kill -USR2 <pid>` prints where the process is, launched or not (the heartbeat says so to watchers).
  watch::install_stack_report("process " + std::to_string(created->environment.rank) + " (pid " +
                              std::to_string(::getpid()) + ")");
  if (created->environment.world_size > 1) {
    created->process_group =
        detail::create_process_group(created->environment, device, config.timeout, config.debug);
    // libtorch starts each process's CPU generator from a seed of its own, so an unseeded program would draw
    // different data, targets or noise on every process; they continue from process 0's state instead, as
    // one run of the program draws one set. A configured seed is then set by each Accelerator.
    detail::agree_on_random_state(created->process_group, device);
    detail::start_hang_watch(created->environment, config.hang_timeout);
  }
  process_state = created;
  return created;
}

/// What ends a process whose exception nobody caught: one line naming the process, the exception's type and
/// its message (c10 errors without their backtrace), then abort() as before. Replaces libstdc++'s "terminate
/// called after throwing an instance of ..." only; a handler the program installed itself stays.
[[noreturn]] void report_uncaught_exception() {
  std::string type = "an exception";
  std::string message;
  if (auto exception = std::current_exception()) {
#if defined(__GLIBCXX__)
    if (const std::type_info* info = abi::__cxa_current_exception_type()) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info->name(), nullptr, nullptr, &status);
      type = status == 0 && demangled != nullptr ? demangled : info->name();
      std::free(demangled);
    }
#endif
    try {
      std::rethrow_exception(exception);
    } catch (const c10::Error& error) {
      message = error.what_without_backtrace();
    } catch (const std::exception& error) {
      message = error.what();
    } catch (...) {
      message = "(not derived from std::exception: no message)";
    }
  } else {
    type.clear();
  }
  const char* rank = std::getenv("RANK");
  const std::string process = rank != nullptr ? std::string("process ") + rank : std::string("the process");
  if (type.empty()) {
    std::fprintf(stderr, "accelerate: %s stopped: std::terminate() was called with no exception in flight\n",
                 process.c_str());
  } else {
    std::fprintf(
        stderr,
        "accelerate: %s stopped on an exception nothing caught (%s): %s\n"
        "accelerate: the message above is the cause; catch the exception in the program to handle it "
        "(accel launch stops the other processes)\n",
        process.c_str(), type.c_str(), message.c_str());
  }
  std::fflush(stderr);
  std::abort();
}

/// Puts report_uncaught_exception() in place of the standard library's verbose handler, once per process.
void install_uncaught_exception_report() {
#if defined(__GLIBCXX__)
  static std::once_flag installed;
  std::call_once(installed, [] {
    if (std::get_terminate() == &__gnu_cxx::__verbose_terminate_handler) {
      std::set_terminate(&report_uncaught_exception);
    }
  });
#endif
}

} // namespace

namespace {

/// Builds the parallel strategy over the process group (and, with activation checkpointing under a strategy
/// that takes no unit calls, its unit host; with several processes, the join coordinator): at construction,
/// and again when the process group is replaced.
void install_strategy(detail::AcceleratorState& state) {
  const auto make_engine = detail::parallel_engine_factory(state.config.parallel_strategy);
  detail::ParallelContext context{
      state.device, state.process_group, state.config, state.training->tracker, {}};
  if (state.process_group) {
    context.machine_groups = [process = std::weak_ptr<detail::ProcessState>(state.process),
                              timeout = state.config.timeout,
                              debug = state.config.debug](const std::string& what) {
      auto shared = process.lock();
      if (!shared) {
        throw std::logic_error("accelerate: the process group is gone");
      }
      std::lock_guard<std::mutex> lock(shared->machine_groups_mutex);
      if (!shared->machine_groups) {
        shared->machine_groups = std::make_shared<detail::MachineGroups>(detail::create_machine_groups(
            shared->process_group, shared->environment, shared->device, timeout, debug, what));
      }
      return shared->machine_groups;
    };
  }
  const auto* host_before = fsdp::detail::active_host();
  state.engine = make_engine(context);
  // Under a strategy whose engine takes no unit calls (all but fsdp's sharding), activation checkpointing of
  // the unit-calling modules is a host of its own.
  if (state.config.activation_checkpointing && fsdp::detail::active_host() == host_before) {
    state.recomputed_units = std::make_shared<detail::RecomputedUnits>();
  }
  state.training->join = state.process_group
                             ? std::make_shared<detail::JoinCoordinator>(state.process_group, &state.models)
                             : nullptr;
}

/// The new Accelerator's state: its configuration resolved and checked, then the process's shared state.
std::unique_ptr<detail::AcceleratorState> make_state(const AcceleratorOptions& options) {
  install_uncaught_exception_report();
  auto config = detail::resolve_config(options);
  // An unknown strategy is refused before the process group forms (every process reads the same setting).
  detail::parallel_engine_factory(config.parallel_strategy);
  // So is an unknown gradient communication hook.
  detail::make_comm_hook(config.comm_hook);
  auto process = acquire_process_state(config);
  return std::make_unique<detail::AcceleratorState>(std::move(config), std::move(process));
}

} // namespace

Accelerator::Accelerator(AcceleratorOptions options) : state_(make_state(options)) {
  auto& state = *state_;
  state.gradient_state->accumulation_steps = state.config.gradient_accumulation_steps;
  state.precision = std::make_shared<detail::Precision>(state.config, state.device, state.process_group);
  if (state.precision->scaler() != nullptr) {
    // The fp16 grad scaler's scale and growth tracker are part of every checkpoint.
    auto precision = state.precision;
    register_checkpoint_entry(
        [precision](torch::serialize::OutputArchive& archive) { precision->save(archive); },
        [precision](torch::serialize::InputArchive& archive) { precision->load(archive); });
  }
  state.training = std::make_shared<detail::TrainingState>();
  install_strategy(state);
  if (state.config.seed) {
    set_seed(*state.config.seed);
  }
  // The first Accelerator alive is the process's: one built inside a helper while it lives does not take
  // over.
  Accelerator* none = nullptr;
  current_accelerator.compare_exchange_strong(none, this);
}

Accelerator::~Accelerator() {
  Accelerator* self = this;
  current_accelerator.compare_exchange_strong(self, nullptr);
  state_->models
      .clear(); // prepared models (Reducers) hold the process group: release them before it shuts down
  state_->engine.reset();
  std::shared_ptr<detail::ProcessState> process = state_->process;
  state_.reset();
  std::lock_guard<std::mutex> lock(process_state_mutex);
  process.reset(); // the last Accelerator of the process shuts the group down (~ProcessState)
}

namespace detail {
ProcessState::~ProcessState() {
  if (machine_groups) {
    machine_groups->machine->shutdown();
    machine_groups->replicas->shutdown();
  }
  if (process_group) {
    process_group->shutdown();
  }
}
} // namespace detail

namespace detail {
void replace_process_group(Accelerator& accelerator) {
  auto& state = internal_state(accelerator);
  accelerator.free_memory();
  if (!state.process_group) {
    return; // one process: nothing to replace
  }
  state.training->join.reset();
  state.recomputed_units.reset();
  state.engine.reset();
  std::lock_guard<std::mutex> lock(process_state_mutex);
  auto& process = *state.process;
  // The old groups are not shut down: a collective of theirs may still wait for a peer that left it; the
  // backends of such collectives are kept alive by transport/abandon.cpp, and the rest go with their last
  // reference.
  {
    std::lock_guard<std::mutex> machines(process.machine_groups_mutex);
    process.machine_groups.reset();
  }
  process.process_group =
      create_process_group(process.environment, process.device, state.config.timeout, state.config.debug);
  // The failed attempt drew a different count of random numbers on each process.
  agree_on_random_state(process.process_group, process.device);
  state.precision->use_process_group(process.process_group);
  install_strategy(state);
}
} // namespace detail

Accelerator& Accelerator::current() {
  Accelerator* accelerator = current_accelerator.load();
  if (accelerator == nullptr) {
    throw std::logic_error(
        "accelerate::Accelerator::current(): no Accelerator exists in this process; construct one first");
  }
  return *accelerator;
}

torch::Device Accelerator::device() const {
  return state_->device;
}
int Accelerator::num_processes() const {
  return state_->environment.world_size;
}
int Accelerator::process_index() const {
  return state_->environment.rank;
}
int Accelerator::local_process_index() const {
  return state_->environment.local_rank;
}
bool Accelerator::is_main_process() const {
  return process_index() == 0;
}
std::ostream& Accelerator::main_process_stream(std::ostream& stream) {
  if (is_main_process()) {
    return stream;
  }
  // No buffer: every write fails quietly (badbit), after its operands have been evaluated.
  thread_local std::ostream discard(nullptr);
  return discard;
}
bool Accelerator::is_local_main_process() const {
  return local_process_index() == 0;
}
const std::string& Accelerator::mixed_precision() const {
  return state_->config.mixed_precision;
}
int Accelerator::gradient_accumulation_steps() const {
  return state_->config.gradient_accumulation_steps;
}
bool Accelerator::sync_gradients() const {
  return state_->gradient_state->sync_gradients;
}
const std::shared_ptr<GradientState>& Accelerator::gradient_state() const {
  return state_->gradient_state;
}

DistributedType Accelerator::distributed_type() const {
  if (num_processes() == 1) {
    return DistributedType::NO;
  }
  return state_->device.is_cuda() ? DistributedType::MULTI_GPU : DistributedType::MULTI_CPU;
}

std::string Accelerator::state() const {
  const char* types[] = {"NO", "MULTI_CPU", "MULTI_GPU"};
  std::ostringstream out;
  out << "distributed_type: " << types[static_cast<int>(distributed_type())] << "\n"
      << "num_processes: " << num_processes() << "\n"
      << "process_index: " << process_index() << "\n"
      << "local_process_index: " << local_process_index() << "\n"
      << "device: " << state_->device << "\n"
      << "launcher: " << state_->environment.launcher << "\n";
  if (state_->process_group) {
    // Same-machine shared memory also means "ddp" averages gradients in one pass after backward
    // (parallel/ddp.cpp).
    out << "cpu_allreduce: "
        << (detail::uses_shared_memory_allreduce(state_->process_group->getBackend(c10::DeviceType::CPU))
                ? "shared_memory"
                : "gloo")
        << "\n";
  }
  if (auto strategy = state_->engine->describe(); !strategy.empty()) {
    out << strategy << "\n";
  }
  out << detail::describe(state_->config);
  return out.str();
}

detail::LoaderContext Accelerator::loader_context() const {
  if (!state_->config.even_batches && state_->engine->optimizer_sharding().shards_optimizer_state()) {
    // A process whose batches ran out would join (runtime/accelerator/backward.h), but under a sharded
    // strategy every process steps its own share of the parameters at every optimizer step.
    throw std::invalid_argument(
        "accelerate::Accelerator::prepare_data_loader: even_batches(false) lets processes run out of batches "
        "at "
        "different steps, but under parallel_strategy '" +
        state_->engine->name() +
        "' every process steps its share of the parameters at every optimizer step; keep even_batches(true) "
        "(the default), or use parallel_strategy 'ddp'");
  }
  detail::LoaderContext context;
  context.device = state_->device;
  context.num_processes = num_processes();
  context.process_index = process_index();
  context.even_batches = state_->config.even_batches;
  context.split_batches = state_->config.split_batches;
  context.non_blocking = state_->config.non_blocking;
  context.dispatch_batches = state_->config.dispatch_batches;
  if (context.dispatch_batches && state_->process_group) {
    context.dispatcher = detail::make_batch_dispatcher(state_->process_group, process_index());
  }
  if (context.device.is_cuda() && context.non_blocking) {
    context.copier = detail::make_side_stream_copier(context.device);
  }
  context.seed = state_->data_seed;
  context.gradient_state = state_->gradient_state;
  context.joiner = state_->training->join;
  context.registry = state_->loaders;
  return context;
}

void Accelerator::prepare_model(torch::nn::Module& model) {
  detail::report_model_for_memory_estimate(model); // under `accel estimate-memory`: counts and ends here
  auto& models = state_->models;
  if (std::any_of(models.begin(), models.end(), [&](const auto& m) { return &m->model() == &model; })) {
    throw std::invalid_argument("accelerate::Accelerator::prepare: model '" + model.name() +
                                "' was already prepared; prepare each model once");
  }
  auto prepared = state_->engine->prepare_model(model);
  state_->training->reach.add(prepared.get());
  models.push_back(std::move(prepared));
  state_->precision->prepare_model(model);
  if (state_->recomputed_units) {
    state_->recomputed_units->add_model(model);
  }
}

Optimizer Accelerator::prepare_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  if (!optimizer) {
    throw std::invalid_argument("accelerate::Accelerator::prepare: the optimizer is null");
  }
  for (const auto& prepared : state_->optimizers) {
    if (prepared->optimizer.get() == optimizer.get()) {
      throw std::invalid_argument(
          "accelerate::Accelerator::prepare: this optimizer was already prepared; keep "
          "the handle the first prepare returned");
    }
  }
  auto prepared = std::make_shared<detail::OptimizerState>();
  prepared->optimizer = std::move(optimizer);
  prepared->gradient_state = state_->gradient_state;
  prepared->tracker = state_->training->tracker;
  prepared->fused = detail::fused_kind_of(*prepared->optimizer);
  prepared->elementwise = detail::elementwise_kind_of(*prepared->optimizer);
  prepared->num_processes = num_processes();
  prepared->engine = state_->engine;
  prepared->clip_norm = state_->config.gradient_clipping;
  for (const auto& group : prepared->optimizer->param_groups()) {
    state_->training->reach.add_optimizer_parameters(group.params());
  }
  state_->engine->optimizer_sharding().prepare_optimizer(*prepared);
  state_->precision->attach(prepared);
  state_->optimizers.push_back(prepared);
  return Optimizer(prepared);
}

Scheduler Accelerator::prepare_scheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler) {
  if (!scheduler) {
    throw std::invalid_argument("accelerate::Accelerator::prepare: the scheduler is null");
  }
  auto prepared = std::make_shared<detail::SchedulerState>();
  prepared->scheduler = std::move(scheduler);
  prepared->gradient_state = state_->gradient_state;
  prepared->step_with_optimizer = state_->config.step_scheduler_with_optimizer;
  prepared->steps_per_optimizer_step =
      state_->config.scheduler_steps_per_process && !state_->config.split_batches ? num_processes() : 1;
  prepared->optimizer_steps_seen = state_->gradient_state->optimizer_steps;
  state_->precision->attach(*prepared);
  state_->schedulers.push_back(prepared);
  return Scheduler(prepared);
}

void Accelerator::backward(const torch::Tensor& loss, const torch::Tensor& gradient,
                           std::optional<bool> retain_graph, bool create_graph,
                           std::optional<at::TensorList> inputs) {
  if (state_->config.debug) {
    detail::debug_mode_before_backward(*state_); // every N steps: do the replicas still agree?
  }
  if (state_->config.cuda_graph && !state_->graphed_step_made && !state_->warned_cuda_graph_unused) {
    state_->warned_cuda_graph_unused = true;
    TORCH_WARN(
        "accelerate: cuda_graph(true) is set, but this backward runs in a step that no "
        "accelerator.graphed_step(...) wraps, so nothing is captured: only a step written as a callable "
        "and wrapped by graphed_step is captured and replayed (docs/runtime.md, \"CUDA graphs\"). "
        "(Warned once.)");
  }
  auto& training = *state_->training;
  auto& gradients = *state_->gradient_state;
  std::vector<detail::PreparedModel*> armed;
  // Mid-window (accumulate), only the prepared models the guard does not name synchronise.
  const auto& accumulating = training.accumulating;
  const bool window_ends = gradients.sync_gradients;
  auto window_synchronises = [&](detail::PreparedModel* model) {
    return !model->no_sync &&
           (window_ends || (!accumulating.empty() && std::find(accumulating.begin(), accumulating.end(),
                                                               model) == accumulating.end()));
  };
  auto synchronises = [&](detail::PreparedModel* model) {
    return model->synchronises_every_backward() || window_synchronises(model);
  };
  // A prepared model synchronises over its strategy's group: the job's, or with one process a group of one
  // (fsdp with fsdp_offload_params); without one there is nothing to arm.
  const bool grouped = std::any_of(state_->models.begin(), state_->models.end(),
                                   [](const auto& model) { return model->distributed(); });
  if (grouped && (window_ends || std::any_of(state_->models.begin(), state_->models.end(),
                                             [&](const auto& model) { return synchronises(model.get()); }))) {
    for (auto* model : training.reach.reached_by(loss, state_->config.find_unused_parameters)) {
      if (model->distributed() && synchronises(model)) {
        model->synchronising = window_synchronises(model);
        model->arm(loss);
        if (training.join) { // the job's processes (none with one process)
          training.join->record_armed(model);
        }
        armed.push_back(model);
      }
    }
  } else if (!grouped && state_->process_group && shards_data(*state_->loaders)) {
    // No prepared model synchronises, yet each process reads its own share: whatever this loss trains
    // would drift apart across the processes (a model the rewrite could not prepare, or one prepared by hand
    // and forgotten).
    training.reach.refuse_unsynchronised_training(loss);
  }
  auto differentiated = state_->precision->before_backward(loss);
  training.tracker->inside_accelerator_backward.store(true);
  try {
    differentiated.backward(gradient, retain_graph, create_graph, inputs);
  } catch (...) {
    training.tracker->inside_accelerator_backward.store(false);
    for (auto* model : armed) {
      model->disarm();
    }
    throw;
  }
  training.tracker->inside_accelerator_backward.store(false);
  for (auto* model : armed) {
    model->finish_backward();
  }
  ++gradients.backwards_since_step;
}

Accelerator::AccumulateGuard Accelerator::begin_accumulate(std::vector<torch::nn::Module*> models) {
  std::vector<detail::PreparedModel*> named;
  for (auto* module : models) {
    const auto found = std::find_if(state_->models.begin(), state_->models.end(),
                                    [&](const auto& prepared) { return &prepared->model() == module; });
    if (found == state_->models.end()) {
      if (!state_->process_group) {
        continue; // one process: nothing is synchronised, a model that was not prepared trains as it is
      }
      throw std::invalid_argument(
          "accelerate::Accelerator::accumulate: model '" + module->name() +
          "' was not prepared, so its gradients are not synchronised at the end of the window (nor at all); "
          "call accelerator.prepare(model) before the loop, or name the prepared model");
    }
    named.push_back(found->get());
  }
  state_->training->accumulating = std::move(named);
  auto& gradients = *state_->gradient_state;
  ++gradients.micro_steps_in_window;
  gradients.sync_gradients =
      gradients.micro_steps_in_window >= gradients.accumulation_steps || gradients.end_of_dataloader;
  state_->precision->begin_forward();
  return AccumulateGuard(this);
}

void Accelerator::end_accumulate() {
  state_->training->accumulating.clear();
  state_->precision->end_step();
  auto& gradients = *state_->gradient_state;
  if (gradients.sync_gradients) {
    gradients.micro_steps_in_window = 0;
  }
  gradients.sync_gradients = true;
}

Accelerator::AccumulateGuard::AccumulateGuard(AccumulateGuard&& other) noexcept
    : accelerator_(std::exchange(other.accelerator_, nullptr)) {}

Accelerator::AccumulateGuard::~AccumulateGuard() {
  if (accelerator_ != nullptr) {
    accelerator_->end_accumulate();
  }
}

Accelerator::NoSyncGuard Accelerator::begin_no_sync(std::vector<torch::nn::Module*> models) {
  for (auto* module : models) {
    for (auto& synchronizer : state_->models) {
      if (&synchronizer->model() == module) {
        synchronizer->no_sync = true;
      }
    }
  }
  return NoSyncGuard(this, std::move(models));
}

void Accelerator::end_no_sync(const std::vector<torch::nn::Module*>& models) {
  for (auto* module : models) {
    for (auto& synchronizer : state_->models) {
      if (&synchronizer->model() == module) {
        synchronizer->no_sync = false;
      }
    }
  }
}

Accelerator::NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : accelerator_(std::exchange(other.accelerator_, nullptr)), models_(std::move(other.models_)) {}

Accelerator::NoSyncGuard::~NoSyncGuard() {
  if (accelerator_ != nullptr) {
    accelerator_->end_no_sync(models_);
  }
}

Accelerator::UnshardGuard Accelerator::begin_unshard(torch::nn::Module& model) {
  const auto found = std::find_if(state_->models.begin(), state_->models.end(),
                                  [&](const auto& prepared) { return &prepared->model() == &model; });
  if (found == state_->models.end()) {
    throw std::invalid_argument("accelerate::Accelerator::unshard: model '" + model.name() +
                                "' was not prepared; unshard a model returned by accelerator.prepare");
  }
  return UnshardGuard(state_->engine->whole_model().gather_full_parameters(model));
}

Accelerator::UnshardGuard::UnshardGuard(UnshardGuard&& other) noexcept
    : restore_(std::exchange(other.restore_, nullptr)) {}

Accelerator::UnshardGuard::~UnshardGuard() {
  if (!restore_) {
    return;
  }
  try {
    restore_();
  } catch (const std::exception& error) {
    TORCH_WARN("accelerate: leaving accelerator.unshard(model) failed: ", error.what());
  }
}

torch::Tensor Accelerator::clip_grad_norm_(const std::vector<torch::Tensor>& parameters, double max_norm,
                                           double norm_type) {
  return detail::clip_gradient_norm(*state_->engine, *state_->precision, *state_->gradient_state, parameters,
                                    max_norm, norm_type);
}

void Accelerator::clip_grad_value_(const std::vector<torch::Tensor>& parameters, double clip_value) {
  torch::NoGradGuard no_grad;
  auto loss_scale = state_->precision->prepare_gradients_for_clipping(state_->gradient_state->sync_gradients);
  const double bound = clip_value * std::max(state_->gradient_state->micro_steps_in_window, 1);
  for (auto& gradient : state_->engine->gradient_norms().gradients(parameters)) {
    if (loss_scale) {
      auto scaled_bound = *loss_scale * bound;
      gradient.clamp_(-scaled_bound, scaled_bound);
    } else {
      gradient.clamp_(-bound, bound);
    }
  }
}

void Accelerator::set_seed(uint64_t seed, bool device_specific) {
  const uint64_t effective = seed + (device_specific ? static_cast<uint64_t>(process_index()) : 0);
  torch::manual_seed(effective); // the CPU generator and every CUDA generator
  state_->data_seed = seed;      // identical on every process: the loaders' shuffles must agree
  for (const auto& weak : state_->loaders->cores) {
    if (auto core = weak.lock()) {
      core->set_seed(seed);
    }
  }
}

void Accelerator::free_memory() {
  state_->training->reach.clear();
  state_->training->accumulating.clear();
  state_->models.clear();
  state_->optimizers.clear();
  state_->schedulers.clear();
  detail::empty_device_cache();
}

} // namespace accelerate
