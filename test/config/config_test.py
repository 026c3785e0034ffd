#!/usr/bin/env python3
"""Tests for `accel config`, the config file, `accel env`, and what `accel launch` exports for a config:
config_test.py --accel A --docs DOCS_DIR TestName (one ctest test each, config.<TestName>).

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

try:
    import yaml
except ImportError:  # the tests that compare maps need it; --list does not
    yaml = None


class Skip(Exception):
    pass


def check(condition, message, detail=None):
    if not condition:
        raise AssertionError(message + (f"\n--- detail ---\n{detail}\n--- end ---" if detail is not None else ""))


def environment(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    env["HF_HOME"] = tempfile.mkdtemp(prefix="accel-config-test-")
    env.update(overrides)
    return env


def accel(*args, env=None, stdin=None):
    done = subprocess.run([ACCEL, *args], input=stdin, capture_output=True, text=True, timeout=60,
                          env=env or environment())
    return done.returncode, done.stdout, done.stderr


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
                  ("checked while running", "no"), ("use DeepSpeed", ENTER), ("How many GPU(s)", "2"),
                  ("(by id)", "0,1"), ("mixed precision", "1")],
    "deepspeed-zero2": [("compute environment", ENTER), ("type of machine", "multi-GPU"),
                        ("How many machines", ENTER), ("checked while running", "no"), ("use DeepSpeed", "yes"),
                        ("ZeRO optimization stage", ENTER), ("offload optimizer states", ENTER),
                        ("gradient accumulation steps", "3"), ("gradient clipping?", "yes"),
                        ("clipping value", ENTER), ("How many GPU(s)", "2"), ("mixed precision", "bf16")],
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


def QuestionnaireDoesNotOfferFsdp():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "multi-gpu.yaml")
        code, transcript = answer_in_pty(["config", "--config_file", path], ANSWERS["multi-gpu"], environment())
        check(code == 0, "accel config must exit 0", transcript)
        check("FSDP is not supported yet" in transcript, "a multi-GPU answer must say FSDP is not supported yet",
              transcript)
        for question in ["FullyShardedDataParallel", "FSDP version"]:
            check(question not in transcript, f"accel config must not ask about {question!r}", transcript)
        written = load_yaml(path)
        check(written["distributed_type"] == "MULTI_GPU" and "deepspeed_config" not in written
              and "fsdp_config" not in written, f"no DeepSpeed asked: a data-parallel file, without sections: {written}")


def QuestionnaireOffersZeroStagesOneAndTwo():
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "zero.yaml")
        # One GPU, no CPU-only: DeepSpeed is offered (as Accelerate offers it); stage 3 is refused and asked again;
        # stage 1 has no offload question (Accelerate asks it for stages 2 and 3).
        answers = ["0", "0", "no", "yes", "3", "0", "1", "2", "yes", "0.5", "1", "no"]
        code, out, err = accel("config", "--config_file", path, stdin="\n".join(answers) + "\n")
        check(code == 0, "accel config must write a ZeRO-1 file", out + err)
        check("ZeRO stage 3 shards the parameters too, which needs the fully sharded strategy that accelerate-cpp "
              "does not have yet; choose 1 or 2." in out, "stage 3 must be refused with the reason", out)
        check("Please enter a whole number between 1 and 3." in out, "stage 0 must be asked again", out)
        check("offload optimizer states" not in out, "no offload question for stage 1", out)
        written = load_yaml(path)
        check(written["distributed_type"] == "DEEPSPEED" and written["num_processes"] == 1 and "gpu_ids" not in written
              and written["deepspeed_config"] == {"zero_stage": 1, "gradient_accumulation_steps": 2,
                                                  "gradient_clipping": 0.5, "zero3_init_flag": False},
              f"a ZeRO-1 file with Accelerate's keys: {written}")
        code, out, err = accel("config", "--validate", path)
        check(code == 0, "the file must pass --validate", err)
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


# Python Accelerate's files that ask for FSDP, which accel refuses (not supported yet), and where.
SHARDED_YAMLS = {"fsdp.yaml": "3:1: distributed_type FSDP"}
SHARDED = ("asks for FSDP (fully sharded training), which accelerate-cpp does not support yet. Use data parallelism "
           "or ZeRO instead: distributed_type: MULTI_GPU (or MULTI_CPU, --multi_gpu or --cpu for accel launch), or "
           "DEEPSPEED with deepspeed_config.zero_stage 1 or 2 (--use_deepspeed --zero_stage 2), without an fsdp_config "
           "section")
STAGE3 = ("shards the parameters too, which needs the fully sharded strategy that accelerate-cpp does not have yet "
          "(use zero_stage 1: optimizer state sharded, or 2: optimizer state and gradients sharded)")


def PythonAccelerateYamlsAreAccepted():
    files = sorted(f for f in os.listdir(PYTHON_YAMLS) if f.endswith(".yaml"))
    check(len(files) >= 7, f"expected the Python-written configs in {PYTHON_YAMLS}")
    for name in files:
        path = os.path.join(PYTHON_YAMLS, name)
        code, out, err = accel("config", "--validate", path)
        if name in SHARDED_YAMLS:
            expected = f"accel config: {path}:{SHARDED_YAMLS[name]} {SHARDED}"
            check(code == 2 and err.splitlines() == [expected], f"accel must refuse {name} in one line: {expected!r}",
                  f"exit {code}\n{err}")
            print(f"{name}: refused (FSDP)")
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
ACCEL_ONLY = {"ACCELERATE_USE_CPU", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"}
# Python-only: torch.compile settings (libtorch's C++ API has none) and the CPU-affinity switch.
PYTHON_ONLY_PREFIXES = ("ACCELERATE_DYNAMO_", "ACCELERATE_CPU_AFFINITY")


def accel_exports(config_path):
    """The ACCELERATE_*/FSDP_*/CUDA_VISIBLE_DEVICES variables rank 0 gets from `accel launch` for a config."""
    with socket.socket() as probe:  # a free port, given explicitly: port 0 is for one machine only
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    code, out, err = accel("launch", "-q", "--config_file", config_path, "--main_process_port", port, "env")
    check(code == 0, f"accel launch env with {config_path} must exit 0", out + err)
    lines = [re.sub(r"^\[rank0\]: ", "", line) for line in out.splitlines()
             if not line.startswith("[rank") or line.startswith("[rank0]: ")]
    pairs = dict(line.split("=", 1) for line in lines if "=" in line)
    return {k: v for k, v in pairs.items() if k.startswith(("ACCELERATE_", "FSDP_", "CUDA_VISIBLE"))}


def LaunchExportsWhatPythonAccelerateExports():
    need_accelerate()
    files = sorted(f for f in os.listdir(PYTHON_YAMLS) if f.endswith(".yaml") and f not in SHARDED_YAMLS)
    check("zero2.yaml" in files, "Python Accelerate's ZeRO-2 file must be among those compared")
    compare_exports(files, [os.path.join(PYTHON_YAMLS, name) for name in files])


def LaunchExportsWhatPythonAccelerateExportsForOurZeroFile():
    # The DeepSpeed file accel config writes: Python's launcher computes the same variables from it.
    need_accelerate()
    with tempfile.TemporaryDirectory() as directory:
        compare_exports(["deepspeed-zero2"], [write_example("deepspeed-zero2", directory)])


def compare_exports(files, paths):
    oracle = subprocess.run([sys.executable, "-c", ORACLE, *paths], capture_output=True, text=True, timeout=120,
                            env=environment())
    check(oracle.returncode == 0, "Python Accelerate's launcher code failed", oracle.stderr[-2000:])
    answers = [line for line in oracle.stdout.splitlines() if line.startswith("{")]
    check(len(answers) == len(files), "expected one answer per file from Python Accelerate", oracle.stdout)
    for name, path, answer in zip(files, paths, answers):
        theirs = {k: v for k, v in json.loads(answer).items() if not k.startswith(PYTHON_ONLY_PREFIXES)}
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
     "libtorch on CPUs and CUDA GPUs (use one of NO, MULTI_CPU, MULTI_GPU, DEEPSPEED)"),
    ("distributed_type: FSDP\n", "f.yaml:1:1: distributed_type FSDP " + SHARDED),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n",
     "f.yaml:3:3: deepspeed_config.zero_stage 3 " + STAGE3),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: nvme\n",
     "f.yaml:3:3: deepspeed_config.offload_optimizer_device nvme: accelerate-cpp does not offload to NVMe (use none "
     "or cpu)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_param_device: cpu\n",
     "f.yaml:3:3: deepspeed_config.offload_param_device cpu offloads parameters, which needs ZeRO stage 3 (not in "
     "accelerate-cpp yet; use none)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds_config.json\n",
     "f.yaml:3:3: deepspeed_config.deepspeed_config_file ds_config.json names a DeepSpeed JSON config, which "
     "accelerate-cpp does not read (remove it and give zero_stage, offload_optimizer_device, gradient_clipping and "
     "gradient_accumulation_steps instead)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  zero3_init_flag: true\n",
     "f.yaml:4:3: deepspeed_config.zero3_init_flag true is for ZeRO stage 3, which accelerate-cpp does not have yet "
     "(use false)"),
    ("distributed_type: MULTI_GPU\nfsdp_config:\n  fsdp_version: 2\n", "f.yaml:2:1: the fsdp_config section " + SHARDED),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_verison: 2\n",
     "f.yaml:3:3: unknown key 'fsdp_verison' in fsdp_config (did you mean 'fsdp_version'?)"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n",
     "f.yaml:3:15: deepspeed_config.zero_stage must be a whole number between 0 and 3 (got '4')"),
    ("distributed_type: MULTI_CPU\nnum_machines: 2\nmachine_rank: 2\n",
     "f.yaml:3:1: machine_rank must be below num_machines 2 (got 2)"),
    ("num_processes: 2\n", "f.yaml: distributed_type is missing (add one of NO, MULTI_CPU, MULTI_GPU, DEEPSPEED; "
     "`accel config` writes a complete file)"),
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
    # A file asking for FSDP: accel env still reports, and says why launch would refuse it.
    config = os.path.join(PYTHON_YAMLS, "fsdp.yaml")
    code, out, err = accel("env", "--config_file", config, env=env)
    check(code == 0 and f"- Config: invalid: {config}:{SHARDED_YAMLS['fsdp.yaml']} {SHARDED}" in out,
          "accel env must say why the FSDP file is refused", out)


def OptionTableMatchesApiDoc():
    script = os.path.join(HERE, "..", "..", "scripts", "option_table.py")
    done = subprocess.run([sys.executable, script, "--check", "--doc", os.path.join(DOCS, "api.md")],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode == 0, "docs/api.md's option table must be what scripts/option_table.py generates",
          done.stdout + done.stderr)
    print(done.stdout.strip())


TESTS = {name: test for name, test in globals().items()
         if isinstance(test, types.FunctionType) and name[0].isupper()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the test names, one a line, and exit")
    parser.add_argument("--accel")
    parser.add_argument("--docs")
    parser.add_argument("test", nargs="?", choices=sorted(TESTS))
    args = parser.parse_args()
    if args.list:
        print("\n".join(TESTS))
        return 0
    if not (args.accel and args.docs and args.test):
        parser.error("give --accel, --docs and a test name (or --list)")
    global ACCEL, DOCS
    ACCEL, DOCS = os.path.abspath(args.accel), os.path.abspath(args.docs)
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
