// The one table of the Accelerator's options. Each row is
//
//   ACCELERATE_OPTION(TYPE, NAME, FIELD, DEFAULT, ENVIRONMENT, YAML_KEY, CHECK, DOC)
//
//   TYPE         the setter's argument type: AcceleratorOptions().NAME(TYPE) and its member `NAME_`
//   NAME         the option's name: the setter, the key in `accelerator.state()` and in error messages
//   FIELD        the member of detail::ResolvedConfig that holds the resolved value
//   (runtime/settings/config.h) DEFAULT      its value when nothing sets it; std::nullopt makes the field
//   std::optional<TYPE> (unset) ENVIRONMENT  the ACCELERATE_* variable read for it, or `unmapped` YAML_KEY
//   the key read for it from the YAML file named by ACCELERATE_CONFIG_FILE, or `unmapped` CHECK        what a
//   value must be, checked wherever it came from (runtime/settings/config.cpp), or `any_value` DOC one line
//   of documentation: docs/api.md's option table is generated from these rows
//
// An option with neither an environment variable nor a YAML key is never parsed from text; one given a
// mapping is parsed by its TYPE's parser (a TYPE without one is a compile error in
// runtime/settings/config.cpp). After editing, regenerate docs/api.md's table: `python3
// scripts/option_table.py --update` (ctest config.OptionTableMatchesApiDoc fails while they differ).
//
// Includers define ACCELERATE_OPTION before including this file and undefine it after: it has no include
// guard on purpose. The arguments other than TYPE and NAME are only read where the runtime expands them.
// clang-format off
ACCELERATE_OPTION(std::string, mixed_precision, mixed_precision, "no",
                  "ACCELERATE_MIXED_PRECISION", "mixed_precision", one_of_precisions,
                  "`\"no\"`, `\"fp16\"`, `\"bf16\"` or `\"fp8\"`")
ACCELERATE_OPTION(int, gradient_accumulation_steps, gradient_accumulation_steps, 1,
                  "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "gradient_accumulation_steps", at_least_one,
                  "micro-steps per optimizer step inside `accumulate` (>= 1)")
ACCELERATE_OPTION(bool, cpu, cpu, false,
                  "ACCELERATE_USE_CPU", "use_cpu", any_value,
                  "train on the CPU even when CUDA is available")
ACCELERATE_OPTION(bool, split_batches, split_batches, false,
                  unmapped, unmapped, any_value,
                  "the loader's batch size is the global batch, split across the processes (false: each process "
                  "gets batches of that size)")
ACCELERATE_OPTION(bool, even_batches, even_batches, true,
                  unmapped, unmapped, any_value,
                  "pad the last batches with wrapped samples so every process gets as many batches")
ACCELERATE_OPTION(bool, dispatch_batches, dispatch_batches, false,
                  unmapped, unmapped, any_value,
                  "the main process alone reads the prepared loader's batches and sends each process its share "
                  "(batches of tensors only), for data only one process can read; the others never call `get()`")
ACCELERATE_OPTION(bool, non_blocking, non_blocking, false,
                  unmapped, unmapped, any_value,
                  "prepared loaders copy batches to the device with `non_blocking`: asynchronous from pinned memory "
                  "(`DataLoaderOptions::pin_memory`) to a CUDA device, where the next batch's copy then runs on a "
                  "side stream during the current step; no effect on the CPU")
ACCELERATE_OPTION(bool, step_scheduler_with_optimizer, step_scheduler_with_optimizer, true,
                  unmapped, unmapped, any_value,
                  "the prepared scheduler steps only when the optimizer really stepped; false: on every call")
ACCELERATE_OPTION(bool, scheduler_steps_per_process, scheduler_steps_per_process, false,
                  unmapped, unmapped, any_value,
                  "step the scheduler `num_processes` times per optimizer step, as Hugging Face Accelerate does")
ACCELERATE_OPTION(std::string, project_dir, project_dir, "",
                  "ACCEL_PROJECT_DIR", unmapped, any_value,
                  "where `save_state()` and `load_state()` without a directory write and read "
                  "(`project_dir/checkpoints/checkpoint_<n>`), and where the trackers of `log_with` write "
                  "(`project_dir/<project_name>`; `./runs` when unset); `ACCEL_PROJECT_DIR` is our own variable "
                  "(Accelerate has none)")
ACCELERATE_OPTION(std::vector<std::string>, log_with, log_with, std::vector<std::string>(),
                  unmapped, unmapped, any_value,
                  "the experiment trackers `init_trackers`/`log` write to, by registered name: "
                  "`\"tensorboard\"`, `\"jsonl\"`, `\"csv\"`, `\"all\"` (every built-in) or a name given to "
                  "`accelerate::register_tracker` (docs/tracking.md); a name nobody registered is reported by "
                  "`init_trackers` with the known names, and training goes on")
ACCELERATE_OPTION(std::string, profile_trace_dir, profile_trace_dir, "profile",
                  "ACCEL_PROFILE_DIR", unmapped, any_value,
                  "where `accelerator.profile()` writes each process's Chrome trace, "
                  "`<dir>/profile_<process_index>.json`, when its `ProfileKwargs` names no `output_trace_dir` "
                  "(docs/tracking.md, \"Profiling\"); empty: no trace file; `ACCEL_PROFILE_DIR` is our own "
                  "(Accelerate has no variable)")
ACCELERATE_OPTION(std::string, profile_schedule, profile_schedule, "",
                  "ACCEL_PROFILE_SCHEDULE", unmapped, spelling::profile_schedule_text,
                  "the schedule of `accelerator.profile()` when its `ProfileKwargs` gives no `schedule_option`: "
                  "`\"wait,warmup,active,repeat\"` whole numbers (active >= 1; repeat optional, 0: cycles until "
                  "the profile stops), as PyTorch's `torch.profiler.schedule`; empty: every step recorded; "
                  "`ACCEL_PROFILE_SCHEDULE` is our own")
ACCELERATE_OPTION(bool, automatic_checkpoint_naming, automatic_checkpoint_naming, true,
                  unmapped, unmapped, any_value,
                  "`save_state()` without a directory names checkpoints `project_dir/checkpoints/checkpoint_<n>`; "
                  "false makes `save_state()`/`load_state()` without a directory an error")
ACCELERATE_OPTION(int, total_limit, total_limit, 0,
                  unmapped, unmapped, not_negative,
                  "how many automatically named checkpoints to keep, the oldest removed first (0: all; >= 0)")
ACCELERATE_OPTION(double, bucket_cap_mb, bucket_cap_mb, 25.0,
                  unmapped, unmapped, positive,
                  "gradient bucket size in MiB (> 0): DDP's Reducer's (when set, the first bucket has this size "
                  "too, as in PyTorch; not used when gradients are averaged through shared memory: one machine, "
                  "CPU) and ZeRO-2's reduce-scatter buckets (smaller: a lower gradient peak; docs/runtime.md)")
ACCELERATE_OPTION(bool, find_unused_parameters, find_unused_parameters, false,
                  unmapped, unmapped, any_value,
                  "tolerate prepared models whose parameters the loss reaches only in part")
ACCELERATE_OPTION(bool, gradient_as_bucket_view, gradient_as_bucket_view, false,
                  unmapped, unmapped, any_value,
                  "gradients are views into the communication buckets, saving one copy; Reducer only, as "
                  "`bucket_cap_mb`")
ACCELERATE_OPTION(std::string, comm_hook, comm_hook, "no",
                  "ACCEL_COMM_HOOK", unmapped, any_value,
                  "how the `\"ddp\"` strategy's Reducer sends each gradient bucket, as Accelerate's "
                  "`DistributedDataParallelKwargs(comm_hook=...)`: `\"no\"` (as it is) or a hook of the "
                  "registry in runtime/parallel/comm_hook.cpp, by name (docs/runtime.md, \"Gradient "
                  "communication hooks\"); a hook other than `\"no\"` makes the model use the Reducer, not the "
                  "same-machine shared-memory average; a name nobody registered is refused at construction with "
                  "the known names; `ACCEL_COMM_HOOK` and `accel launch --comm_hook` are our own (Accelerate has "
                  "neither)")
ACCELERATE_OPTION(bool, static_graph, static_graph, false,
                  unmapped, unmapped, any_value,
                  "DDP static-graph mode: the set of used parameters never changes between iterations; Reducer "
                  "only, as `bucket_cap_mb`")
ACCELERATE_OPTION(bool, cuda_graph, cuda_graph, false,
                  unmapped, unmapped, any_value,
                  "capture the step `graphed_step` wraps in a CUDA graph and replay it: one launch per step "
                  "instead of one per kernel, for static shapes; without a CUDA device the step runs as written")
ACCELERATE_OPTION(std::chrono::milliseconds, init_timeout, timeout, std::chrono::minutes(10),
                  "ACCEL_TIMEOUT", unmapped, positive,
                  "limit for forming the process group and for each collective (> 0), as Accelerate's "
                  "`InitProcessGroupKwargs(timeout)`: a process that is alive but does not arrive (a deadlock, long "
                  "work on one process while the others wait) ends the job after this long; `ACCEL_TIMEOUT` and "
                  "`accel launch --timeout` take seconds (our own: Accelerate has neither)")
ACCELERATE_OPTION(std::chrono::milliseconds, hang_timeout, hang_timeout, std::chrono::seconds(60),
                  "ACCEL_HANG_TIMEOUT", unmapped, not_negative,
                  "how long a process of the job may give no heartbeat (stopped, frozen, gone) before the job is "
                  "ended naming it, its state and its last collective (0: not watched); `accel launch` watches "
                  "its ranks, and under other launchers the processes of each machine watch each other; "
                  "`ACCEL_HANG_TIMEOUT` and `accel launch --hang_timeout` take seconds (our own)")
ACCELERATE_OPTION(std::string, run_id, run_id, "",
                  "ACCELERATE_RUN_ID", unmapped, run_id_text,
                  "the job's identity: a process whose run id differs from rank 0's is refused at the rendezvous, "
                  "and what the job names on a machine (store keys, shared memory) carries it; `accel launch` makes "
                  "one (or takes `--rdzv_id`), torchrun's `TORCHELASTIC_RUN_ID`, Slurm's job and step ids or Open "
                  "MPI's job namespace are used when unset (our own: Accelerate has none)")
ACCELERATE_OPTION(std::uint64_t, seed, seed, std::nullopt,
                  unmapped, unmapped, any_value,
                  "call `set_seed(seed)` at construction: every generator and the data sampler")
ACCELERATE_OPTION(bool, debug, debug, false,
                  "ACCELERATE_DEBUG_MODE", "debug", any_value,
                  "debug-mode checks of collectives")
ACCELERATE_OPTION(std::string, parallel_strategy, parallel_strategy, "ddp",
                  "ACCELERATE_PARALLEL_STRATEGY", unmapped, any_value,
                  "the parallel strategy: `\"ddp\"` (replicate the model on every process), `\"zero\"` (ZeRO, "
                  "stage `zero_stage`, 2 when none is set) or `\"fsdp\"` (fully sharded: parameters, gradients and "
                  "optimizer state; the `fsdp_*` options); a `zero_stage` of 1 or 2 set anywhere selects "
                  "`\"zero\"`, and `zero_stage` 3 or Accelerate's FSDP settings (`distributed_type: FSDP`, an "
                  "`fsdp_config` section, `ACCELERATE_USE_FSDP=true`) select `\"fsdp\"`; another strategy set with "
                  "them is refused")
ACCELERATE_OPTION(int, zero_stage, zero_stage, 0,
                  "ACCELERATE_DEEPSPEED_ZERO_STAGE", "deepspeed_config.zero_stage", one_of_zero_stages,
                  "ZeRO stage: 0 (off: replicate), 1 (optimizer state sharded), 2 (and gradients sharded), 3 (and "
                  "parameters: runs `\"fsdp\"` with `FULL_SHARD`)")
ACCELERATE_OPTION(std::string, offload_optimizer_device, offload_optimizer_device, "none",
                  "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "deepspeed_config.offload_optimizer_device",
                  one_of_offload_devices,
                  "under ZeRO, where the optimizer state and step live: `\"none\"` (the device) or `\"cpu\"` (a "
                  "no-op when training on the CPU); with `zero_stage` 3, `\"cpu\"` runs as `fsdp_offload_params` "
                  "true")
ACCELERATE_OPTION(std::string, offload_param_device, offload_param_device, "none",
                  "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "deepspeed_config.offload_param_device",
                  one_of_offload_devices,
                  "under ZeRO stage 3, where the parameter shards live: `\"none\"` (the device) or `\"cpu\"` "
                  "(runs as `fsdp_offload_params` true: the shards, their gradients and the optimizer state in "
                  "CPU memory); refused with another stage, as DeepSpeed offloads parameters at stage 3 only")
ACCELERATE_OPTION(double, gradient_clipping, gradient_clipping, 0.0,
                  "ACCELERATE_GRADIENT_CLIPPING", "deepspeed_config.gradient_clipping", not_negative_number,
                  "clip the gradients to this total norm in every optimizer step (0: off; >= 0), as DeepSpeed's "
                  "`gradient_clipping`")
ACCELERATE_OPTION(std::string, fsdp_sharding_strategy, fsdp_sharding_strategy, "FULL_SHARD",
                  "FSDP_SHARDING_STRATEGY", "fsdp_config.fsdp_sharding_strategy", one_of_sharding_strategies,
                  "under parallel_strategy `\"fsdp\"`: `\"FULL_SHARD\"` (parameters gathered for each unit's "
                  "forward and again for its backward), `\"SHARD_GRAD_OP\"` (kept from forward to backward), "
                  "`\"NO_SHARD\"` (replicated, as ddp), `\"HYBRID_SHARD\"` and `\"HYBRID_SHARD_ZERO2\"` "
                  "(FULL_SHARD and SHARD_GRAD_OP within each machine, replicated across machines; refused on "
                  "one machine); Accelerate's names in any case, or its numbers 1 to 5 (resolved to the "
                  "upper-case name)")
ACCELERATE_OPTION(bool, fsdp_reshard_after_forward, fsdp_reshard_after_forward, true,
                  "FSDP_RESHARD_AFTER_FORWARD", "fsdp_config.fsdp_reshard_after_forward", any_value,
                  "FSDP2's spelling of the sharding strategy: true is `FULL_SHARD` (or `HYBRID_SHARD`), false "
                  "`SHARD_GRAD_OP`; from the "
                  "environment or the file it may also name a strategy (FSDP1's spelling); set together with "
                  "`fsdp_sharding_strategy`, the two must agree")
ACCELERATE_OPTION(int, fsdp_version, fsdp_version, 1,
                  "FSDP_VERSION", "fsdp_config.fsdp_version", one_of_fsdp_versions,
                  "FSDP's API version, 1 or 2: the same behaviour here")
ACCELERATE_OPTION(std::string, fsdp_state_dict_type, fsdp_state_dict_type, "SHARDED_STATE_DICT",
                  "FSDP_STATE_DICT_TYPE", "fsdp_config.fsdp_state_dict_type", one_of_state_dict_types,
                  "under parallel_strategy `\"fsdp\"`, the models in checkpoints: `\"SHARDED_STATE_DICT\"` (each "
                  "process writes its shards) or `\"FULL_STATE_DICT\"` (the main process writes whole models, "
                  "gathered one unit at a time); any case (resolved to upper case); `LOCAL_STATE_DICT` is refused")
ACCELERATE_OPTION(bool, fsdp_forward_prefetch, fsdp_forward_prefetch, false,
                  "FSDP_FORWARD_PREFETCH", "fsdp_config.fsdp_forward_prefetch", any_value,
                  "under parallel_strategy `\"fsdp\"`, a unit's forward starts the all-gather of the unit that "
                  "ran after it in the previous forward; asynchronous over c10d's Gloo (sockets) and NCCL, skipped "
                  "over the shared-memory transport, where a gather is a copy made by the calling thread")
ACCELERATE_OPTION(std::string, fsdp_backward_prefetch, fsdp_backward_prefetch, "BACKWARD_PRE",
                  "FSDP_BACKWARD_PREFETCH", "fsdp_config.fsdp_backward_prefetch", one_of_backward_prefetches,
                  "under parallel_strategy `\"fsdp\"`, when the next unit's all-gather starts in backward: "
                  "`\"BACKWARD_PRE\"` (as a unit's backward starts), `\"BACKWARD_POST\"` (once its gradients "
                  "are in) or `\"NO_PREFETCH\"`; any case; skipped like `fsdp_forward_prefetch`")
ACCELERATE_OPTION(std::string, fsdp_auto_wrap_policy, fsdp_auto_wrap_policy, "NO_WRAP",
                  "FSDP_AUTO_WRAP_POLICY", "fsdp_config.fsdp_auto_wrap_policy", one_of_auto_wrap_policies,
                  "under parallel_strategy `\"fsdp\"`, which modules are units: `\"NO_WRAP\"` (every module whose "
                  "forward calls `accelerate::fsdp::unit`), `\"TRANSFORMER_BASED_WRAP\"` (those of the classes "
                  "`fsdp_transformer_layer_cls_to_wrap` lists) or `\"SIZE_BASED_WRAP\"` (those holding at least "
                  "`fsdp_min_num_params` parameter elements not in a smaller unit); any case (resolved to upper "
                  "case); docs/runtime.md, \"Which modules are units\"")
ACCELERATE_OPTION(std::string, fsdp_transformer_layer_cls_to_wrap, fsdp_transformer_layer_cls_to_wrap, "",
                  "FSDP_TRANSFORMER_CLS_TO_WRAP", "fsdp_config.fsdp_transformer_layer_cls_to_wrap", any_value,
                  "under `TRANSFORMER_BASED_WRAP`, the module classes that are units, comma-separated: `Block` "
                  "names `Block` and `BlockImpl` (a `TORCH_MODULE` holder's), `ns::Block` the qualified class; "
                  "a listed class no module of the model has is an error")
ACCELERATE_OPTION(std::int64_t, fsdp_min_num_params, fsdp_min_num_params, 100000000,
                  "FSDP_MIN_NUM_PARAMS", "fsdp_config.fsdp_min_num_params", not_negative_count,
                  "under `SIZE_BASED_WRAP`, the trainable parameter elements a module must hold (those not in a "
                  "unit below it) to be a unit (>= 0; Accelerate's default 100000000)")
ACCELERATE_OPTION(bool, fsdp_activation_checkpointing, fsdp_activation_checkpointing, false,
                  "FSDP_ACTIVATION_CHECKPOINTING", "fsdp_config.fsdp_activation_checkpointing", any_value,
                  "under parallel_strategy `\"fsdp\"`, every unit but the model itself keeps only its inputs "
                  "and runs its body again in backward (activation checkpointing: the activations of one unit "
                  "at a time, for a second forward of each unit); a unit whose forward passes its inputs to "
                  "`accelerate::fsdp::unit` (as the fsdp-units pass writes it) is recomputed, the form without "
                  "inputs never is")
ACCELERATE_OPTION(bool, activation_checkpointing, activation_checkpointing, false,
                  "ACCELERATE_ACTIVATION_CHECKPOINTING", unmapped, any_value,
                  "under every strategy (and on one process), each module of a prepared model whose forward passes "
                  "its inputs to `accelerate::fsdp::unit` (as the fsdp-units pass writes it), the model itself "
                  "excepted, keeps only its inputs and runs its body again in backward, as "
                  "fsdp_activation_checkpointing does for fsdp's units (which it also turns on); by hand, "
                  "`accelerate::checkpoint` needs no setting (our own: Accelerate has no such key)")
ACCELERATE_OPTION(bool, fsdp_activation_checkpointing_offload, fsdp_activation_checkpointing_offload, false,
                  "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD", "fsdp_config.fsdp_activation_checkpointing_offload",
                  any_value,
                  "with fsdp_activation_checkpointing on a GPU, the inputs each checkpointed unit keeps for its "
                  "backward are copied to pinned CPU memory in forward and back to the device in backward; on a "
                  "CPU run accepted as a no-op, said once at INFO; without fsdp_activation_checkpointing refused")
ACCELERATE_OPTION(bool, fsdp_offload_params, fsdp_offload_params, false,
                  "FSDP_OFFLOAD_PARAMS", "fsdp_config.fsdp_offload_params", any_value,
                  "under parallel_strategy `\"fsdp\"` on a GPU, Accelerate's offload of parameters, gradients "
                  "and the optimizer step to CPU memory: each process's shards, their gradients and the "
                  "optimizer state live in pinned CPU memory and the optimizer steps there; a unit's share is "
                  "copied to the GPU for its all-gather, its reduce-scattered gradient back; with one process "
                  "each unit is one share (a model larger than the GPU trains on it). On a CPU run (where they "
                  "already live) accepted as a no-op, said once at INFO; with NO_SHARD (nothing sharded) said "
                  "once at WARNING")
// clang-format on
