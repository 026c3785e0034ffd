// `accel config`'s questions and the config they make (see ConfigQuestionnaire.h).
#include "ConfigQuestionnaire.h"

#include "ConfigSchema.h"
#include "ConfigValues.h"
#include "settings/spelling.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace accel {

// ------------------------------------------------------------------------------------------- Prompter

std::string Prompter::answer(const std::string& prompt) {
  out_ << prompt << std::flush;
  std::string line;
  if (!std::getline(in_, line))
    throw UsageError("the input ended before every question was answered (last question: " + prompt +
                     "...); answer each one, or use `accel config default`");
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  if (echoAnswers_)
    out_ << line << "\n";
  size_t first = line.find_first_not_of(" \t");
  size_t last = line.find_last_not_of(" \t");
  return first == std::string::npos ? "" : line.substr(first, last - first + 1);
}

void Prompter::note(const std::string& message) {
  out_ << message << "\n";
}

size_t Prompter::choose(const std::string& question, const std::vector<std::string>& options,
                        size_t defaultIndex) {
  out_ << question << "\n";
  for (size_t i = 0; i < options.size(); ++i)
    out_ << "  [" << i << "] " << options[i] << "\n";
  const std::string prompt = "Choose 0-" + std::to_string(options.size() - 1) + " or type the name [" +
                             std::to_string(defaultIndex) + "]: ";
  while (true) {
    std::string typed = answer(prompt);
    if (typed.empty())
      return defaultIndex;
    for (size_t i = 0; i < options.size(); ++i)
      if (typed == std::to_string(i) || canonicalValue(ValueRule::choice({options[i]}), typed))
        return i;
    note("Please enter a number from 0 to " + std::to_string(options.size() - 1) + ", or one of the names.");
  }
}

bool Prompter::yesNo(const std::string& question, bool defaultAnswer) {
  const std::string prompt = question + (defaultAnswer ? " [YES/no]: " : " [yes/NO]: ");
  while (true) {
    std::string typed = answer(prompt);
    if (typed.empty())
      return defaultAnswer;
    if (auto value = accelerate::spelling::boolean(typed))
      return *value;
    note("Please enter yes or no.");
  }
}

long long Prompter::wholeNumber(const std::string& question, long long defaultValue, long long min,
                                long long max) {
  const ValueRule rule = ValueRule::wholeNumber(min, max);
  const std::string prompt = question + " [" + std::to_string(defaultValue) + "]: ";
  while (true) {
    std::string typed = answer(prompt);
    if (typed.empty())
      return defaultValue;
    if (auto value = canonicalValue(rule, typed))
      return std::stoll(*value);
    note("Please enter " + rule.describe() + ".");
  }
}

double Prompter::number(const std::string& question, double defaultValue) {
  char shown[32];
  std::snprintf(shown, sizeof(shown), "%g", defaultValue);
  const std::string prompt = question + " [" + shown + "]: ";
  while (true) {
    std::string typed = answer(prompt);
    if (typed.empty())
      return defaultValue;
    if (auto value = canonicalValue(ValueRule::number(), typed))
      return std::stod(*value);
    note("Please enter " + ValueRule::number().describe() + ".");
  }
}

std::string Prompter::text(const std::string& question, const std::string& defaultValue) {
  const std::string prompt = question + (defaultValue.empty() ? ": " : " [" + defaultValue + "]: ");
  while (true) {
    std::string typed = answer(prompt);
    if (!typed.empty())
      return typed;
    if (!defaultValue.empty())
      return defaultValue;
    note("This one has no default: please enter a value.");
  }
}

// ------------------------------------------------------------------------------------------- questions

namespace {

/// What the answers so far decided; each ask* function reads what it needs and adds to it.
struct Answers {
  std::string distributedType = "NO";
  bool useCpu = false;
  long long numMachines = 1;
  ConfigValue config = ConfigValue::map();

  bool isMultiProcess() const { return distributedType == "MULTI_CPU" || distributedType == "MULTI_GPU"; }
};

void askComputeEnvironment(Prompter& prompter) {
  while (prompter.choose("In which compute environment are you running?",
                         {"This machine", "AWS (Amazon SageMaker)"}) != 0)
    prompter.note("accel launches on this machine (and others like it) only; SageMaker jobs are started by "
                  "Python Accelerate. Choose 0.");
}

void askMachineType(Prompter& prompter, Answers& answers) {
  static const std::vector<std::string> kTypes = {"NO", "MULTI_CPU", "MULTI_GPU"};
  answers.distributedType = kTypes[prompter.choose("Which type of machine are you using?",
                                                   {"No distributed training", "multi-CPU", "multi-GPU"})];
}

void askMachines(Prompter& prompter, Answers& answers) {
  answers.numMachines = prompter.wholeNumber("How many machines will you use (more than 1 for multi-node "
                                             "training)?",
                                             1, 1, INT_MAX);
  answers.config.set("num_machines", ConfigValue::number(answers.numMachines));
  if (answers.numMachines == 1)
    return;
  std::vector<std::string> ranks;
  for (long long rank = 0; rank < answers.numMachines; ++rank)
    ranks.push_back(std::to_string(rank));
  answers.config.set("machine_rank", ConfigValue::number(static_cast<long long>(
                                         prompter.choose("What is the rank of this machine?", ranks))));
  answers.config.set("main_process_ip", ConfigValue::string(prompter.text(
                                            "What is the IP address of the machine that will host the "
                                            "main process",
                                            "")));
  answers.config.set("main_process_port", ConfigValue::number(prompter.wholeNumber(
                                              "What port will the main process listen on (every "
                                              "machine uses the same)?",
                                              29500, 1, 65535)));
  bool sameNetwork =
      prompter.yesNo("Are all the machines on the same local network? Answer no if they are in the "
                     "cloud or on different networks",
                     true);
  answers.config.set("same_network", ConfigValue::boolean(sameNetwork));
  if (!sameNetwork)
    answers.config.set("rdzv_backend", ConfigValue::string(prompter.text(
                                           "Which rendezvous backend will you use (accel always uses "
                                           "a static TCPStore rendezvous at the main process)?",
                                           "static")));
}

void askCpuOnly(Prompter& prompter, Answers& answers) {
  if (answers.distributedType == "NO")
    answers.useCpu =
        prompter.yesNo("Do you want to run your training on CPU only (even if a GPU is available)?", false);
  else
    answers.useCpu = answers.distributedType == "MULTI_CPU";
  answers.config.set("use_cpu", ConfigValue::boolean(answers.useCpu));
}

void askNumProcesses(Prompter& prompter, Answers& answers) {
  long long processes = 1;
  if (answers.distributedType != "NO") {
    const std::string what = answers.distributedType == "MULTI_CPU" ? "processes" : "GPU(s)";
    const std::string scope = answers.numMachines > 1 ? " in total, over all machines" : "";
    while (true) {
      processes = prompter.wholeNumber(
          "How many " + what + " should be used for distributed training" + scope + "?", 1, 1, INT_MAX);
      if (processes % answers.numMachines != 0)
        prompter.note("Please enter a multiple of the number of machines (" +
                      std::to_string(answers.numMachines) + "): each runs the same number of processes.");
      else if (answers.distributedType == "MULTI_GPU" && answers.numMachines == 1 && processes == 1)
        prompter.note("multi-GPU on one machine needs at least 2 GPUs; for one, choose \"No distributed "
                      "training\" instead.");
      else
        break;
    }
  }
  answers.config.set("num_processes", ConfigValue::number(processes));
}

void askGpuIds(Prompter& prompter, Answers& answers) {
  if (answers.useCpu || (answers.distributedType != "NO" && answers.distributedType != "MULTI_GPU"))
    return;
  answers.config.set("gpu_ids",
                     ConfigValue::string(prompter.text("Which GPU(s) (by id) should be used for training "
                                                       "on this machine, as a comma-separated list?",
                                                       "all")));
}

/// `value` as PyYAML writes a float: the shortest text that reads back as it, with a decimal point.
std::string yamlFloat(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  std::string result = text;
  if (result.find_first_of(".eEn") == std::string::npos)
    return result + ".0";
  if (auto e = result.find('e'); e != std::string::npos && result.find('.') == std::string::npos)
    result.insert(e, ".0");
  return result;
}

/// DeepSpeed, offered where Accelerate offers it (one GPU or several on a machine): ZeRO stage 1 or 2, and
/// the deepspeed_config keys Accelerate writes for the same answers, with its names and spellings.
void askDeepSpeed(Prompter& prompter, Answers& answers) {
  if (!(answers.distributedType == "MULTI_GPU" || (answers.distributedType == "NO" && !answers.useCpu)))
    return;
  if (!prompter.yesNo(
          "Do you want to use DeepSpeed (ZeRO: the optimizer state, at stage 2 the gradients too, at stage 3 "
          "the parameters too, sharded over the GPUs)?",
          false))
    return;
  answers.distributedType = "DEEPSPEED";
  ConfigValue deepspeed = ConfigValue::map();
  const long long stage =
      prompter.wholeNumber("What should be your DeepSpeed's ZeRO optimization stage (1: optimizer state "
                           "sharded, 2: optimizer state and gradients sharded, 3: parameters too)?",
                           accelerate::spelling::kDefaultZeroStage, 1, accelerate::spelling::kMaxZeroStage);
  deepspeed.set("zero_stage", ConfigValue::number(stage));
  static const std::vector<std::string> kDevices = {"none", "cpu"};
  if (stage == 2) { // Accelerate asks about offload for stages 2 and 3 only
    deepspeed.set(
        "offload_optimizer_device",
        ConfigValue::string(kDevices[prompter.choose(
            "Where to offload optimizer states (cpu: the optimizer state and step live in CPU memory)?",
            kDevices)]));
    deepspeed.set("offload_param_device", ConfigValue::string("none")); // parameter offload needs stage 3
  } else if (stage == 3) {
    prompter.note(
        "ZeRO stage 3 runs accelerate-cpp's fsdp strategy (FULL_SHARD); DeepSpeed's CPU offload runs "
        "as its fsdp_offload_params: the shards, their gradients and the optimizer state in CPU "
        "memory.");
    deepspeed.set(
        "offload_optimizer_device",
        ConfigValue::string(
            kDevices[prompter.choose("Where to offload optimizer states (cpu: with the parameter shards, as "
                                     "fsdp_offload_params)?",
                                     kDevices)]));
    deepspeed.set(
        "offload_param_device",
        ConfigValue::string(kDevices[prompter.choose(
            "Where to offload parameters (cpu: the shards, their gradients and the optimizer state, "
            "as fsdp_offload_params)?",
            kDevices)]));
    deepspeed.set("zero3_save_16bit_model", ConfigValue::boolean(false));
  }
  deepspeed.set("gradient_accumulation_steps",
                ConfigValue::number(prompter.wholeNumber(
                    "How many gradient accumulation steps you're passing in your script?", 1, 1, INT_MAX)));
  if (prompter.yesNo("Do you want to use gradient clipping?", false))
    deepspeed.set(
        "gradient_clipping",
        ConfigValue::scalar(yamlFloat(prompter.number("What is the gradient clipping value?", 1.0)), false));
  deepspeed.set("zero3_init_flag", ConfigValue::boolean(false)); // Accelerate always writes it
  if (answers.numMachines > 1) {
    // Accelerate asks which launcher starts the other machines; accel launch runs on each machine, as
    // Accelerate's "standard" (torchrun) launcher does.
    deepspeed.set("deepspeed_multinode_launcher", ConfigValue::string("standard"));
  }
  answers.config.set("deepspeed_config", deepspeed);
}

/// FSDP, offered where Accelerate offers it (several GPUs, DeepSpeed not chosen): the version, the sharding
/// strategy (FSDP1's menu, which Accelerate writes as fsdp_reshard_after_forward, or FSDP2's yes/no),
/// parameter offload, the auto wrap policy (and its classes or threshold), the state dict type and activation
/// checkpointing, with Accelerate's keys and spellings; settings without effect here (use_orig_params,
/// sync_module_states, CPU RAM efficient loading) and prefetching (the runtime's defaults: backward
/// BACKWARD_PRE, forward off) are left out.
void askFsdp(Prompter& prompter, Answers& answers) {
  if (answers.distributedType != "MULTI_GPU")
    return;
  if (!prompter.yesNo(
          "Do you want to use FullyShardedDataParallel (FSDP: parameters, gradients and optimizer "
          "state sharded over the GPUs)?",
          false))
    return;
  answers.distributedType = "FSDP";
  prompter.note(
      "accelerate-cpp's FSDP shards the model unit by unit: the units are chosen among the modules whose "
      "forward calls accelerate::fsdp::unit(*this, ...) by the auto wrap policy. accel-rewrite adds that "
      "call to every module class of a project with its fsdp-units pass, which is off by default (turn it "
      "on with --enable=fsdp-units, or accelerate_target(... FSDP) in CMake).");
  ConfigValue fsdp = ConfigValue::map();
  const long long version = prompter.wholeNumber("What should be your FSDP version (1 or 2: the same in "
                                                 "accelerate-cpp)?",
                                                 2, 1, 2);
  fsdp.set("fsdp_version", ConfigValue::number(version));
  if (version == 1) {
    // Accelerate's questionnaire writes FSDP1's strategy under this key too. The hybrid strategies (sharded
    // within each machine, replicated across machines) are offered on several machines only.
    std::vector<std::string> strategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
    std::string question = "What should be your sharding strategy (FULL_SHARD: parameters gathered for each "
                           "unit's forward and again for its backward, SHARD_GRAD_OP: kept from forward to "
                           "backward, NO_SHARD: replicated";
    if (answers.numMachines > 1) {
      strategies.insert(strategies.end(), {"HYBRID_SHARD", "HYBRID_SHARD_ZERO2"});
      question += ", HYBRID_SHARD and HYBRID_SHARD_ZERO2: FULL_SHARD and SHARD_GRAD_OP within each machine, "
                  "replicated across machines";
    }
    fsdp.set("fsdp_reshard_after_forward",
             ConfigValue::string(strategies[prompter.choose(question + ")?", strategies)]));
  } else {
    fsdp.set(
        "fsdp_reshard_after_forward",
        ConfigValue::boolean(prompter.yesNo(
            "Do you want to enable resharding after forward (yes: FULL_SHARD, no: SHARD_GRAD_OP)?", true)));
  }
  // Accelerate's question, in its place (written where the file has always had the key).
  const bool offload = prompter.yesNo(
      "Do you want to offload parameters and gradients to CPU (on a GPU each process's shards, their "
      "gradients "
      "and the optimizer step live in CPU memory: less GPU memory, slower steps; a no-op on the CPU)?",
      false);
  // Accelerate's menu, in its order, with its default.
  const auto& policies = accelerate::spelling::auto_wrap_policies();
  const std::string policy = policies[prompter.choose(
      "What should be your auto wrap policy (TRANSFORMER_BASED_WRAP: the modules of the classes you name are "
      "units, SIZE_BASED_WRAP: the modules holding at least a number of parameters, NO_WRAP: every module "
      "whose forward calls accelerate::fsdp::unit)?",
      policies)];
  fsdp.set("fsdp_auto_wrap_policy", ConfigValue::string(policy));
  if (policy == "TRANSFORMER_BASED_WRAP") {
    fsdp.set(
        "fsdp_transformer_layer_cls_to_wrap",
        ConfigValue::string(prompter.text(
            "Specify the comma-separated list of transformer layer class names (case-sensitive) to wrap, "
            "e.g. Block, DecoderLayer (a TORCH_MODULE's name, like Block, names its BlockImpl)?",
            "")));
  } else if (policy == "SIZE_BASED_WRAP") {
    fsdp.set("fsdp_min_num_params",
             ConfigValue::number(prompter.wholeNumber(
                 "What should be your FSDP's minimum number of parameters for Default Auto Wrapping Policy?",
                 100000000, 0, LLONG_MAX)));
  }
  fsdp.set("fsdp_offload_params", ConfigValue::boolean(offload));
  // Accelerate's menus, without LOCAL_STATE_DICT, and its defaults (FULL for FSDP1, SHARDED for FSDP2).
  const std::vector<std::string> types =
      version == 1 ? std::vector<std::string>{"FULL_STATE_DICT", "SHARDED_STATE_DICT"}
                   : std::vector<std::string>{"SHARDED_STATE_DICT", "FULL_STATE_DICT"};
  fsdp.set("fsdp_state_dict_type",
           ConfigValue::string(types[prompter.choose(
               "What should be your FSDP's state dict type (SHARDED_STATE_DICT: each process writes its "
               "shards, FULL_STATE_DICT: the main process writes whole models)?",
               types)]));
  // Accelerate's last FSDP question, with its default.
  fsdp.set("fsdp_activation_checkpointing",
           ConfigValue::boolean(prompter.yesNo(
               "Do you want to enable FSDP activation checkpointing (every unit but the model keeps only its "
               "inputs and runs its body again in backward: less memory, one more forward of each unit)?",
               false)));
  answers.config.set("fsdp_config", fsdp);
}

void askMixedPrecision(Prompter& prompter, Answers& answers) {
  const auto& modes = mixedPrecisionModes();
  answers.config.set(
      "mixed_precision",
      ConfigValue::string(modes[prompter.choose("Do you wish to use mixed precision?", modes)]));
}

/// The keys Accelerate's questionnaire always writes, with the values it writes when not asked.
ConfigValue baseConfig() {
  ConfigValue config = ConfigValue::map();
  config.set("compute_environment", ConfigValue::string("LOCAL_MACHINE"));
  config.set("debug", ConfigValue::boolean(false));
  config.set("downcast_bf16", ConfigValue::string("no"));
  config.set("enable_cpu_affinity", ConfigValue::boolean(false));
  config.set("machine_rank", ConfigValue::number(0));
  config.set("main_training_function", ConfigValue::string("main"));
  config.set("num_machines", ConfigValue::number(1));
  config.set("rdzv_backend", ConfigValue::string("static"));
  config.set("same_network", ConfigValue::boolean(true));
  config.set("tpu_env", ConfigValue::list({}));
  config.set("tpu_use_cluster", ConfigValue::boolean(false));
  config.set("tpu_use_sudo", ConfigValue::boolean(false));
  return config;
}

} // namespace

ConfigDocument askConfigQuestions(Prompter& prompter) {
  Answers answers;
  answers.config = baseConfig();
  askComputeEnvironment(prompter);
  askMachineType(prompter, answers);
  if (answers.isMultiProcess()) {
    askMachines(prompter, answers);
    answers.config.set("debug",
                       ConfigValue::boolean(prompter.yesNo("Should distributed operations be checked while "
                                                           "running for errors (slower, but a mismatch is "
                                                           "reported instead of hanging)?",
                                                           false)));
  }
  askCpuOnly(prompter, answers);
  askDeepSpeed(prompter, answers);
  askFsdp(prompter, answers);
  askNumProcesses(prompter, answers);
  askGpuIds(prompter, answers);
  askMixedPrecision(prompter, answers);

  answers.config.set("distributed_type", ConfigValue::string(answers.distributedType));
  ConfigDocument document;
  document.root = answers.config;
  return document;
}

ConfigDocument defaultConfig(int gpuCount, const std::string& mixedPrecision) {
  ConfigValue config = ConfigValue::map();
  // What Accelerate's write_basic_config writes: its ClusterConfig defaults plus these.
  config.set("compute_environment", ConfigValue::string("LOCAL_MACHINE"));
  config.set("debug", ConfigValue::boolean(false));
  config.set("distributed_type", ConfigValue::string(gpuCount > 1 ? "MULTI_GPU" : "NO"));
  config.set("downcast_bf16", ConfigValue::boolean(false));
  config.set("enable_cpu_affinity", ConfigValue::boolean(false));
  config.set("machine_rank", ConfigValue::number(0));
  config.set("main_training_function", ConfigValue::string("main"));
  config.set("mixed_precision", ConfigValue::string(mixedPrecision));
  config.set("num_machines", ConfigValue::number(1));
  config.set("num_processes", ConfigValue::number(gpuCount > 0 ? gpuCount : 1));
  config.set("rdzv_backend", ConfigValue::string("static"));
  config.set("same_network", ConfigValue::boolean(false));
  config.set("tpu_use_cluster", ConfigValue::boolean(false));
  config.set("tpu_use_sudo", ConfigValue::boolean(false));
  config.set("use_cpu", ConfigValue::boolean(gpuCount == 0));
  ConfigDocument document;
  document.root = config;
  return document;
}

} // namespace accel
