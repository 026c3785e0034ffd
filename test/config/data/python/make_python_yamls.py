#!/usr/bin/env python3
"""Regenerates the config files in this folder with Python Accelerate itself (the test data of
config.PythonAccelerateYamlsAreAccepted). Run with a Python that has `accelerate` installed:

    ~/.cache/accelerate-cpp/venv-torch-2.11.0/bin/python test/config/data/python/make_python_yamls.py

Each file except zero2.yaml and zero3.yaml is written by Accelerate's own `accelerate config` questionnaire,
answered in a pseudo-terminal with the keys listed below (its menus take a digit and Enter), or by `accelerate
config default`. zero2.yaml and zero3.yaml are written by Accelerate's ClusterConfig.to_yaml_file (the serializer
`accelerate config` uses) because the questionnaire's DeepSpeed branch insists on the deepspeed package being
installed.
"""
import os
import pty
import select
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENTER = "\r"

# (answers to Accelerate's questions, in order: what the question contains, what to type)
SCENARIOS = {
    "single_cpu": [("compute environment", ENTER), ("type of machine", ENTER), ("CPU only", "yes" + ENTER),
                   ("torch dynamo", ENTER), ("DeepSpeed?", ENTER), ("mixed precision", ENTER)],
    "multi_cpu": [("compute environment", ENTER), ("type of machine", "1" + ENTER), ("different machines", ENTER),
                  ("checked while running", ENTER), ("launch mpirun", ENTER), ("torch dynamo", ENTER),
                  ("How many processes", "4" + ENTER), ("mixed precision", "2" + ENTER)],
    "multi_gpu": [("compute environment", ENTER), ("type of machine", "4" + ENTER), ("different machines", ENTER),
                  ("checked while running", ENTER), ("torch dynamo", ENTER), ("DeepSpeed?", ENTER),
                  ("FullyShardedDataParallel?", ENTER), ("Megatron-LM", ENTER), ("How many GPU(s)", "2" + ENTER),
                  ("(by id)", "0,1" + ENTER), ("numa efficiency", ENTER), ("mixed precision", "1" + ENTER)],
    "multi_node": [("compute environment", ENTER), ("type of machine", "1" + ENTER),
                   ("different machines", "2" + ENTER), ("rank of this machine", ENTER),
                   ("IP address", "127.0.0.1" + ENTER), ("port you will use", "29500" + ENTER),
                   ("same local network", ENTER), ("checked while running", ENTER), ("launch mpirun", ENTER),
                   ("torch dynamo", ENTER), ("How many processes", "2" + ENTER), ("mixed precision", ENTER)],
    "fsdp": [("compute environment", ENTER), ("type of machine", "4" + ENTER), ("different machines", ENTER),
             ("checked while running", ENTER), ("torch dynamo", ENTER), ("DeepSpeed?", ENTER),
             ("FullyShardedDataParallel?", "yes" + ENTER), ("FSDP version", ENTER), ("resharding", ENTER),
             ("offload parameters", ENTER), ("auto wrap policy", ENTER), ("_no_split_modules", ENTER),
             ("layer class names", "Block" + ENTER), ("state dict type", ENTER), ("RAM efficient", ENTER),
             ("activation checkpointing", ENTER), ("parallelism config", ENTER),
             ("How many GPU(s)", "2" + ENTER), ("mixed precision", "2" + ENTER)],
    # FSDP files accelerate-cpp runs: no automatic wrapping, offload or activation checkpointing.
    "fsdp1_no_wrap": [("compute environment", ENTER), ("type of machine", "4" + ENTER),
                      ("different machines", ENTER), ("checked while running", ENTER), ("torch dynamo", ENTER),
                      ("DeepSpeed?", ENTER), ("FullyShardedDataParallel?", "yes" + ENTER),
                      ("FSDP version", "0" + ENTER), ("sharding strategy", "1" + ENTER),
                      ("offload parameters", ENTER), ("auto wrap policy", "2" + ENTER),
                      ("backward prefetch", "1" + ENTER), ("state dict type", ENTER), ("forward prefetch", ENTER),
                      ("use_orig_params", ENTER), ("RAM efficient", "no" + ENTER), ("broadcast module", ENTER),
                      ("activation checkpointing", ENTER), ("How many GPU(s)", "2" + ENTER),
                      ("mixed precision", ENTER)],
    "fsdp2_no_wrap": [("compute environment", ENTER), ("type of machine", "4" + ENTER),
                      ("different machines", ENTER), ("checked while running", ENTER), ("torch dynamo", ENTER),
                      ("DeepSpeed?", ENTER), ("FullyShardedDataParallel?", "yes" + ENTER), ("FSDP version", ENTER),
                      ("resharding", "no" + ENTER), ("offload parameters", ENTER), ("auto wrap policy", "2" + ENTER),
                      ("state dict type", "1" + ENTER), ("RAM efficient", ENTER),
                      ("activation checkpointing", ENTER), ("parallelism config", ENTER),
                      ("How many GPU(s)", "2" + ENTER), ("mixed precision", "2" + ENTER)],
}


def answer_in_pty(command, steps, env):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(command[0], command, env)
    seen = b""

    def read_until(text):
        nonlocal seen
        deadline = time.time() + 30
        while text.encode() not in seen:
            if not select.select([fd], [], [], max(0.0, deadline - time.time()))[0]:
                raise TimeoutError(f"Accelerate never asked {text!r}; last output: {seen[-400:]!r}")
            seen += os.read(fd, 4096)

    for question, keys in steps:
        read_until(question)
        seen = seen[seen.index(question.encode()) + len(question):]
        time.sleep(0.2)  # let the menu switch the terminal to raw mode before typing
        os.write(fd, keys.encode())
    try:
        while select.select([fd], [], [], 30)[0] and os.read(fd, 4096):
            pass
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({status}): {seen[-400:]!r}")


def main():
    env = dict(os.environ, HF_HOME=tempfile.mkdtemp(), TERM="xterm")
    cli = [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
    for name, steps in SCENARIOS.items():
        answer_in_pty([*cli, "config", "--config_file", os.path.join(HERE, name + ".yaml")], steps, env)
    default = os.path.join(HERE, "default_cpu.yaml")
    if os.path.exists(default):
        os.remove(default)
    answer_in_pty([*cli, "config", "default", "--config_file", default], [], env)

    from accelerate.commands.config.config_args import ClusterConfig
    ClusterConfig(compute_environment="LOCAL_MACHINE", distributed_type="DEEPSPEED", mixed_precision="bf16",
                  use_cpu=False, debug=False, num_processes=2, downcast_bf16="no", same_network=True,
                  tpu_env=[], deepspeed_config={"gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
                                                "offload_optimizer_device": "cpu", "offload_param_device": "none",
                                                "zero3_init_flag": False, "zero_stage": 2}
                  ).to_yaml_file(os.path.join(HERE, "zero2.yaml"))
    # What the questionnaire writes for ZeRO stage 3 without offload (accelerate-cpp runs it as fsdp).
    ClusterConfig(compute_environment="LOCAL_MACHINE", distributed_type="DEEPSPEED", mixed_precision="bf16",
                  use_cpu=False, debug=False, num_processes=2, downcast_bf16="no", same_network=True,
                  tpu_env=[], deepspeed_config={"gradient_accumulation_steps": 1, "offload_optimizer_device": "none",
                                                "offload_param_device": "none", "zero3_init_flag": False,
                                                "zero3_save_16bit_model": False, "zero_stage": 3}
                  ).to_yaml_file(os.path.join(HERE, "zero3.yaml"))
    import accelerate
    print(f"wrote {len(SCENARIOS) + 3} files with accelerate {accelerate.__version__}")


if __name__ == "__main__":
    main()
