#!/usr/bin/env python3
"""Tests for `accel config`, the config file, `accel env`, and what `accel launch` exports for a config:
config_test.py --accel A --docs DOCS_DIR --probe CONFIG_PROBE TestName (one ctest test each, config.<TestName>).
CONFIG_PROBE is the runtime's option resolution as a program (config_probe.cpp): what the runtime reads from the
same file, environment and exports.

Run with the torch venv's python: it has PyYAML, and Python Accelerate where PyPI's `accelerate` could be
installed (tests that need it print why and exit 77, ctest's "skipped", without it).
"""
import argparse
import json
import os
import pty
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_YAMLS = os.path.join(HERE, "data", "python")
SKIP = 77
ACCEL = ""
DOCS = ""
PROBE = ""

try:
    import yaml
except ImportError:  # the tests that compare maps need it; --list does not
    yaml = None


class Skip(Exception):
    pass


def check(condition, message, detail=None):
    if not condition:
        raise AssertionError(message + (f"\n--- detail ---\n{detail}\n--- end ---" if detail is not None else ""))


# Each environment's HF_HOME and other scratch folders, in one folder removed when the test program ends.
HOMES = tempfile.TemporaryDirectory(prefix="accel-config-test-")


def environment(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    env["HF_HOME"] = tempfile.mkdtemp(dir=HOMES.name)
    env.update(overrides)
    return env


def accel(*args, env=None, stdin=None):
    done = subprocess.run([ACCEL, *args], input=stdin, capture_output=True, text=True, timeout=60,
                          env=env or environment())
    return done.returncode, done.stdout, done.stderr


def run_probe(env, *options):
    done = subprocess.run([PROBE, *options], capture_output=True, text=True, timeout=60, env=env)
    return done.returncode, done.stdout, done.stderr


def parse_state(text):
    """{option: (value, source)} from `accelerator.state()`'s option lines."""
    lines = [re.match(r"(\w+): (.*?)  \((.*)\)$", line) for line in text.splitlines()]
    return {match.group(1): (match.group(2), match.group(3)) for match in lines if match}


def probe(env, *options):
    """What the runtime resolves for `env` and AcceleratorOptions `options` (NAME=VALUE): {option: (value,
    source)}; the test fails when the runtime refuses them."""
    code, out, err = run_probe(env, *options)
    check(code == 0, f"the runtime must accept {options or ''} with {show_env(env)}", err)
    return parse_state(out)


def probe_refusal(env, *options):
    """The runtime's refusal of `env` and `options`: its one message; the test fails when it accepts them."""
    code, out, err = run_probe(env, *options)
    check(code == 3 and err.startswith("error: accelerate: ") and len(err.splitlines()) == 1,
          f"the runtime must refuse {options or ''} with {show_env(env)} in one line", f"exit {code}\n{out}{err}")
    return err[len("error: "):].strip()


def show_env(env):
    return {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def load_yaml(path):
    check(yaml is not None, "PyYAML is needed (run with the torch venv's python)")
    with open(path) as file:
        return yaml.safe_load(file)


# ------------------------------------------------------------------------------------------- the questions

ENTER = ""
# Each doc example's answers to `accel config`: (what the question contains, what to type), in order.
ANSWERS = {
    "single-cpu": [("compute environment", ENTER), ("type of machine", ENTER), ("CPU only", "yes"),
                   ("mixed precision", ENTER)],
    "multi-cpu": [("compute environment", ENTER), ("type of machine", "1"), ("How many machines", ENTER),
                  ("checked while running", ENTER), ("How many processes", "4"), ("mixed precision", "bf16")],
    "multi-gpu": [("compute environment", ENTER), ("type of machine", "multi-GPU"), ("How many machines", ENTER),
                  ("checked while running", "no"), ("use DeepSpeed", ENTER), ("FullyShardedDataParallel", ENTER),
                  ("How many GPU(s)", "2"), ("(by id)", "0,1"), ("mixed precision", "1")],
    "deepspeed-zero2": [("compute environment", ENTER), ("type of machine", "multi-GPU"),
                        ("How many machines", ENTER), ("checked while running", "no"), ("use DeepSpeed", "yes"),
                        ("ZeRO optimization stage", ENTER), ("offload optimizer states", ENTER),
                        ("gradient accumulation steps", "3"), ("gradient clipping?", "yes"),
                        ("clipping value", ENTER), ("How many GPU(s)", "2"), ("mixed precision", "bf16")],
    "fsdp": [("compute environment", ENTER), ("type of machine", "multi-GPU"), ("How many machines", ENTER),
             ("checked while running", "no"), ("use DeepSpeed", ENTER), ("FullyShardedDataParallel", "yes"),
             ("FSDP version", ENTER), ("resharding after forward", ENTER), ("offload parameters", ENTER),
             ("auto wrap policy", ENTER),
             ("layer class names", "Block"), ("state dict type", ENTER), ("activation checkpointing", ENTER),
             ("How many GPU(s)", "2"), ("mixed precision", "bf16")],
    "multi-node": [("compute environment", ENTER), ("type of machine", "1"), ("How many machines", "2"),
                   ("rank of this machine", ENTER), ("IP address", "127.0.0.1"), ("What port", ENTER),
                   ("same local network", ENTER), ("checked while running", ENTER),
                   ("How many processes", "2"), ("mixed precision", ENTER)],
}


def doc_examples():
    """{name: YAML text} for every `<!-- example: NAME -->` block of docs/config.md."""
    with open(os.path.join(DOCS, "config.md")) as file:
        text = file.read()
    return dict(re.findall(r"<!-- example: (\S+) -->\n```yaml\n(.*?)```", text, re.S))


def answer_in_pty(args, steps, env):
    """Runs accel with `args` in a pseudo-terminal, typing each answer once its question has appeared."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(ACCEL, [ACCEL, *args], env)
    seen = b""
    transcript = b""

    def read_until(text):
        nonlocal seen, transcript
        deadline = time.monotonic() + 20
        while text.encode() not in seen:
            check(select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0],
                  f"accel config never asked {text!r}", transcript.decode(errors="replace")[-800:])
            chunk = os.read(fd, 4096)
            seen += chunk
            transcript += chunk

    for question, answer in steps:
        read_until(question)
        seen = seen[seen.index(question.encode()) + len(question):]
        read_until(": ")  # the prompt's end: accel now waits for the answer
        os.write(fd, (answer + "\r").encode())
    try:
        while select.select([fd], [], [], 20)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            transcript += chunk
    except OSError:  # the terminal closes when accel exits
        pass
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), transcript.decode(errors="replace")


def write_example(name, directory):
    path = os.path.join(directory, name + ".yaml")
    code, transcript = answer_in_pty(["config", "--config_file", path], ANSWERS[name], environment())
    check(code == 0, f"accel config must exit 0 for example {name} (got {code})", transcript)
    check(f"accelerate configuration saved at {path}" in transcript, "accel config must say where it saved",
          transcript)
    return path


def RoundTripEveryDocExample():
    examples = doc_examples()
    check(sorted(examples) == sorted(ANSWERS),
          f"docs/config.md's examples {sorted(examples)} and this test's answers {sorted(ANSWERS)} must match")
    with tempfile.TemporaryDirectory() as directory:
        for name, text in examples.items():
            written = load_yaml(write_example(name, directory))
            check(written == yaml.safe_load(text), f"example {name}: accel config wrote a different map",
                  f"written: {written}\ndocs:    {yaml.safe_load(text)}")
            code, out, err = accel("config", "--validate", os.path.join(directory, name + ".yaml"))
            check(code == 0, f"example {name} must pass --validate", err)
            print(f"{name}: {len(written)} keys, equal")


def PipedAnswersWriteTheSameFile():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "piped.yaml")
        answers = "".join(answer + "\n" for _, answer in ANSWERS["multi-node"])
        code, out, err = accel("config", "--config_file", path, stdin=answers)
        check(code == 0, "accel config must read answers from a pipe", out + err)
        check("IP address of the machine that will host the main process: 127.0.0.1\n" in out,
              "piped answers must be echoed after their questions", out)
        check(load_yaml(path) == yaml.safe_load(doc_examples()["multi-node"]), "piped answers wrote another map")


def BadAnswersAreAskedAgain():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "c.yaml")
        answers = "\n".join(["7", "0", "multi-CPU", "two", "1", "maybe", "no", "3", "fp17", "fp16"]) + "\n"
        code, out, err = accel("config", "--config_file", path, stdin=answers)
        check(code == 0, "accel config must recover from bad answers", out + err)
        for note in ["Please enter a number from 0 to 1, or one of the names.",
                     "Please enter a whole number >= 1.", "Please enter yes or no."]:
            check(note in out, f"expected the note {note!r}", out)
        written = load_yaml(path)
        check(written["num_processes"] == 3 and written["mixed_precision"] == "fp16", "answers after retries", out)


def QuestionnaireOffersFsdp():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "fsdp1.yaml")
        # Multi-GPU, no DeepSpeed, FSDP: version 1, whose strategy menu leaves out the hybrid ones (typed, it is
        # asked again) and which Accelerate writes under fsdp_reshard_after_forward; Accelerate's wrap policies;
        # its state dict menu leaves out LOCAL_STATE_DICT; activation checkpointing, Accelerate's last question.
        # Parameter offload is asked where Accelerate asks it (after the sharding strategy).
        answers = ["0", "2", "1", "no", "no", "yes", "1", "HYBRID_SHARD", "shard_grad_op", "yes", "NO_WRAP",
                   "LOCAL_STATE_DICT", ENTER, "yes", "2", "no"]
        code, out, err = accel("config", "--config_file", path, stdin="\n".join(answers) + "\n")
        check(code == 0, "accel config must write an FSDP file", out + err)
        check("the units are chosen among the modules whose forward calls accelerate::fsdp::unit(*this, ...)" in out,
              "the questionnaire must say what the units are", out)
        check(out.count("Please enter a number from 0 to 2, or one of the names.") == 1 and
              out.count("Please enter a number from 0 to 1, or one of the names.") == 1,
              "a hybrid strategy and LOCAL_STATE_DICT must be asked again", out)
        questions = "\n".join(line for line in out.splitlines() if "?" in line)
        check("Do you want to enable FSDP activation checkpointing" in questions,
              "accel config must ask Accelerate's activation checkpointing question", out)
        check("Do you want to offload parameters and gradients to CPU" in questions,
              "accel config must ask Accelerate's offload question", out)
        for question in ["prefetch", "RAM efficient"]:
            check(question not in questions, f"accel config must not ask about {question!r}", out)
        written = load_yaml(path)
        check(written["distributed_type"] == "FSDP" and written["num_processes"] == 2 and "gpu_ids" not in written
              and written["fsdp_config"] == {"fsdp_version": 1, "fsdp_reshard_after_forward": "SHARD_GRAD_OP",
                                             "fsdp_state_dict_type": "FULL_STATE_DICT",
                                             "fsdp_auto_wrap_policy": "NO_WRAP", "fsdp_offload_params": True,
                                             "fsdp_activation_checkpointing": True},
              f"an FSDP1 file with Accelerate's keys: {written}")
        code, out, err = accel("config", "--validate", path)
        check(code == 0, "the file must pass --validate", err)
        resolved = probe(environment(ACCELERATE_CONFIG_FILE=path))
        check(resolved["parallel_strategy"] == ("fsdp", f"distributed_type: FSDP in config file {path}")
              and resolved["fsdp_sharding_strategy"][0] == "SHARD_GRAD_OP"
              and resolved["fsdp_state_dict_type"][0] == "FULL_STATE_DICT" and resolved["fsdp_version"][0] == "1"
              and resolved["fsdp_activation_checkpointing"] == ("true", f"config file {path}"),
              f"the runtime must run the file's FSDP1 settings: {resolved}")
        # FSDP2 with SIZE_BASED_WRAP: the threshold is asked (Accelerate's default 100000000), and written;
        # activation checkpointing is off by default.
        answers = ["0", "2", "1", "no", "no", "yes", ENTER, ENTER, ENTER, "1", "-5", "5000", ENTER, ENTER, "2", "no"]
        code, out, err = accel("config", "--config_file", path, stdin="\n".join(answers) + "\n")
        check(code == 0 and "minimum number of parameters" in out, "accel config must ask SIZE_BASED_WRAP's threshold",
              out + err)
        written = load_yaml(path)["fsdp_config"]
        check(written.get("fsdp_auto_wrap_policy") == "SIZE_BASED_WRAP" and written.get("fsdp_min_num_params") == 5000
              and "fsdp_transformer_layer_cls_to_wrap" not in written
              and written.get("fsdp_activation_checkpointing") is False and written.get("fsdp_offload_params") is False,
              f"SIZE_BASED_WRAP's keys: {written}")
        resolved = probe(environment(ACCELERATE_CONFIG_FILE=path))
        check(resolved["fsdp_auto_wrap_policy"][0] == "SIZE_BASED_WRAP" and resolved["fsdp_min_num_params"][0] == "5000"
              and resolved["fsdp_activation_checkpointing"][0] == "false",
              f"the runtime must read the policy: {resolved}")
        # Without FSDP a multi-GPU file has no fsdp_config section (config.RoundTripEveryDocExample: multi-gpu).
        code, out, err = accel("config", "--config_file", path, stdin="0\n1\n1\nno\n2\nno\n")
        check(code == 0 and "FullyShardedDataParallel" not in out and "fsdp_config" not in load_yaml(path),
              "multi-CPU: FSDP is not offered, as in Accelerate", out + err)


def QuestionnaireOffersZeroStages():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "zero.yaml")
        # One GPU, no CPU-only: DeepSpeed is offered (as Accelerate offers it); stage 0 is asked again; stage 1 has
        # no offload question (Accelerate asks it for stages 2 and 3).
        answers = ["0", "0", "no", "yes", "0", "1", "2", "yes", "0.5", "1", "no"]
        code, out, err = accel("config", "--config_file", path, stdin="\n".join(answers) + "\n")
        check(code == 0, "accel config must write a ZeRO-1 file", out + err)
        check("Please enter a whole number between 1 and 3." in out, "stage 0 must be asked again", out)
        check("offload optimizer states" not in out, "no offload question for stage 1", out)
        written = load_yaml(path)
        check(written["distributed_type"] == "DEEPSPEED" and written["num_processes"] == 1 and "gpu_ids" not in written
              and written["deepspeed_config"] == {"zero_stage": 1, "gradient_accumulation_steps": 2,
                                                  "gradient_clipping": 0.5, "zero3_init_flag": False},
              f"a ZeRO-1 file with Accelerate's keys: {written}")
        code, out, err = accel("config", "--validate", path)
        check(code == 0, "the file must pass --validate", err)
        # Stage 3 runs the fsdp strategy: both of Accelerate's offload questions, whose cpu runs as fsdp_offload_params;
        # Accelerate's other stage-3 keys off.
        for devices in (["none", "none"], ["none", "cpu"], ["cpu", "none"]):
            answers = ["0", "2", "1", "no", "yes", "3", *devices, "1", "no", "2", "bf16"]
            code, out, err = accel("config", "--config_file", path, stdin="\n".join(answers) + "\n")
            check(code == 0 and "ZeRO stage 3 runs accelerate-cpp's fsdp strategy (FULL_SHARD)" in out
                  and "Where to offload optimizer states" in out and "Where to offload parameters" in out,
                  "accel config must write a ZeRO-3 file", out + err)
            written = load_yaml(path)
            check(written["distributed_type"] == "DEEPSPEED" and written["deepspeed_config"] == {
                "zero_stage": 3, "offload_optimizer_device": devices[0], "offload_param_device": devices[1],
                "zero3_save_16bit_model": False, "zero3_init_flag": False, "gradient_accumulation_steps": 1},
                f"a ZeRO-3 file with Accelerate's keys: {written}")
            code, out, err = accel("config", "--validate", path)
            check(code == 0, "the ZeRO-3 file must pass --validate", err)
            resolved = probe(environment(ACCELERATE_CONFIG_FILE=path))
            offloads = "cpu" in devices
            device = "offload_param_device" if devices[1] == "cpu" else "offload_optimizer_device"
            check(resolved["parallel_strategy"] == ("fsdp", f"zero_stage 3 from config file {path}")
                  and resolved["fsdp_sharding_strategy"] == ("FULL_SHARD", f"zero_stage 3 from config file {path}")
                  and resolved["fsdp_offload_params"] == (
                      ("true", f"{device} cpu with zero_stage 3 from config file {path}") if offloads
                      else ("false", "default")),
                  f"the runtime must run ZeRO-3 as fsdp, offloading with DeepSpeed's cpu offload: {resolved}")
        # CPU only: DeepSpeed is not offered, as in Accelerate.
        code, out, err = accel("config", "--config_file", path, stdin="0\n0\nyes\nno\n")
        check(code == 0 and "DeepSpeed" not in out and load_yaml(path)["distributed_type"] == "NO",
              "CPU only: no DeepSpeed question", out + err)


def EndOfInputIsOneLineExit2():
    code, out, err = accel("config", "--config_file", "/tmp/never-written.yaml", stdin="0\n1\n")
    check(code == 2, f"input ending early must exit 2 (got {code})", err)
    check(len(err.splitlines()) == 1 and "the input ended before every question was answered" in err,
          "one line naming the problem", err)
    check(not os.path.exists("/tmp/never-written.yaml"), "nothing may be written")


# ------------------------------------------------------------------------------------------- Python Accelerate

def need_accelerate():
    try:
        import accelerate  # noqa: F401
    except ImportError:
        raise Skip(f"Python Accelerate is not installed for {sys.executable} (pip install accelerate)")


def PythonAccelerateLoadsOurs():
    need_accelerate()
    from accelerate.commands.config.config_args import load_config_from_file
    with tempfile.TemporaryDirectory() as directory:
        for name in ANSWERS:
            path = write_example(name, directory)
            ours = load_yaml(path)
            theirs = load_config_from_file(path).to_dict()
            differing = {k: (v, theirs.get(k)) for k, v in ours.items() if theirs.get(k) != v}
            check(not differing, f"Python Accelerate read {name} differently: {differing}")
            print(f"{name}: Python Accelerate reads all {len(ours)} keys as written")


# Python Accelerate's files that ask for what accelerate-cpp does not run yet, and why (none today: its default
# FSDP answers, automatic wrapping of the `Block` class, are run).
REFUSED_YAMLS = {}


def PythonAccelerateYamlsAreAccepted():
    files = sorted(f for f in os.listdir(PYTHON_YAMLS) if f.endswith(".yaml"))
    check(len(files) >= 10, f"expected the Python-written configs in {PYTHON_YAMLS}")
    for name in files:
        path = os.path.join(PYTHON_YAMLS, name)
        code, out, err = accel("config", "--validate", path)
        if name in REFUSED_YAMLS:
            expected = f"accel config: {path}:{REFUSED_YAMLS[name]}"
            check(code == 2 and err.splitlines() == [expected], f"accel must refuse {name} in one line: {expected!r}",
                  f"exit {code}\n{err}")
            print(f"{name}: refused (automatic wrapping)")
            continue
        check(code == 0, f"accel must accept {name}, written by Python Accelerate", err)
        print(out.strip())


# Computes what Python Accelerate's launcher exports for each config file given (its own code, not a copy):
# one JSON object per file, one a line.
ORACLE = r"""
import json, sys
from accelerate.commands.launch import launch_command_parser, _validate_launch_command
from accelerate.utils.launch import prepare_multi_gpu_env, prepare_deepspeed_cmd_env, prepare_simple_launcher_cmd_env
for path in sys.argv[1:]:
    args = launch_command_parser().parse_args(["--config_file", path, "--no_python", "true"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        env = prepare_deepspeed_cmd_env(args)[1]
    elif args.use_fsdp or args.multi_gpu:
        env = prepare_multi_gpu_env(args)
    else:
        env = prepare_simple_launcher_cmd_env(args)[1]
    print(json.dumps({k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_", "CUDA_VISIBLE"))}))
"""

# Variables accel exports that Python's launcher leaves out on some paths (accel exports them always).
ACCEL_ONLY = {"ACCELERATE_USE_CPU", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
              # the job's identity and its watch (our own: the run id, rank 0's held store socket, heartbeats)
              "ACCELERATE_RUN_ID", "ACCELERATE_STORE_LISTEN_FD", "ACCELERATE_HEARTBEAT_DIR"}
# Python-only: torch.compile settings (libtorch's C++ API has none) and the CPU-affinity switch.
PYTHON_ONLY_PREFIXES = ("ACCELERATE_DYNAMO_", "ACCELERATE_CPU_AFFINITY")


def free_port():
    with socket.socket() as listener:  # a free port, given explicitly: port 0 is for one machine only
        listener.bind(("127.0.0.1", 0))
        return str(listener.getsockname()[1])


def accel_exports(config_path):
    """The ACCELERATE_*/FSDP_*/CUDA_VISIBLE_DEVICES variables rank 0 gets from `accel launch` for a config."""
    port = free_port()
    code, out, err = accel("launch", "-q", "--config_file", config_path, "--main_process_port", port, "env")
    check(code == 0, f"accel launch env with {config_path} must exit 0", out + err)
    lines = [re.sub(r"^\[rank0\]: ", "", line) for line in out.splitlines()
             if not line.startswith("[rank") or line.startswith("[rank0]: ")]
    pairs = dict(line.split("=", 1) for line in lines if "=" in line)
    return {k: v for k, v in pairs.items() if k.startswith(("ACCELERATE_", "FSDP_", "CUDA_VISIBLE"))}


def LaunchExportsWhatPythonAccelerateExports():
    need_accelerate()
    files = sorted(f for f in os.listdir(PYTHON_YAMLS) if f.endswith(".yaml") and f not in REFUSED_YAMLS)
    for name in ["zero2.yaml", "zero3.yaml", "fsdp1_no_wrap.yaml", "fsdp2_no_wrap.yaml"]:
        check(name in files, f"Python Accelerate's {name} must be among those compared")
    compare_exports(files, [os.path.join(PYTHON_YAMLS, name) for name in files])


def LaunchExportsWhatPythonAccelerateExportsForOurFiles():
    # The DeepSpeed and FSDP files accel config writes: Python's launcher computes the same variables from them.
    need_accelerate()
    with tempfile.TemporaryDirectory() as directory:
        names = ["deepspeed-zero2", "fsdp"]
        paths = [write_example(name, directory) for name in names]
        # The FSDP answers with activation checkpointing: Python reads the key as written, and its launcher exports
        # FSDP_ACTIVATION_CHECKPOINTING=true as accel launch does.
        path = os.path.join(directory, "fsdp-checkpointing.yaml")
        answers = ["yes" if "activation checkpointing" in question else answer for question, answer in ANSWERS["fsdp"]]
        code, out, err = accel("config", "--config_file", path, stdin="".join(answer + "\n" for answer in answers))
        check(code == 0 and load_yaml(path)["fsdp_config"]["fsdp_activation_checkpointing"] is True,
              "accel config must write fsdp_activation_checkpointing: true", out + err)
        from accelerate.commands.config.config_args import load_config_from_file
        check(load_config_from_file(path).to_dict()["fsdp_config"]["fsdp_activation_checkpointing"] is True,
              "Python Accelerate must read fsdp_activation_checkpointing: true")
        compare_exports(names + ["fsdp with activation checkpointing"], paths + [path])
        check(accel_exports(path).get("FSDP_ACTIVATION_CHECKPOINTING") == "true",
              "accel launch must export FSDP_ACTIVATION_CHECKPOINTING=true")


def python_exports(paths):
    """For each config file, the variables Python Accelerate's launcher exports for it (ORACLE)."""
    oracle = subprocess.run([sys.executable, "-c", ORACLE, *paths], capture_output=True, text=True, timeout=120,
                            env=environment())
    check(oracle.returncode == 0, "Python Accelerate's launcher code failed", oracle.stderr[-2000:])
    answers = [line for line in oracle.stdout.splitlines() if line.startswith("{")]
    check(len(answers) == len(paths), "expected one answer per file from Python Accelerate", oracle.stdout)
    return [json.loads(answer) for answer in answers]


def compare_exports(files, paths):
    for name, path, answer in zip(files, paths, python_exports(paths)):
        theirs = {k: v for k, v in answer.items() if not k.startswith(PYTHON_ONLY_PREFIXES)}
        ours = accel_exports(path)
        missing = {k: v for k, v in theirs.items() if ours.get(k) != v}
        extra = {k: v for k, v in ours.items() if k not in theirs and k not in ACCEL_ONLY}
        check(not missing and not extra, f"{name}: accel launch exports differ from Python Accelerate's",
              f"Python sets, accel differs: {missing} (accel: { {k: ours.get(k) for k in missing} })\n"
              f"accel sets, Python does not: {extra}")
        print(f"{name}: {len(theirs)} variables as Python Accelerate exports them")


# ------------------------------------------------------------------------------------------- validation

BAD_FILES = [
    ("distributed_type: MULTI_CPU\nnum_proceses: 2\n",
     "f.yaml:2:1: unknown key 'num_proceses' (did you mean 'num_processes'?)"),
    ("distributed_type: MULTI_CPU\nmixed_precision: fp17\n",
     "f.yaml:2:18: mixed_precision must be one of no, fp16, bf16, fp8 (got 'fp17')"),
    ("distributed_type: MULTI_CPU\nnum_processes: 0\n",
     "f.yaml:2:1: num_processes must be a whole number >= 1, or -1 to give --num_processes at launch (got 0)"),
    ("distributed_type: [MULTI_CPU\nnum_processes: 2\n",
     "f.yaml:2:14: malformed YAML: end of sequence flow not found (fix the syntax there)"),
    ("distributed_type: TPU\n", "f.yaml:1:19: distributed_type must be one of NO, MULTI_CPU, MULTI_GPU, FSDP, "
     "DEEPSPEED, MEGATRON_LM, XLA, MULTI_XPU, MULTI_HPU, MULTI_NPU, MULTI_MLU, MULTI_SDAA, MULTI_MUSA, "
     "MULTI_NEURON (got 'TPU')"),
    ("distributed_type: XLA\n", "f.yaml:1:1: distributed_type XLA is not supported by accelerate-cpp, which runs "
     "libtorch on CPUs and CUDA GPUs (use one of NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: nvme\n",
     "f.yaml:3:3: deepspeed_config.offload_optimizer_device nvme: accelerate-cpp does not offload to NVMe (use none "
     "or cpu)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_param_device: cpu\n",
     "f.yaml:3:3: deepspeed_config.offload_param_device cpu conflicts with zero_stage 2 (Accelerate's default): "
     "DeepSpeed offloads parameters at ZeRO stage 3 only (use zero_stage 3, where it runs as fsdp_offload_params true, "
     "or offload_param_device none)"),
    ("distributed_type: DEEPSPEED\nmixed_precision: bf16\ndeepspeed_config:\n  deepspeed_config_file: ds_config.json\n"
     "  zero_stage: 2\n",
     "f.yaml:5:3: with deepspeed_config_file set, Accelerate ignores these config keys and refuses them: zero_stage, "
     "mixed_precision. Give them in the DeepSpeed config file (gradient_accumulation_steps, gradient_clipping, "
     "zero_optimization.stage, zero_optimization.offload_optimizer.device, zero_optimization.offload_param.device, "
     "fp16.enabled or bf16.enabled) and remove them here"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  zero3_init_flag: true\n",
     "f.yaml:4:3: deepspeed_config.zero3_init_flag true is for ZeRO stage 3's partitioned construction "
     "(deepspeed.zero.Init), which accelerate-cpp does not do: every process builds the whole model and prepare() "
     "shards it (use false)"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_verison: 2\n",
     "f.yaml:3:3: unknown key 'fsdp_verison' in fsdp_config (did you mean 'fsdp_version'?)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n",
     "f.yaml:3:15: deepspeed_config.zero_stage must be a whole number between 0 and 3 (got '4')"),
    ("distributed_type: MULTI_CPU\nnum_machines: 2\nmachine_rank: 2\n",
     "f.yaml:3:1: machine_rank must be below num_machines 2 (got 2)"),
    ("num_processes: 2\n", "f.yaml: distributed_type is missing (add one of NO, MULTI_CPU, MULTI_GPU, FSDP, "
     "DEEPSPEED; `accel config` writes a complete file)"),
    ("- a\n- b\n", "f.yaml:1:1: must be a map of keys to values, like `distributed_type: MULTI_CPU` (got a list)"),
    ("distributed_type: NO\nuse_cpu: maybe\n", "f.yaml:2:10: use_cpu must be true or false (got 'maybe')"),
]


def ValidateNamesTheLineAndTheFix():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "f.yaml")
        for text, expected in BAD_FILES:
            with open(path, "w") as file:
                file.write(text)
            code, out, err = accel("config", "--validate", path)
            expected_line = "accel config: " + expected.replace("f.yaml", path, 1)
            check(code == 2 and err.splitlines() == [expected_line],
                  f"expected exit 2 and one line: {expected_line!r}", f"exit {code}\n{err}")
        code, out, err = accel("config", "--validate", os.path.join(directory, "missing.yaml"))
        check(code == 2 and "cannot read the config file: No such file or directory" in err, "a missing file", err)
        code, out, err = accel("launch", "--config_file", path, "true")
        check(code == 2 and len(err.splitlines()) == 1 and err.startswith("accel launch: " + path),
              "accel launch must refuse a bad config in one line", err)


# ------------------------------------------------------------------------------------------- FSDP

def expect(resolved, what, **fields):
    """Checks each field of `resolved` (the runtime's {option: (value, source)}): a value, or (value, source)."""
    for name, wanted in fields.items():
        got = resolved.get(name)
        ok = got == wanted if isinstance(wanted, tuple) else got is not None and got[0] == wanted
        check(ok, f"{what}: expected {name} {wanted!r}, the runtime resolved {got!r}")


def write_file(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as file:
        file.write(text)
    return path


def RuntimeSelectsFsdpAndReadsAccelerateSpellings():
    # Every way to ask for FSDP selects the fsdp strategy, each named as the source; the engine reads three
    # fields, always in their upper-case names.
    expect(probe(environment(), "parallel_strategy=fsdp"), "parallel_strategy(\"fsdp\")",
           parallel_strategy=("fsdp", "options"), fsdp_sharding_strategy=("FULL_SHARD", "default"),
           fsdp_reshard_after_forward=("true", "default"), fsdp_version=("1", "default"),
           fsdp_state_dict_type=("SHARDED_STATE_DICT", "default"))
    expect(probe(environment(ACCELERATE_PARALLEL_STRATEGY="fsdp")), "ACCELERATE_PARALLEL_STRATEGY=fsdp",
           parallel_strategy=("fsdp", "environment"))
    expect(probe(environment(ACCELERATE_USE_FSDP="true")), "ACCELERATE_USE_FSDP=true",
           parallel_strategy=("fsdp", "ACCELERATE_USE_FSDP=true in the environment"))
    # Booleans as Accelerate's str_to_bool reads them (what accel accepts too).
    expect(probe(environment(ACCELERATE_USE_FSDP="T", FSDP_OFFLOAD_PARAMS="on", FSDP_FORWARD_PREFETCH="Y",
                             FSDP_ACTIVATION_CHECKPOINTING="yes", FSDP_SYNC_MODULE_STATES="off")),
           "ACCELERATE_USE_FSDP=T, FSDP_OFFLOAD_PARAMS=on, FSDP_FORWARD_PREFETCH=Y",
           parallel_strategy=("fsdp", "ACCELERATE_USE_FSDP=T in the environment"),
           fsdp_offload_params=("true", "environment"), fsdp_forward_prefetch=("true", "environment"),
           fsdp_activation_checkpointing=("true", "environment"))
    expect(probe(environment(), "zero_stage=3"), "zero_stage(3)",
           parallel_strategy=("fsdp", "zero_stage 3 from AcceleratorOptions"),
           fsdp_sharding_strategy=("FULL_SHARD", "zero_stage 3 from AcceleratorOptions"))
    expect(probe(environment(ACCELERATE_DEEPSPEED_ZERO_STAGE="3", ACCELERATE_PARALLEL_STRATEGY="fsdp")),
           "ZeRO stage 3 with parallel_strategy fsdp", parallel_strategy=("fsdp", "environment"), zero_stage="3")
    # Accelerate ignores FSDP_* variables without ACCELERATE_USE_FSDP; so does the runtime.
    expect(probe(environment(FSDP_OFFLOAD_PARAMS="true", FSDP_AUTO_WRAP_POLICY="SIZE_BASED_WRAP")),
           "FSDP_* without FSDP", parallel_strategy=("ddp", "default"))
    with tempfile.TemporaryDirectory() as directory:
        cases = [("distributed_type: FSDP\n", "distributed_type: FSDP"),
                 ("distributed_type: MULTI_GPU\nfsdp_config:\n  fsdp_version: 2\n", "the fsdp_config section")]
        for text, what in cases:
            path = write_file(directory, "fsdp.yaml", text)
            expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), text,
                   parallel_strategy=("fsdp", f"{what} in config file {path}"))
            expect(probe(environment(ACCELERATE_CONFIG_FILE=path, ACCELERATE_USE_FSDP="false")),
                   "ACCELERATE_USE_FSDP=false overrides the file", parallel_strategy=("ddp", "default"))
        path = write_file(directory, "empty.yaml", "distributed_type: MULTI_CPU\nfsdp_config: {}\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "an empty fsdp_config asks for nothing",
               parallel_strategy=("ddp", "default"))
        path = write_file(directory, "zero3.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "deepspeed_config.zero_stage 3",
               parallel_strategy=("fsdp", f"zero_stage 3 from config file {path}"),
               fsdp_sharding_strategy=("FULL_SHARD", f"zero_stage 3 from config file {path}"))
        # Accelerate's spellings in the file: keys without the fsdp_ prefix, numbers, any case, and FSDP1's strategy
        # under fsdp_reshard_after_forward (what Accelerate's questionnaire writes for version 1).
        path = write_file(directory, "spelled.yaml", "distributed_type: FSDP\nfsdp_config:\n  sharding_strategy: 2\n"
                                                     "  version: 2\n  state_dict_type: full_state_dict\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "unprefixed keys",
               fsdp_sharding_strategy=("SHARD_GRAD_OP", f"config file {path}"),
               fsdp_reshard_after_forward=("false", f"fsdp_sharding_strategy SHARD_GRAD_OP from config file {path}"),
               fsdp_version=("2", f"config file {path}"),
               fsdp_state_dict_type=("FULL_STATE_DICT", f"config file {path}"))
        path = write_file(directory, "fsdp1.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                   "  fsdp_reshard_after_forward: NO_SHARD\n  fsdp_version: 1\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "FSDP1's spelling",
               fsdp_sharding_strategy=("NO_SHARD", f"fsdp_reshard_after_forward NO_SHARD from config file {path}"),
               fsdp_reshard_after_forward=("false", f"config file {path}"))
    # Each spelling Accelerate accepts, from the environment, alongside the other variable as Hugging Face's launcher
    # exports it when it was not given (FSDP_RESHARD_AFTER_FORWARD=true, FSDP_SHARDING_STRATEGY=FULL_SHARD).
    for text, name in [("FULL_SHARD", "FULL_SHARD"), ("shard_grad_op", "SHARD_GRAD_OP"), ("No_Shard", "NO_SHARD"),
                       ("1", "FULL_SHARD"), ("2", "SHARD_GRAD_OP"), ("3", "NO_SHARD"), ("hybrid_shard", "HYBRID_SHARD"),
                       ("4", "HYBRID_SHARD"), ("_HYBRID_SHARD_ZERO2", "HYBRID_SHARD_ZERO2"), ("5", "HYBRID_SHARD_ZERO2")]:
        expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_SHARDING_STRATEGY=text,
                                 FSDP_RESHARD_AFTER_FORWARD="true")),
               f"FSDP_SHARDING_STRATEGY={text}", fsdp_sharding_strategy=name)
    for text, name in [("false", "SHARD_GRAD_OP"), ("true", "FULL_SHARD"), ("shard_grad_op", "SHARD_GRAD_OP"),
                       ("no_shard", "NO_SHARD"), ("full_shard", "FULL_SHARD"), ("hybrid_shard", "HYBRID_SHARD"),
                       ("_hybrid_shard_zero2", "HYBRID_SHARD_ZERO2")]:
        expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_SHARDING_STRATEGY="FULL_SHARD",
                                 FSDP_RESHARD_AFTER_FORWARD=text)),
               f"FSDP_RESHARD_AFTER_FORWARD={text}", fsdp_sharding_strategy=name)
    expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_RESHARD_AFTER_FORWARD="false")), "reshard false",
           fsdp_sharding_strategy=("SHARD_GRAD_OP", "fsdp_reshard_after_forward false from the environment"))
    expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_SHARDING_STRATEGY="NO_SHARD",
                             FSDP_RESHARD_AFTER_FORWARD="false")), "NO_SHARD agrees with false",
           fsdp_sharding_strategy=("NO_SHARD", "environment"))
    expect(probe(environment(FSDP_RESHARD_AFTER_FORWARD="true"), "parallel_strategy=fsdp",
                 "fsdp_sharding_strategy=shard_grad_op"), "an option beats the launcher's default",
           fsdp_sharding_strategy=("SHARD_GRAD_OP", "options"),
           fsdp_reshard_after_forward=("false", "fsdp_sharding_strategy SHARD_GRAD_OP from AcceleratorOptions"))
    # A boolean agrees with the hybrid strategy that reshards alike (true HYBRID_SHARD, false HYBRID_SHARD_ZERO2).
    for strategy, reshard in [("HYBRID_SHARD", "true"), ("HYBRID_SHARD_ZERO2", "false")]:
        expect(probe(environment(), "parallel_strategy=fsdp", f"fsdp_sharding_strategy={strategy}",
                     f"fsdp_reshard_after_forward={reshard}"), f"{strategy} agrees with {reshard}",
               fsdp_sharding_strategy=(strategy, "options"), fsdp_reshard_after_forward=(reshard, "options"))
    expect(probe(environment(), "parallel_strategy=fsdp", "fsdp_reshard_after_forward=false"), "reshard option",
           fsdp_sharding_strategy=("SHARD_GRAD_OP", "fsdp_reshard_after_forward false from AcceleratorOptions"))
    for text, name in [("full_state_dict", "FULL_STATE_DICT"), ("SHARDED_STATE_DICT", "SHARDED_STATE_DICT"),
                       ("1", "FULL_STATE_DICT"), ("3", "SHARDED_STATE_DICT")]:
        expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_STATE_DICT_TYPE=text)),
               f"FSDP_STATE_DICT_TYPE={text}", fsdp_state_dict_type=(name, "environment"))
    expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")), "FSDP_VERSION=2",
           fsdp_version=("2", "environment"))
    # What Hugging Face's launcher exports for settings without effect here, and for the defaults, is accepted.
    accepted = dict(FSDP_BACKWARD_PREFETCH="backward_post", FSDP_FORWARD_PREFETCH="true", FSDP_USE_ORIG_PARAMS="false",
                    FSDP_SYNC_MODULE_STATES="false", FSDP_CPU_RAM_EFFICIENT_LOADING="true",
                    FSDP_MIN_NUM_PARAMS="100000000", FSDP_AUTO_WRAP_POLICY="NO_WRAP", FSDP_OFFLOAD_PARAMS="false",
                    FSDP_ACTIVATION_CHECKPOINTING="false", FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD="false")
    expect(probe(environment(ACCELERATE_USE_FSDP="true", **accepted)), "settings without effect",
           parallel_strategy="fsdp")
    # Automatic wrapping: Accelerate's policy names in any case (resolved to upper case), the classes as given, the
    # threshold; from the environment, the file (a YAML list of classes is read as Accelerate's comma-separated text)
    # and the options; NO_WRAP and Accelerate's threshold by default.
    expect(probe(environment(), "parallel_strategy=fsdp"), "wrap defaults",
           fsdp_auto_wrap_policy=("NO_WRAP", "default"), fsdp_min_num_params=("100000000", "default"))
    expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_AUTO_WRAP_POLICY="transformer_based_wrap",
                             FSDP_TRANSFORMER_CLS_TO_WRAP="Block, ns::Layer", FSDP_MIN_NUM_PARAMS="5")),
           "FSDP_AUTO_WRAP_POLICY", fsdp_auto_wrap_policy=("TRANSFORMER_BASED_WRAP", "environment"),
           fsdp_transformer_layer_cls_to_wrap=("Block, ns::Layer", "environment"),
           fsdp_min_num_params=("5", "environment"))
    expect(probe(environment(), "parallel_strategy=fsdp", "fsdp_auto_wrap_policy=Size_Based_Wrap",
                 "fsdp_min_num_params=0"), "wrap options",
           fsdp_auto_wrap_policy=("SIZE_BASED_WRAP", "options"), fsdp_min_num_params=("0", "options"))
    with tempfile.TemporaryDirectory() as directory:
        path = write_file(directory, "wrap.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                   "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                                                   "  fsdp_transformer_layer_cls_to_wrap: [Block, Pair]\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "a file's wrap policy",
               fsdp_auto_wrap_policy=("TRANSFORMER_BASED_WRAP", f"config file {path}"),
               fsdp_transformer_layer_cls_to_wrap=("Block,Pair", f"config file {path}"))
    # Activation checkpointing: off by default; Accelerate's variable (its flag's spellings), the file's key and
    # the option turn it on, each named as the source.
    expect(probe(environment(), "parallel_strategy=fsdp"), "activation checkpointing default",
           fsdp_activation_checkpointing=("false", "default"))
    for text in ["true", "True", "1"]:
        expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_ACTIVATION_CHECKPOINTING=text)),
               f"FSDP_ACTIVATION_CHECKPOINTING={text}", parallel_strategy="fsdp",
               fsdp_activation_checkpointing=("true", "environment"))
    expect(probe(environment(), "parallel_strategy=fsdp", "fsdp_activation_checkpointing=true"),
           "activation checkpointing option", fsdp_activation_checkpointing=("true", "options"))
    with tempfile.TemporaryDirectory() as directory:
        path = write_file(directory, "checkpointing.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                           "  fsdp_activation_checkpointing: true\n"
                                                           "  fsdp_activation_checkpointing_offload: false\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "a file's activation checkpointing",
               parallel_strategy="fsdp", fsdp_activation_checkpointing=("true", f"config file {path}"),
               fsdp_activation_checkpointing_offload=("false", f"config file {path}"))
        # With its offload (the inputs checkpointed units keep, in CPU memory on a GPU run): from the file, and
        # Accelerate's variable over the file.
        path = write_file(directory, "offload.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                     "  fsdp_activation_checkpointing: true\n"
                                                     "  fsdp_activation_checkpointing_offload: true\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "a file's activation checkpointing offload",
               fsdp_activation_checkpointing_offload=("true", f"config file {path}"))
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path, FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD="false")),
               "the environment's activation checkpointing offload over the file's",
               fsdp_activation_checkpointing_offload=("false", "environment"))
    expect(probe(environment(), "parallel_strategy=fsdp"), "activation checkpointing offload default",
           fsdp_activation_checkpointing_offload=("false", "default"))
    # Parameter offload: off by default; Accelerate's variable (its flag's spellings), the file's key and the option
    # turn it on, each named as the source (the fsdp strategy takes it as a no-op on the CPU).
    expect(probe(environment(), "parallel_strategy=fsdp"), "parameter offload default",
           fsdp_offload_params=("false", "default"))
    for text in ["true", "True", "1"]:
        expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_OFFLOAD_PARAMS=text)),
               f"FSDP_OFFLOAD_PARAMS={text}", parallel_strategy="fsdp", fsdp_offload_params=("true", "environment"))
    expect(probe(environment(), "parallel_strategy=fsdp", "fsdp_offload_params=true"),
           "parameter offload option", fsdp_offload_params=("true", "options"))
    with tempfile.TemporaryDirectory() as directory:
        path = write_file(directory, "offload.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                     "  fsdp_offload_params: true\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "a file's parameter offload",
               parallel_strategy="fsdp", fsdp_offload_params=("true", f"config file {path}"))
    # Prefetch: Accelerate's names in any case, from each source; the older key is read when the newer is unset.
    expect(probe(environment(), "parallel_strategy=fsdp"), "prefetch defaults",
           fsdp_backward_prefetch=("BACKWARD_PRE", "default"), fsdp_forward_prefetch=("false", "default"))
    for text, name in [("BACKWARD_PRE", "BACKWARD_PRE"), ("backward_post", "BACKWARD_POST"),
                       ("No_Prefetch", "NO_PREFETCH")]:
        expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_BACKWARD_PREFETCH=text,
                                 FSDP_CPU_RAM_EFFICIENT_LOADING="false", FSDP_MIN_NUM_PARAMS="0")),
               f"FSDP_BACKWARD_PREFETCH={text}", parallel_strategy="fsdp",
               fsdp_backward_prefetch=(name, "environment"))
    expect(probe(environment(ACCELERATE_USE_FSDP="true", FSDP_FORWARD_PREFETCH="true")), "FSDP_FORWARD_PREFETCH",
           fsdp_forward_prefetch=("true", "environment"))
    expect(probe(environment(), "parallel_strategy=fsdp", "fsdp_forward_prefetch=true",
                 "fsdp_backward_prefetch=backward_post"), "prefetch options",
           fsdp_forward_prefetch=("true", "options"), fsdp_backward_prefetch=("BACKWARD_POST", "options"))
    with tempfile.TemporaryDirectory() as directory:
        path = write_file(directory, "older.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                    "  fsdp_backward_prefetch_policy: NO_PREFETCH\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "fsdp_backward_prefetch_policy",
               fsdp_backward_prefetch=("NO_PREFETCH", f"config file {path}"))
        path = write_file(directory, "both.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                                   "  fsdp_backward_prefetch_policy: NO_PREFETCH\n"
                                                   "  fsdp_backward_prefetch: backward_post\n")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=path)), "the newer key wins",
               fsdp_backward_prefetch=("BACKWARD_POST", f"config file {path}"))


# The runtime's refusals: (environment, AcceleratorOptions, the message). PATH is the config file's path.
FSDP_ENV = {"ACCELERATE_USE_FSDP": "true"}
RUNTIME_REFUSALS = [
    # Automatic wrapping: a policy of Accelerate's, a threshold >= 0, classes for TRANSFORMER_BASED_WRAP.
    ({**FSDP_ENV, "FSDP_AUTO_WRAP_POLICY": "FOO"}, [],
     "fsdp_auto_wrap_policy='FOO' (from the environment) is not an automatic wrapping policy; use "
     "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP (Accelerate's names, in any case)"),
    ({**FSDP_ENV, "FSDP_MIN_NUM_PARAMS": "-1"}, [],
     "fsdp_min_num_params='-1' (from the environment) must be a whole number >= 0 (parameter elements)"),
    ({**FSDP_ENV, "FSDP_MIN_NUM_PARAMS": "1e8"}, [],
     "fsdp_min_num_params='1e8' (from the environment) is not a whole number"),
    ({**FSDP_ENV, "FSDP_AUTO_WRAP_POLICY": "transformer_based_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP": " , "}, [],
     "fsdp_auto_wrap_policy='TRANSFORMER_BASED_WRAP' (from the environment) makes units of the module classes "
     "fsdp_transformer_layer_cls_to_wrap lists, and it lists none (name the classes, comma-separated"),
    ({}, ["parallel_strategy=ddp", "fsdp_min_num_params=1000"],
     "fsdp_min_num_params='1000' (from AcceleratorOptions) conflicts with parallel_strategy='ddp'"),
    # Offloading what checkpointed units keep, without activation checkpointing.
    ({**FSDP_ENV, "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "true"}, [],
     "fsdp_activation_checkpointing_offload='true' (from the environment) conflicts with "
     "fsdp_activation_checkpointing='false' (from the default): only the inputs a checkpointed unit keeps can be "
     "offloaded, and without activation checkpointing no unit keeps them (set fsdp_activation_checkpointing true as "
     "well, or fsdp_activation_checkpointing_offload false)"),
    ({}, ["parallel_strategy=fsdp", "fsdp_activation_checkpointing_offload=true",
          "fsdp_activation_checkpointing=false"],
     "fsdp_activation_checkpointing_offload='true' (from AcceleratorOptions) conflicts with "
     "fsdp_activation_checkpointing='false' (from AcceleratorOptions)"),
    # What comes in a later version, from the environment and from the file.
    ({**FSDP_ENV, "FSDP_IGNORED_MODULES": "head"}, [],
     "FSDP_IGNORED_MODULES='head' (from the environment) names modules FSDP should leave unsharded, which "
     "accelerate-cpp's fsdp strategy does not have (remove it)"),
    ({**FSDP_ENV, "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu"}, [],
     "offload_optimizer_device='cpu' (from the environment) conflicts with parallel_strategy='fsdp' (from "
     "ACCELERATE_USE_FSDP=true in the environment): the fsdp strategy keeps the optimizer state in CPU memory with "
     "fsdp_offload_params (use none, and fsdp_offload_params true in fsdp_config, FSDP_OFFLOAD_PARAMS=true or "
     "--fsdp_offload_params true: the shards, their gradients and the optimizer state in CPU memory; ZeRO stage 1 or 2 "
     "offloads the optimizer state alone, and zero_stage 3 takes DeepSpeed's offload as fsdp_offload_params)"),
    ({}, ["parallel_strategy=fsdp", "fsdp_sharding_strategy=HYBRID_SHARD", "fsdp_reshard_after_forward=false"],
     "fsdp_sharding_strategy='HYBRID_SHARD' (from AcceleratorOptions) conflicts with fsdp_reshard_after_forward="
     "'false' (from AcceleratorOptions): fsdp_reshard_after_forward true means FULL_SHARD (or HYBRID_SHARD), "
     "false SHARD_GRAD_OP (or NO_SHARD, HYBRID_SHARD_ZERO2)"),
    ({**FSDP_ENV, "FSDP_STATE_DICT_TYPE": "LOCAL_STATE_DICT"}, [],
     "fsdp_state_dict_type='LOCAL_STATE_DICT' (from the environment) is FSDP1's per-process flat shards, which "
     "neither FSDP2 nor accelerate-cpp writes (use SHARDED_STATE_DICT: each process writes its shards, or "
     "FULL_STATE_DICT: the main process writes whole models)"),
    ({}, ["parallel_strategy=fsdp", "fsdp_state_dict_type=2"], "fsdp_state_dict_type='2' (from AcceleratorOptions) "
     "is FSDP1's per-process flat shards"),
    # Bad values: the key, the value, where it came from and what is accepted.
    ({**FSDP_ENV, "FSDP_BACKWARD_PREFETCH": "sideways"}, [],
     "fsdp_backward_prefetch='sideways' (from the environment) is not a backward prefetch policy; use BACKWARD_PRE, "
     "BACKWARD_POST or NO_PREFETCH"),
    ({**FSDP_ENV, "FSDP_VERSION": "3"}, [],
     "fsdp_version='3' (from the environment) is not an FSDP version; use 1 or 2 (the same behaviour here)"),
    ({**FSDP_ENV, "FSDP_VERSION": "two"}, [], "fsdp_version='two' (from the environment) is not a whole number"),
    ({**FSDP_ENV, "FSDP_SHARDING_STRATEGY": "FULL"}, [],
     "fsdp_sharding_strategy='FULL' (from the environment) is not a sharding strategy; use FULL_SHARD, SHARD_GRAD_OP, "
     "NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (Accelerate's names, in any case, or its numbers 1 to 5)"),
    ({**FSDP_ENV, "FSDP_STATE_DICT_TYPE": "FULL"}, [],
     "fsdp_state_dict_type='FULL' (from the environment) is not a state dict type; use SHARDED_STATE_DICT (each "
     "process writes its shards) or FULL_STATE_DICT (the main process writes whole models)"),
    ({**FSDP_ENV, "FSDP_RESHARD_AFTER_FORWARD": "maybe"}, [],
     "fsdp_reshard_after_forward='maybe' (from the environment) is neither true nor false (FSDP2's spelling) nor a "
     "sharding strategy (FSDP1's: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2, in any "
     "case)"),
    ({**FSDP_ENV, "FSDP_FORWARD_PREFETCH": "maybe"}, [],
     "fsdp_forward_prefetch='maybe' (from the environment) is not a boolean; use true or false"),
    ({**FSDP_ENV, "FSDP_OFFLOAD_PARAMS": "maybe"}, [],
     "fsdp_offload_params='maybe' (from the environment) is not a boolean; use true or false"),
    # Settings that contradict each other: both named, with where each came from.
    ({**FSDP_ENV, "ACCELERATE_PARALLEL_STRATEGY": "ddp"}, [],
     "parallel_strategy='ddp' (from the environment) conflicts with ACCELERATE_USE_FSDP=true in the environment: FSDP "
     "runs the \"fsdp\" strategy. Leave parallel_strategy unset or set it to fsdp, or leave out the FSDP settings "
     "(distributed_type MULTI_GPU or MULTI_CPU without an fsdp_config section, ACCELERATE_USE_FSDP unset)"),
    ({**FSDP_ENV, "ACCELERATE_PARALLEL_STRATEGY": "zero"}, [],
     "parallel_strategy='zero' (from the environment) conflicts with ACCELERATE_USE_FSDP=true in the environment: FSDP "
     "runs the \"fsdp\" strategy."),
    ({}, ["parallel_strategy=zero", "zero_stage=3"],
     "parallel_strategy='zero' (from AcceleratorOptions) conflicts with zero_stage='3' (from AcceleratorOptions): "
     "ZeRO stage 3 shards the parameters too, which the \"fsdp\" strategy runs. Leave parallel_strategy unset "
     "(zero_stage 3 then selects fsdp) or set it to fsdp, or set zero_stage to 1 or 2"),
    ({"ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "ACCELERATE_PARALLEL_STRATEGY": "ddp"}, [],
     "parallel_strategy='ddp' (from the environment) conflicts with zero_stage='3' (from the environment): ZeRO stage "
     "3 runs the \"fsdp\" strategy. Leave parallel_strategy unset (zero_stage 3 then selects fsdp) or set it to "
     "fsdp, or set zero_stage to 0 to replicate the model"),
    ({}, ["parallel_strategy=fsdp", "zero_stage=2"],
     "parallel_strategy='fsdp' (from AcceleratorOptions) conflicts with zero_stage='2' (from AcceleratorOptions): a "
     "ZeRO stage of 1 or 2 runs the \"zero\" strategy. Set zero_stage to 3 (fully sharded, as fsdp) or 0, or leave "
     "it unset; or set parallel_strategy to zero"),
    ({**FSDP_ENV, "ACCELERATE_USE_DEEPSPEED": "true"}, [],
     "zero_stage='2' (from Accelerate's DeepSpeed default stage, for ACCELERATE_USE_DEEPSPEED=true in the "
     "environment) conflicts with ACCELERATE_USE_FSDP=true in the environment: a ZeRO stage of 1 or 2 runs the zero "
     "strategy, and FSDP the fsdp strategy; ask for one: leave out the DeepSpeed settings (or use zero_stage 3, "
     "which is fully sharded), or the FSDP ones"),
    ({**FSDP_ENV, "FSDP_SHARDING_STRATEGY": "NO_SHARD", "FSDP_RESHARD_AFTER_FORWARD": "shard_grad_op"}, [],
     "fsdp_sharding_strategy='NO_SHARD' (from the environment) conflicts with fsdp_reshard_after_forward="
     "'SHARD_GRAD_OP' (from the environment): fsdp_reshard_after_forward true means FULL_SHARD (or HYBRID_SHARD), "
     "false SHARD_GRAD_OP (or NO_SHARD, HYBRID_SHARD_ZERO2) (set one of the two, or make them agree)"),
    ({}, ["parallel_strategy=fsdp", "fsdp_sharding_strategy=NO_SHARD", "fsdp_reshard_after_forward=true"],
     "fsdp_sharding_strategy='NO_SHARD' (from AcceleratorOptions) conflicts with fsdp_reshard_after_forward='true' "
     "(from AcceleratorOptions)"),
    ({"FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP"}, ["zero_stage=3"],
     "fsdp_sharding_strategy='SHARD_GRAD_OP' (from the environment) conflicts with zero_stage='3' (from "
     "AcceleratorOptions): ZeRO stage 3 is fully sharded (FULL_SHARD); leave the sharding strategy unset or make it "
     "FULL_SHARD, or use zero_stage 2 (optimizer state and gradients sharded, as SHARD_GRAD_OP does)"),
    # An fsdp option in code without the fsdp strategy would do nothing.
    ({}, ["fsdp_version=2"],
     "fsdp_version='2' (from AcceleratorOptions) conflicts with parallel_strategy='ddp' (from the default): "
     "fsdp_version applies under the fsdp strategy only (here it would do nothing). Set parallel_strategy(\"fsdp\") "
     "too (or distributed_type: FSDP in the config file), or leave fsdp_version unset"),
    ({}, ["parallel_strategy=zero", "fsdp_state_dict_type=FULL_STATE_DICT"],
     "fsdp_state_dict_type='FULL_STATE_DICT' (from AcceleratorOptions) conflicts with parallel_strategy='zero' (from "
     "AcceleratorOptions): fsdp_state_dict_type applies under the fsdp strategy only"),
    ({}, ["fsdp_reshard_after_forward=false"],
     "fsdp_reshard_after_forward='false' (from AcceleratorOptions) conflicts with parallel_strategy='ddp'"),
    ({}, ["fsdp_activation_checkpointing=true"],
     "fsdp_activation_checkpointing='true' (from AcceleratorOptions) conflicts with parallel_strategy='ddp' (from "
     "the default): fsdp_activation_checkpointing applies under the fsdp strategy only"),
    ({}, ["fsdp_offload_params=true"],
     "fsdp_offload_params='true' (from AcceleratorOptions) conflicts with parallel_strategy='ddp'"),
]


def RuntimeRefusesWhatFsdpLacksNamingKeyValueAndSource():
    for overrides, options, expected in RUNTIME_REFUSALS:
        message = probe_refusal(environment(**overrides), *options)
        check(message.startswith("accelerate: " + expected), f"expected the message to begin {expected!r}",
              f"environment {overrides}, options {options}\n{message}")
    with tempfile.TemporaryDirectory() as directory:
        path = write_file(directory, "refused.yaml",
                          "distributed_type: FSDP\nfsdp_config:\n  fsdp_ignored_modules: head\n")
        check(probe_refusal(environment(ACCELERATE_CONFIG_FILE=path)) ==
              f"accelerate: fsdp_config.fsdp_ignored_modules='head' (from config file {path}) names modules FSDP "
              "should leave unsharded, which accelerate-cpp's fsdp strategy does not have (remove it)",
              "a file's setting is named by its key and the file")
        path = write_file(directory, "deepspeed.yaml", "distributed_type: DEEPSPEED\nfsdp_config:\n  fsdp_version: 2\n")
        check(probe_refusal(environment(ACCELERATE_CONFIG_FILE=path)).startswith(
            f"accelerate: zero_stage='2' (from Accelerate's DeepSpeed default stage, for distributed_type: DEEPSPEED "
            f"in config file {path}) conflicts with the fsdp_config section in config file {path}: "),
            "DeepSpeed's default stage with an fsdp_config section")


# Files both accel and the runtime must judge alike: (YAML, accel's refusal after "PATH:" or None, the start of the
# runtime's refusal after "accelerate: " or None). The values' spellings and the FSDP rules between them have one
# home, runtime/settings/spelling.cpp, which both compile in; how each source is read is each one's own.
ALIKE = [
    # Accelerate's str_to_bool spellings of a boolean, and torch's numbers written as YAML may write them.
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: on\n  fsdp_forward_prefetch: Y\n"
     "  fsdp_sync_module_states: off\n  fsdp_use_orig_params: f\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: '01'\n  fsdp_state_dict_type: '+3'\n", None,
     None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: _hybrid_shard_zero2\n"
     "  fsdp_reshard_after_forward: off\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 6\n",
     "3:27: fsdp_config.fsdp_sharding_strategy must be one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
     "HYBRID_SHARD_ZERO2, or a number from 1 to 5 (got '6')",
     "fsdp_sharding_strategy='6' (from config file PATH) is not a sharding strategy"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: shard_grad_op\n"
     "  fsdp_reshard_after_forward: yes\n",
     "3:3: fsdp_config.fsdp_sharding_strategy SHARD_GRAD_OP conflicts with fsdp_config.fsdp_reshard_after_forward true",
     "fsdp_sharding_strategy='shard_grad_op' (from config file PATH) conflicts with fsdp_reshard_after_forward='true'"),
    ("distributed_type: FSDP\n", None, None),
    ("distributed_type: MULTI_GPU\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  sharding_strategy: 3\n  fsdp_reshard_after_forward: false\n"
     "  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_use_orig_params: false\n  fsdp_sync_module_states: false\n"
     "  fsdp_forward_prefetch: true\n  fsdp_cpu_ram_efficient_loading: true\n  fsdp_min_num_params: 100000000\n",
     None, None),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: false\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: maybe\n",
     "3:24: fsdp_config.fsdp_offload_params must be true or false (got 'maybe')",
     "fsdp_offload_params='maybe' (from config file PATH) is not a boolean"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing: true\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing_offload: true\n",
     "3:3: fsdp_config.fsdp_activation_checkpointing_offload true conflicts with fsdp_activation_checkpointing false: "
     "only the inputs a checkpointed unit keeps can be offloaded, and without activation checkpointing no unit keeps "
     "them (set fsdp_activation_checkpointing true as well, or fsdp_activation_checkpointing_offload false)",
     "fsdp_activation_checkpointing_offload='true' (from config file PATH) conflicts with "
     "fsdp_activation_checkpointing='false' (from the default)"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing: false\n"
     "  fsdp_activation_checkpointing_offload: true\n",
     "4:3: fsdp_config.fsdp_activation_checkpointing_offload true conflicts with fsdp_activation_checkpointing false",
     "fsdp_activation_checkpointing_offload='true' (from config file PATH) conflicts with "
     "fsdp_activation_checkpointing='false' (from config file PATH)"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing: true\n"
     "  fsdp_activation_checkpointing_offload: true\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: size_based_wrap\n  fsdp_min_num_params: 1000\n",
     None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
     "  fsdp_transformer_layer_cls_to_wrap: Block, DecoderLayer\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n  fsdp_transformer_layer_cls_to_wrap: "
     "Block\n", None, None),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n",
     "3:3: fsdp_config.fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP makes units of the module classes "
     "fsdp_transformer_layer_cls_to_wrap lists, and it lists none (name the classes",
     "fsdp_auto_wrap_policy='TRANSFORMER_BASED_WRAP' (from config file PATH) makes units of the module classes"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: FOO\n",
     "3:26: fsdp_config.fsdp_auto_wrap_policy must be one of TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP "
     "(got 'FOO')", "fsdp_auto_wrap_policy='FOO' (from config file PATH) is not an automatic wrapping policy"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_min_num_params: -1\n",
     "3:24: fsdp_config.fsdp_min_num_params must be a whole number >= 0 (got '-1')",
     "fsdp_min_num_params='-1' (from config file PATH) must be a whole number >= 0"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_ignored_modules: head\n",
     "3:3: fsdp_config.fsdp_ignored_modules head names modules FSDP should leave unsharded, which accelerate-cpp's "
     "fsdp strategy does not have (remove it)",
     "fsdp_config.fsdp_ignored_modules='head' (from config file PATH) names modules FSDP should leave unsharded"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_state_dict_type: LOCAL_STATE_DICT\n",
     "3:3: fsdp_config.fsdp_state_dict_type LOCAL_STATE_DICT is FSDP1's per-process flat shards, which neither FSDP2 "
     "nor accelerate-cpp writes (use SHARDED_STATE_DICT: each process writes its shards, or FULL_STATE_DICT: the main "
     "process writes whole models)", "fsdp_state_dict_type='LOCAL_STATE_DICT' (from config file PATH) is FSDP1's"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n  fsdp_reshard_after_forward: true\n",
     "3:3: fsdp_config.fsdp_sharding_strategy NO_SHARD conflicts with fsdp_config.fsdp_reshard_after_forward true: "
     "fsdp_reshard_after_forward true means FULL_SHARD (or HYBRID_SHARD), false SHARD_GRAD_OP (or NO_SHARD, "
     "HYBRID_SHARD_ZERO2) (set one of the two, or make them agree)",
     "fsdp_sharding_strategy='NO_SHARD' (from config file PATH) conflicts with fsdp_reshard_after_forward='true' "
     "(from config file PATH)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\nfsdp_config:\n  fsdp_sharding_strategy: 2\n",
     "5:3: fsdp_config.fsdp_sharding_strategy 2 conflicts with deepspeed_config.zero_stage 3: ZeRO stage 3 is fully "
     "sharded (FULL_SHARD); leave the sharding strategy unset or make it FULL_SHARD, or use zero_stage 2 (optimizer "
     "state and gradients sharded, as SHARD_GRAD_OP does)",
     "fsdp_sharding_strategy='2' (from config file PATH) conflicts with zero_stage='3' (from config file PATH)"),
    ("distributed_type: FSDP\ndeepspeed_config:\n  zero_stage: 2\n",
     "1:1: distributed_type FSDP conflicts with DeepSpeed's zero_stage 2: a ZeRO stage of 1 or 2 runs the zero "
     "strategy, and FSDP the fsdp strategy; ask for one: leave out the DeepSpeed settings (or use zero_stage 3, "
     "which is fully sharded), or the FSDP ones",
     "zero_stage='2' (from config file PATH) conflicts with distributed_type: FSDP in config file PATH"),
    # DeepSpeed's CPU offload at stage 3 runs as fsdp_offload_params (Python's `accelerate config` writes both keys).
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n", None, None),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
     "  offload_param_device: cpu\n  zero3_init_flag: false\n", None, None),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  offload_param_device: cpu\nfsdp_config:\n"
     "  fsdp_offload_params: false\n",
     "4:3: deepspeed_config.offload_param_device cpu conflicts with fsdp_config.fsdp_offload_params false: under ZeRO "
     "stage 3 (the fsdp strategy) DeepSpeed's CPU offload runs as fsdp_offload_params true",
     "offload_param_device='cpu' (from config file PATH) conflicts with fsdp_offload_params='false' (from config file "
     "PATH)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 0\n  offload_optimizer_device: cpu\n"
     "fsdp_config:\n  fsdp_version: 2\n",
     "4:3: deepspeed_config.offload_optimizer_device cpu conflicts with the fsdp_config section: the fsdp strategy keeps "
     "the optimizer state in CPU memory with fsdp_offload_params",
     "offload_optimizer_device='cpu' (from config file PATH) conflicts with parallel_strategy='fsdp' (from the "
     "fsdp_config section in config file PATH)"),
    # DeepSpeed's settings accelerate-cpp does not run, at their defaults however spelled, and set.
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: False\n"
     "  zero3_save_16bit_model: no\n  offload_param_nvme_path: None\n  deepspeed_config_file: NONE\n", None, None),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
     "  deepspeed_moe_layer_cls_names: MixtralSparseMoeBlock\n",
     "4:3: deepspeed_config.deepspeed_moe_layer_cls_names MixtralSparseMoeBlock names Python module classes for "
     "DeepSpeed's mixture-of-experts, which accelerate-cpp does not have (remove it)",
     "deepspeed_config.deepspeed_moe_layer_cls_names='MixtralSparseMoeBlock' (from config file PATH) names Python "
     "module classes"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n",
     "3:17: fsdp_config.fsdp_version must be a whole number between 1 and 2 (got '3')",
     "fsdp_version='3' (from config file PATH) is not an FSDP version"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL\n",
     "3:27: fsdp_config.fsdp_sharding_strategy must be one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
     "HYBRID_SHARD_ZERO2, or a number from 1 to 5 (got 'FULL')",
     "fsdp_sharding_strategy='FULL' (from config file PATH) is not a sharding strategy"),
]


def FsdpFilesAreJudgedAlikeByAccelAndTheRuntime():
    with tempfile.TemporaryDirectory() as directory:
        files = [(text, accel_says, runtime_says, write_file(directory, f"case{i}.yaml", text))
                 for i, (text, accel_says, runtime_says) in enumerate(ALIKE)]
        files += [(name, REFUSED_YAMLS.get(name), "fsdp_config.fsdp_auto_wrap_policy='TRANSFORMER_BASED_WRAP'"
                   if name in REFUSED_YAMLS else None, os.path.join(PYTHON_YAMLS, name))
                  for name in ["fsdp.yaml", "fsdp1_no_wrap.yaml", "fsdp2_no_wrap.yaml", "zero3.yaml"]]
        for text, accel_says, runtime_says, path in files:
            code, out, err = accel("config", "--validate", path)
            code_runtime, resolved, refusal = run_probe(environment(ACCELERATE_CONFIG_FILE=path))
            if accel_says is None:
                check(code == 0, f"accel must accept {text!r}", err)
                check(code_runtime == 0 and parse_state(resolved)["parallel_strategy"][0] == "fsdp",
                      f"the runtime must run {text!r} as fsdp", resolved + refusal)
                continue
            expected = f"accel config: {path}:{accel_says}"
            check(code == 2 and len(err.splitlines()) == 1 and err.startswith(expected),
                  f"accel must refuse {text!r} in one line beginning {expected!r}", err)
            expected = "error: accelerate: " + runtime_says.replace("PATH", path)
            check(code_runtime == 3 and refusal.startswith(expected),
                  f"the runtime must refuse {text!r} too, beginning {expected!r}", resolved + refusal)
        print(f"{len(files)} files judged alike")


# The fsdp lines of the runtime's state.
FSDP_FIELDS = ["parallel_strategy", "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_version",
               "fsdp_state_dict_type"]


def RuntimeUnderAccelLaunchReadsWhatPythonsLauncherExports():
    # The runtime in a rank of `accel launch` resolves each FSDP file as the file says, and as it resolves the
    # variables Python Accelerate's launcher exports for the same file.
    with tempfile.TemporaryDirectory() as directory:
        ours = write_example("fsdp", directory)
        cases = [(ours, ["fsdp", "FULL_SHARD", "true", "2", "SHARDED_STATE_DICT"]),
                 (os.path.join(PYTHON_YAMLS, "fsdp1_no_wrap.yaml"),
                  ["fsdp", "SHARD_GRAD_OP", "false", "1", "FULL_STATE_DICT"]),
                 (os.path.join(PYTHON_YAMLS, "fsdp2_no_wrap.yaml"),
                  ["fsdp", "SHARD_GRAD_OP", "false", "2", "FULL_STATE_DICT"]),
                 (os.path.join(PYTHON_YAMLS, "zero3.yaml"), ["fsdp", "FULL_SHARD", "true", "1", "SHARDED_STATE_DICT"])]
        for path, values in cases:
            code, out, err = accel("launch", "-q", "--config_file", path, "--num_processes", "1",
                                   "--main_process_port", free_port(), PROBE)
            check(code == 0, f"the runtime under accel launch must accept {path}", out + err)
            got = [parse_state(out)[name][0] for name in FSDP_FIELDS]
            check(got == values, f"{path} under accel launch: expected {values}, the runtime resolved {got}", out)
        need_accelerate()
        for (path, values), exported in zip(cases, python_exports([path for path, _ in cases])):
            env = {k: v for k, v in exported.items() if k.startswith(("ACCELERATE_", "FSDP_"))}
            got = [probe(environment(**env))[name][0] for name in FSDP_FIELDS]
            check(got == values, f"{path} with Python's exports {env}: expected {values}, the runtime resolved {got}")
            print(f"{os.path.basename(path)}: {' '.join(values)} under accel launch and Python's launcher")


# ------------------------------------------------------------------------------------------- DeepSpeed JSON

# A DeepSpeed JSON as most DeepSpeed users have it: Hugging Face's "auto" values, tuning keys.
DS_JSON = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2,
    "gradient_clipping": "auto", "steps_per_print": 100, "wall_clock_breakdown": False,
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                          "reduce_bucket_size": "auto", "round_robin_gradients": True,
                          "offload_optimizer": {"device": "cpu", "pin_memory": True}},
}


def write_json(directory, name, value):
    return write_file(directory, name, value if isinstance(value, str) else json.dumps(value, indent=2))


def DeepSpeedJsonIsReadAsAccelerateReadsIt():
    with tempfile.TemporaryDirectory() as directory:
        path = write_json(directory, "ds.json", DS_JSON)
        yaml_path = write_file(directory, "ds.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                               f"  deepspeed_config_file: {path}\n  zero3_init_flag: false\n")
        key = f"DeepSpeed config {path}, key "
        mapped = dict(zero_stage=("2", key + "zero_optimization.stage"),
                      parallel_strategy=("zero", f"zero_stage 2 from {key}zero_optimization.stage"),
                      offload_optimizer_device=("cpu", key + "zero_optimization.offload_optimizer.device"),
                      offload_param_device=("none", f"DeepSpeed config {path}, zero_optimization.offload_param."
                                            "device absent: DeepSpeed's none"),
                      gradient_accumulation_steps=("2", key + "gradient_accumulation_steps"),
                      # "auto" as Accelerate fills it: nothing gave a clipping, so 1.0; no mixed precision given.
                      gradient_clipping=("1", key + 'gradient_clipping "auto": Accelerate\'s 1.0'),
                      mixed_precision="no")
        expect(probe(environment(ACCELERATE_CONFIG_FILE=yaml_path)), "the JSON named by the config file", **mapped)
        # Named by the variable Accelerate's launcher exports; "auto" takes what the environment and the options
        # give, and the file's own values win over the environment, as in Accelerate.
        env = environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=path, ACCELERATE_MIXED_PRECISION="bf16",
                          ACCELERATE_GRADIENT_ACCUMULATION_STEPS="4", ACCELERATE_DEEPSPEED_ZERO_STAGE="1")
        expect(probe(env, "gradient_clipping=0.5"), "the JSON named by ACCELERATE_DEEPSPEED_CONFIG_FILE",
               zero_stage="2", gradient_accumulation_steps="2",
               mixed_precision=("bf16", f'DeepSpeed config {path}, fp16.enabled and bf16.enabled "auto" or absent: '
                                "from the environment"),
               gradient_clipping=("0.5", "options"))
        refusal = probe_refusal(env, "gradient_accumulation_steps=4")
        check(refusal.startswith("accelerate: gradient_accumulation_steps='4' (from AcceleratorOptions) conflicts "
                                 f"with gradient_accumulation_steps='2' (from {key}gradient_accumulation_steps): the "
                                 "DeepSpeed config file decides it"), "an option against the file's value", refusal)
        # Stage 3 with DeepSpeed's CPU offload runs the fsdp strategy with fsdp_offload_params; a file without a
        # stage runs DeepSpeed's stage 0 (replicated); fp16 with the loss-scale values the runtime's scaler runs.
        stage3 = write_json(directory, "stage3.json", {"zero_optimization": {
            "stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"},
            "stage3_gather_16bit_weights_on_model_save": "auto", "stage3_max_live_parameters": 1e9}})
        expect(probe(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=stage3)), "ZeRO-3 from a JSON",
               parallel_strategy="fsdp", fsdp_sharding_strategy="FULL_SHARD", fsdp_offload_params="true",
               offload_param_device="cpu", gradient_accumulation_steps="1", gradient_clipping="0")
        fp16 = write_json(directory, "fp16.json", {"zero_optimization": {}, "fp16": {
            "enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 2000, "hysteresis": 1},
            "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4})
        expect(probe(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=fp16, WORLD_SIZE="2")), "fp16, stage 0",
               zero_stage=("0", f"DeepSpeed config {fp16}, zero_optimization.stage absent: DeepSpeed's 0"),
               parallel_strategy="ddp", mixed_precision=("fp16", f"DeepSpeed config {fp16}, key fp16.enabled"))
        # accel launch reads the file by the same rules: the rank resolves what the runtime alone does, the tuning
        # keys are noted, and the ranks get the file's absolute path, not the values it decides.
        code, out, err = accel("launch", "--config_file", yaml_path, "--num_processes", "1", "--main_process_port",
                               free_port(), PROBE)
        check(code == 0, "accel launch must run the DeepSpeed JSON", out + err)
        expect(parse_state(out), "the rank under accel launch", **mapped)
        for noted in ["zero_optimization.overlap_comm", "zero_optimization.offload_optimizer.pin_memory",
                      "steps_per_print"]:
            check(f"accel launch: note: DeepSpeed config {path}: {noted}: " in err, f"accel must note {noted}", err)
        exported = accel_exports(yaml_path)
        check(exported.get("ACCELERATE_DEEPSPEED_CONFIG_FILE") == path and exported.get("ACCELERATE_USE_DEEPSPEED")
              == "true" and "ACCELERATE_DEEPSPEED_ZERO_STAGE" not in exported
              and exported.get("ACCELERATE_MIXED_PRECISION") == "no", "accel launch's exports", exported)
        code, out, err = accel("launch", "-q", "--use_deepspeed", "--deepspeed_config_file", path, "--num_processes",
                               "1", "--main_process_port", free_port(), "--mixed_precision", "bf16", PROBE)
        check(code == 0 and parse_state(out).get("mixed_precision", ("",))[0] == "bf16",
              "--mixed_precision fills bf16.enabled \"auto\" in the rank", out + err)
        code, out, err = accel("launch", "-q", "--use_deepspeed", "--deepspeed_config_file", path, "--num_processes",
                               "1", "--zero_stage", "3", "true")
        check(code == 2 and "--zero_stage 3 conflicts with "
              f"zero_stage='2' (from {key}zero_optimization.stage)" in err and len(err.splitlines()) == 1,
              "a flag against the file's value: exit 2, one line naming both", f"exit {code}\n{err}")


# (JSON, the refusal's text after "DeepSpeed config PATH"), the same from accel launch and the runtime.
REFUSED_JSON = [
    ({"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}},
     ": optimizer {...} is an optimizer for DeepSpeed to build (Accelerate then needs DummyOptim in the program); "
     "accelerate-cpp prepares the optimizer the program builds: remove the block and build that optimizer in code"),
    ({"zero_optimization": {"stage": 2}, "scheduler": {"type": "WarmupLR"}},
     ": scheduler {...} is a learning-rate scheduler for DeepSpeed to build"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}},
     ': zero_optimization.offload_param.device "nvme" is NVMe offload, which accelerate-cpp does not have (use '
     '"none" or "cpu")'),
    ({"zero_optimization": {"stage": 2, "zero_quantized_gradients": True}},
     ": zero_optimization.zero_quantized_gradients true quantizes the averaged gradients (ZeRO++), which changes "
     "results and accelerate-cpp does not do (use false)"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "speed": 3}}},
     ": zero_optimization.offload_optimizer.speed 3 is a DeepSpeed setting accelerate-cpp does not run, and it may "
     "change results (remove it;"),
    ({"zero_optimization": {"stage": 2}, "pipeline": {"stages": 2}},
     ": pipeline {...} is a DeepSpeed setting accelerate-cpp does not run"),
    ({"zero_optimization": {"stage": 2}, "communication_data_type": "fp16"},
     ': communication_data_type "fp16" averages gradients in another dtype'),
    ({"zero_optimization": {"stage": 2}, "fp16": {"enabled": True, "loss_scale_window": 1000, "hysteresis": 2}},
     ": fp16.hysteresis 2 delays halving the loss scale after an overflow; accelerate-cpp's scaler halves it at "
     "every overflow, as torch.amp.GradScaler (use 1, or remove it: then 1 runs, not DeepSpeed's 2)"),
    ({"zero_optimization": {"stage": 2}, "fp16": {"enabled": True, "min_loss_scale": 1}},
     ": fp16.min_loss_scale 1 is a floor of the loss scale"),
    ({"zero_optimization": {"stage": 2}, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
     ": fp16.enabled true and bf16.enabled are both on; DeepSpeed runs one of them (turn one off)"),
    ({"zero_optimization": {"stage": 4}},
     ": zero_optimization.stage 4 is not a ZeRO stage; use 0 (off), 1 (optimizer state sharded)"),
    ({"zero_optimization": {"stage": 2}, "gradient_accumulation_steps": 0},
     ": gradient_accumulation_steps 0 must be a whole number >= 1 or \"auto\""),
    ({"zero_optimization": {"stage": 2}, "gradient_clipping": "high"},
     ': gradient_clipping "high" must be a number >= 0 (0: off) or "auto"'),
    ({"zero_optimization": {"stage": 2}, "train_batch_size": 12, "train_micro_batch_size_per_gpu": 4,
      "gradient_accumulation_steps": 2},
     ": train_batch_size 12 is not train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 x 2 processes = "
     "16, which DeepSpeed requires"),
    ({"fp16": {"enabled": True}},
     " has no zero_optimization object, which Accelerate requires of a DeepSpeed config"),
    ('{\n  "zero_optimization": {"stage": 2,}\n}\n',
     ":2:36: malformed JSON: syntax error while parsing object key - unexpected '}'; expected string literal"),
    ('[1, 2]', " must be a JSON object of DeepSpeed settings (got array)"),
]


def DeepSpeedJsonRefusalsNameTheJsonPath():
    with tempfile.TemporaryDirectory() as directory:
        for i, (value, expected) in enumerate(REFUSED_JSON):
            path = write_json(directory, f"case{i}.json", value)
            wanted = f"DeepSpeed config {path}{expected}"
            code, out, err = accel("launch", "--use_deepspeed", "--deepspeed_config_file", path, "--num_processes",
                                   "2", "true")
            check(code == 2 and len(err.splitlines()) == 1 and err.startswith("accel launch: " + wanted),
                  f"accel launch must refuse {value!r} in one line beginning {wanted!r}", f"exit {code}\n{err}")
            refusal = probe_refusal(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=path, WORLD_SIZE="2"))
            check(refusal.startswith("accelerate: " + wanted), f"the runtime must refuse {value!r} too", refusal)
        # Keys of a block that is off do nothing: accepted.
        off = write_json(directory, "off.json", {"zero_optimization": {"stage": 1},
                                                 "fp16": {"enabled": False, "loss_scale_window": 1000}})
        expect(probe(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=off)), "fp16 off", zero_stage="1",
               mixed_precision="no")
        # The mixed precision given may not be the one the other block turns on, as in Accelerate.
        bf16 = write_json(directory, "bf16.json", {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}})
        refusal = probe_refusal(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=bf16, ACCELERATE_MIXED_PRECISION="fp16"))
        check(refusal.startswith(f"accelerate: DeepSpeed config {bf16}: bf16.enabled true conflicts with "
                                 "mixed_precision fp16 (from the environment)"), "bf16 against fp16", refusal)
        # A file that cannot be read is named, with what named it.
        missing = os.path.join(directory, "missing.json")
        refusal = probe_refusal(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=missing))
        check(refusal.startswith(f"accelerate: DeepSpeed config {missing} cannot be read (No such file or directory; "
                                 "named by ACCELERATE_DEEPSPEED_CONFIG_FILE in the environment)"), "missing", refusal)
        code, out, err = accel("launch", "--use_deepspeed", "--deepspeed_config_file", missing, "true")
        check(code == 2 and err.startswith(f"accel launch: DeepSpeed config {missing} cannot be read (No such file or "
                                           f"directory; named by --deepspeed_config_file {missing})"), "missing", err)
        # Accelerate's keys beside the file: refused by accel (the config file's line) and the runtime alike, and
        # when Accelerate's launcher lists them (ACCELERATE_CONFIG_DS_FIELDS).
        good = write_json(directory, "good.json", {"zero_optimization": {"stage": 2}})
        yaml_path = write_file(directory, "both.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                               f"  deepspeed_config_file: {good}\n  gradient_accumulation_steps: 2\n"
                               "  offload_optimizer_device: none\n")
        listed = ("with deepspeed_config_file set, Accelerate ignores these config keys and refuses them: "
                  "gradient_accumulation_steps, offload_optimizer_device. Give them in the DeepSpeed config file")
        code, out, err = accel("config", "--validate", yaml_path)
        check(code == 2 and err.startswith(f"accel config: {yaml_path}:4:3: {listed}"), "accel: the keys beside", err)
        refusal = probe_refusal(environment(ACCELERATE_CONFIG_FILE=yaml_path))
        check(refusal.startswith(f"accelerate: config file {yaml_path}: {listed}"), "runtime: the keys beside", refusal)
        refusal = probe_refusal(environment(ACCELERATE_DEEPSPEED_CONFIG_FILE=good,
                                            ACCELERATE_CONFIG_DS_FIELDS="deepspeed_config_file,zero_stage"))
        check(refusal.startswith("accelerate: ACCELERATE_CONFIG_DS_FIELDS='deepspeed_config_file,zero_stage'") and
              "refuses them: zero_stage." in refusal, "runtime: Accelerate's launcher's list", refusal)
        print(f"{len(REFUSED_JSON)} JSON files refused alike by accel and the runtime")


# ------------------------------------------------------------------------------------------- default, env

def ConfigDefaultWritesOnceAtHfHome():
    env = environment()
    code, out, err = accel("config", "default", env=env)
    path = os.path.join(env["HF_HOME"], "accelerate", "default_config.yaml")
    check(code == 0 and os.path.exists(path), f"accel config default must write {path}", out + err)
    python_made = load_yaml(os.path.join(PYTHON_YAMLS, "default_cpu.yaml"))
    check(load_yaml(path) == python_made, "on a CPU machine it must write what `accelerate config default` does",
          f"accel: {load_yaml(path)}\npython: {python_made}")
    code, out, err = accel("config", "default", "--mixed_precision", "bf16", env=env)
    check(code == 0 and "already exists" in out and load_yaml(path)["mixed_precision"] == "no",
          "an existing config must be left unchanged", out)
    other = os.path.join(env["HF_HOME"], "other.yaml")
    code, out, err = accel("config", "default", "--config_file", other, "--mixed_precision", "BF16", env=env)
    check(code == 0 and load_yaml(other)["mixed_precision"] == "bf16", "--mixed_precision must be written", err)
    code, out, err = accel("config", "default", "--mixed_precision", "fp17", env=env)
    check(code == 2 and err.splitlines() == ["accel config: --mixed_precision must be one of no, fp16, bf16, fp8 "
                                             "(got 'fp17')"], "a bad --mixed_precision is one line, exit 2", err)
    code, out, err = accel("config", "defualt", env=env)
    check(code == 2 and "did you mean 'default'?" in err, "a mistyped subcommand gets a hint", err)


def EnvReportsVersionsDevicesAndConfig():
    env = environment()
    code, out, err = accel("env", env=env)
    check(code == 0, "accel env must exit 0", out + err)
    for text in ["- accelerate-cpp version: ", "- torch version (built with): ", "- CUDA driver: ", "- NCCL: ",
                 "- LLVM: ", "- CUDA devices: ", "- Config file: "]:
        check(text in out, f"accel env must report {text.strip()}", out)
    check("none there; `accel config` writes one" in out, "without a config it must say so", out)
    config = os.path.join(PYTHON_YAMLS, "multi_cpu.yaml")
    code, out, err = accel("env", "--config_file", config, env=env)
    check(code == 0 and "distributed_type: MULTI_CPU" in out and "ACCELERATE_MIXED_PRECISION=bf16" in out,
          "accel env must show the config and what launch would export", out)
    print(out)
    check("- Parallel strategy: ddp\n" in out, "accel env must name the parallel strategy", out)
    config = os.path.join(PYTHON_YAMLS, "zero2.yaml")
    code, out, err = accel("env", "--config_file", config, env=env)
    check(code == 0 and "- Parallel strategy: zero (ZeRO stage 2, optimizer offload cpu)\n" in out
          and "ACCELERATE_DEEPSPEED_ZERO_STAGE=2" in out, "accel env must show ZeRO's stage and offload", out)
    code, out, err = accel("env", env=environment(ACCELERATE_USE_DEEPSPEED="true"))
    check(code == 0 and "- Parallel strategy: zero (ZeRO stage 2, optimizer offload none)\n" in out,
          "without a file, ACCELERATE_USE_DEEPSPEED=true means ZeRO stage 2", out)
    # FSDP: the sharding strategy, version and state dict type the ranks run, and the FSDP_* variables.
    config = os.path.join(PYTHON_YAMLS, "fsdp1_no_wrap.yaml")
    code, out, err = accel("env", "--config_file", config, env=env)
    check(code == 0 and "- Parallel strategy: fsdp (SHARD_GRAD_OP, fsdp_version 1, FULL_STATE_DICT)\n" in out
          and "    FSDP_RESHARD_AFTER_FORWARD=shard_grad_op\n" in out and "    ACCELERATE_USE_FSDP=true\n" in out,
          "accel env must show FSDP's sharding strategy, version and state dict type", out)
    code, out, err = accel("env", "--config_file", os.path.join(PYTHON_YAMLS, "zero3.yaml"), env=env)
    check(code == 0 and "- Parallel strategy: fsdp (FULL_SHARD for ZeRO stage 3, fsdp_version 1, SHARDED_STATE_DICT)\n"
          in out, "ZeRO stage 3 runs the fsdp strategy", out)
    code, out, err = accel("env", env=environment(ACCELERATE_USE_FSDP="true", FSDP_RESHARD_AFTER_FORWARD="false"))
    check(code == 0 and "- Parallel strategy: fsdp (SHARD_GRAD_OP, fsdp_version 1, SHARDED_STATE_DICT)\n" in out,
          "without a file, ACCELERATE_USE_FSDP=true means FSDP", out)
    # Python's default FSDP answers (TRANSFORMER_BASED_WRAP of Block) run; a file asking for what accelerate-cpp
    # does not run: accel env still reports, and says why launch would refuse.
    config = os.path.join(PYTHON_YAMLS, "fsdp.yaml")
    code, out, err = accel("env", "--config_file", config, env=env)
    check(code == 0 and "- Parallel strategy: fsdp (" in out and "invalid" not in out,
          "accel env must run Python's default FSDP file", out)
    with tempfile.TemporaryDirectory() as directory:
        config = write_file(directory, "wrap.yaml",
                            "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n")
        code, out, err = accel("env", "--config_file", config, env=env)
        check(code == 0 and f"- Config: invalid: {config}:3:3: fsdp_config.fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP "
              "makes units of the module classes" in out, "accel env must say why a file is refused", out)
    code, out, err = accel("env", env=environment(ACCELERATE_USE_FSDP="true",
                                                  FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD="true"))
    check(code == 0 and "- Parallel strategy: invalid: FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD=true in the environment "
          "conflicts with fsdp_activation_checkpointing false" in out,
          "accel env must say why the environment is refused", out)
    # Parameter offload is accepted (a no-op on the CPU; on a GPU the shards and the optimizer step in CPU memory).
    code, out, err = accel("env", env=environment(ACCELERATE_USE_FSDP="true", FSDP_OFFLOAD_PARAMS="true"))
    check(code == 0 and "- Parallel strategy: fsdp (" in out and "invalid" not in out,
          "accel env must accept FSDP_OFFLOAD_PARAMS=true", out)


def OptionTableMatchesApiDoc():
    script = os.path.join(HERE, "..", "..", "scripts", "option_table.py")
    done = subprocess.run([sys.executable, script, "--check", "--doc", os.path.join(DOCS, "api.md")],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode == 0, "docs/api.md's option table must be what scripts/option_table.py generates",
          done.stdout + done.stderr)
    print(done.stdout.strip())


def OwnSettingsAreLaunchFlagsFromTheOptionTable():
    """Every row of the option table with an environment variable and no config file key is an `accel launch`
    flag of its name, exported to the ranks as the variable; its value is judged before any rank starts."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    import option_table  # noqa: E402
    own = [row for row in option_table.read_rows()
           if row["ENVIRONMENT"] != "unmapped" and row["YAML_KEY"] == "unmapped"]
    check(any(row["NAME"] == "comm_hook" for row in own), "comm_hook must be one of our own settings", own)
    code, out, err = accel("launch", "--help")
    check(code == 0, "accel launch --help must exit 0", out + err)
    for row in own:
        check(f"--{row['NAME']}" in out, f"accel launch --help must list --{row['NAME']}", out)
    port = free_port()
    project = tempfile.mkdtemp(dir=HOMES.name)
    code, out, err = accel("launch", "-q", "--cpu", "--num_processes", "1", "--main_process_port", port,
                           "--comm_hook", "fp16", "--project_dir", project, "env")
    check(code == 0, "accel launch with --comm_hook and --project_dir must exit 0", out + err)
    lines = [re.sub(r"^\[rank0\]: ", "", line) for line in out.splitlines()]
    check("ACCEL_COMM_HOOK=fp16" in lines, "--comm_hook fp16 must reach the rank as ACCEL_COMM_HOOK=fp16", out)
    check(f"ACCEL_PROJECT_DIR={project}" in lines, "--project_dir must reach the rank as ACCEL_PROJECT_DIR", out)
    code, out, err = accel("launch", "--num_processes", "1", "--main_process_port", port,
                           "--parallel_strategy", "ddp", "--zero_stage", "3", "--use_deepspeed", "env")
    check(code == 2 and "--parallel_strategy ddp" in err and 'ZeRO stage 3 runs the "fsdp" strategy' in err,
          "--parallel_strategy naming another strategy than --zero_stage's must be refused with exit 2, naming the "
          "flag", f"exit {code}\n{out}{err}")


TESTS = {name: test for name, test in globals().items()
         if isinstance(test, types.FunctionType) and name[0].isupper()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the test names, one a line, and exit")
    parser.add_argument("--accel")
    parser.add_argument("--docs")
    parser.add_argument("--probe")
    parser.add_argument("test", nargs="?", choices=sorted(TESTS))
    args = parser.parse_args()
    if args.list:
        print("\n".join(TESTS))
        return 0
    if not (args.accel and args.docs and args.probe and args.test):
        parser.error("give --accel, --docs, --probe and a test name (or --list)")
    global ACCEL, DOCS, PROBE
    ACCEL, DOCS, PROBE = os.path.abspath(args.accel), os.path.abspath(args.docs), os.path.abspath(args.probe)
    try:
        TESTS[args.test]()
    except Skip as reason:
        print(f"SKIP {args.test}: {reason}")
        return SKIP
    except (AssertionError, subprocess.TimeoutExpired) as failure:
        print(f"FAIL {args.test}: {failure}")
        return 1
    print(f"PASS {args.test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
