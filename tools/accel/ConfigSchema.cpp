// The keys of Accelerate's config file and what each accepts (see ConfigSchema.h).
#include "ConfigSchema.h"

#include "settings/spelling.h"

namespace accel {

const std::vector<std::string>& accelerateDistributedTypes() {
  static const std::vector<std::string> kTypes = {
      "NO",        "MULTI_CPU", "MULTI_GPU", "FSDP",      "DEEPSPEED",  "MEGATRON_LM", "XLA",
      "MULTI_XPU", "MULTI_HPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",  "MULTI_NEURON"};
  return kTypes;
}

const std::vector<std::string>& supportedDistributedTypes() {
  static const std::vector<std::string> kTypes = {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED"};
  return kTypes;
}

const std::vector<std::string>& offloadDevices() {
  static const std::vector<std::string> kValues = {"none", "cpu", "nvme"};
  return kValues;
}

const std::vector<std::string>& mixedPrecisionModes() {
  return accelerate::spelling::mixed_precision_modes();
}

const std::vector<ConfigKey>& fsdpConfigKeys() {
  static const std::vector<ConfigKey> kKeys = {
      {"fsdp_version",
       ValueRule::wholeNumber(accelerate::spelling::kMinFsdpVersion, accelerate::spelling::kMaxFsdpVersion)},
      {"fsdp_sharding_strategy", ValueRule::choiceOrNumber(accelerate::spelling::sharding_strategies(), 1, 5)
                                     .spelledAlsoAs(accelerate::spelling::sharding_strategy)},
      {"fsdp_reshard_after_forward", ValueRule::boolOrChoice(accelerate::spelling::sharding_strategies())
                                         .spelledAlsoAs(accelerate::spelling::reshard_strategy)},
      {"fsdp_offload_params", ValueRule::boolean()},
      {"fsdp_auto_wrap_policy", ValueRule::choice(accelerate::spelling::auto_wrap_policies())},
      {"fsdp_transformer_layer_cls_to_wrap", ValueRule::text()},
      {"fsdp_min_num_params", ValueRule::wholeNumber(0, LLONG_MAX)},
      {"fsdp_backward_prefetch", ValueRule::choice(accelerate::spelling::backward_prefetch_policies())},
      {"fsdp_backward_prefetch_policy",
       ValueRule::choice(accelerate::spelling::backward_prefetch_policies())},
      {"fsdp_state_dict_type", ValueRule::choiceOrNumber(accelerate::spelling::state_dict_types(), 1, 3)},
      {"fsdp_forward_prefetch", ValueRule::boolean()},
      {"fsdp_use_orig_params", ValueRule::boolean()},
      {"fsdp_cpu_ram_efficient_loading", ValueRule::boolean()},
      {"fsdp_sync_module_states", ValueRule::boolean()},
      {"fsdp_activation_checkpointing", ValueRule::boolean()},
      {"fsdp_activation_checkpointing_offload", ValueRule::boolean()},
      {"fsdp_ignored_modules", ValueRule::text()},
  };
  return kKeys;
}

const std::vector<ConfigKey>& deepspeedConfigKeys() {
  static const std::vector<ConfigKey> kKeys = {
      {"deepspeed_config_file", ValueRule::text()},
      {"zero_stage",
       ValueRule::wholeNumber(accelerate::spelling::kMinZeroStage, accelerate::spelling::kMaxZeroStage)},
      {"offload_optimizer_device", ValueRule::choice(offloadDevices())},
      {"offload_param_device", ValueRule::choice(offloadDevices())},
      {"offload_optimizer_nvme_path", ValueRule::text()},
      {"offload_param_nvme_path", ValueRule::text()},
      {"gradient_accumulation_steps", ValueRule::wholeNumber(1)},
      {"gradient_clipping", ValueRule::number()},
      {"zero3_init_flag", ValueRule::boolean()},
      {"zero3_save_16bit_model", ValueRule::boolean()},
      {"deepspeed_hostfile", ValueRule::text()},
      {"deepspeed_exclusion_filter", ValueRule::text()},
      {"deepspeed_inclusion_filter", ValueRule::text()},
      {"deepspeed_multinode_launcher",
       ValueRule::choice({"pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm"})},
      {"deepspeed_moe_layer_cls_names", ValueRule::text()},
  };
  return kKeys;
}

const std::vector<ConfigKey>& topLevelConfigKeys() {
  static const std::vector<ConfigKey> kKeys = {
      {"compute_environment", ValueRule::choice({"LOCAL_MACHINE", "AMAZON_SAGEMAKER"})},
      {"distributed_type", ValueRule::choice(accelerateDistributedTypes())},
      {"mixed_precision", ValueRule::choice(mixedPrecisionModes()), true},
      {"use_cpu", ValueRule::boolean()},
      {"debug", ValueRule::boolean()},
      // -1 is Accelerate's "give --num_processes at launch" (as with Slurm).
      {"num_processes", ValueRule::wholeNumber(-1), true},
      {"machine_rank", ValueRule::wholeNumber(0)},
      {"num_machines", ValueRule::wholeNumber(1)},
      {"gpu_ids", ValueRule::text(), true},
      {"main_process_ip", ValueRule::text(), true},
      {"main_process_port", ValueRule::wholeNumber(0, 65535), true},
      {"rdzv_backend", ValueRule::text(), true},
      {"same_network", ValueRule::boolean(), true},
      {"main_training_function", ValueRule::text()},
      {"enable_cpu_affinity", ValueRule::boolean()},
      {"fp8_config", ValueRule::map(), true},
      {"deepspeed_config", ValueRule::map(), true, &deepspeedConfigKeys()},
      {"fsdp_config", ValueRule::map(), true, &fsdpConfigKeys()},
      {"parallelism_config", ValueRule::map(), true},
      {"megatron_lm_config", ValueRule::map(), true},
      {"mpirun_config", ValueRule::map(), true},
      {"dynamo_config", ValueRule::map(), true},
      {"downcast_bf16", ValueRule::any(), true},
      {"tpu_name", ValueRule::any(), true},
      {"tpu_zone", ValueRule::any(), true},
      {"tpu_use_cluster", ValueRule::any(), true},
      {"tpu_use_sudo", ValueRule::any(), true},
      {"command_file", ValueRule::any(), true},
      {"commands", ValueRule::any(), true},
      {"tpu_vm", ValueRule::any(), true},
      {"tpu_env", ValueRule::any(), true},
      // Older spellings Accelerate still reads and converts.
      {"fp16", ValueRule::boolean(), true},
      {"dynamo_backend", ValueRule::any(), true},
  };
  return kKeys;
}

const ConfigKey* findConfigKey(const std::vector<ConfigKey>& keys, const std::string& name) {
  for (const ConfigKey& key : keys)
    if (key.name == name)
      return &key;
  return nullptr;
}

} // namespace accel
