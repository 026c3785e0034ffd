#!/usr/bin/env python3
"""Tests for `accel launch`, one per ctest entry: launch_test.py --accel A --probe P TestName.

Each test runs accel on launch_probe and checks its exit code, its output, and that no probe process is
left behind. Standard library only; every test ends within HARD_TIMEOUT_S whatever accel does.
"""
import argparse
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import types

HARD_TIMEOUT_S = 50  # below ctest's TIMEOUT 60, so a hang reads as this driver's message
RUN_TIMEOUT_S = 30
STOP_WITHIN_S = 10  # "within a few seconds": the default grace period is 5 s, the probes stop on SIGTERM

ACCEL = ""
PROBE = ""
# Every process a test starts carries this in its environment, so that whatever a failed test leaves behind
# can be found and killed (see kill_leftovers).
TOKEN_VARIABLE = "ACCEL_LAUNCH_TEST_TOKEN"
TOKEN = f"{os.getpid()}-{time.time_ns()}"


class Result:
    def __init__(self, code, stdout, stderr, seconds):
        self.code, self.stdout, self.stderr, self.seconds = code, stdout, stderr, seconds

    def __str__(self):
        return (f"exit code {self.code} after {self.seconds:.1f} s\n--- stdout ---\n{self.stdout}"
                f"--- stderr ---\n{self.stderr}--- end ---")


def check(condition, message, result=None):
    if not condition:
        raise AssertionError(message + ("\n" + str(result) if result is not None else ""))


def environment(**overrides):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env[TOKEN_VARIABLE] = TOKEN
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def accel(*args, env=None):
    start = time.monotonic()
    completed = subprocess.run([ACCEL, *args], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                               env=env if env is not None else environment())
    return Result(completed.returncode, completed.stdout, completed.stderr, time.monotonic() - start)


def launch(*args, env=None):
    return accel("launch", *args, env=env)


def probe_pids(stdout):
    """Every pid a probe printed: ranks (`probe pid=`) and their children (`probe child pid=`)."""
    return [int(pid) for pid in re.findall(r"probe (?:child )?pid=(\d+)", stdout)]


def is_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # an orphaned zombie has stopped
    except OSError:
        return True


def check_no_process_left(pids, result):
    check(pids, "the probes printed no pid, so the test cannot check they stopped", result)
    deadline = time.monotonic() + 2
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [pid for pid in pids if is_alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    check(not alive, f"probe processes {alive} outlived accel", result)


def kill_leftovers():
    """SIGKILLs every process still carrying this run's token: cleanup after a failed test, not a check."""
    marker = f"{TOKEN_VARIABLE}={TOKEN}".encode() + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker in environ.read():
                    os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass


def check_usage_error(result, expected_line):
    lines = result.stderr.splitlines()
    check(result.code == 2, "expected exit code 2 for a usage error", result)
    check(lines == [expected_line], f"expected exactly one stderr line: {expected_line!r}", result)
    check(result.stdout == "", "expected no stdout: no rank may start on a usage error", result)


def rank_lines(stdout, rank):
    return [line for line in stdout.splitlines() if line.startswith(f"[rank{rank}]: ")]


def env_of(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


# ----------------------------------------------------------------------------------------------- env, output

def TwoRanksGetTorchrunEnvironment():
    result = launch("--num_processes", "2", PROBE)
    check(result.code == 0, "two healthy ranks must exit 0", result)
    # 29500 unless another job holds it at this moment: then the launcher says which port it took.
    moved = re.search(r"the default port 29500 is in use \(another job\?\); this job's rendezvous is on port "
                      r"(\d+)", result.stderr)
    port = int(moved.group(1)) if moved else 29500
    run_ids = set()
    for rank in (0, 1):
        lines = [line for line in rank_lines(result.stdout, rank) if "probe pid=" in line]
        check(len(lines) == 1, f"expected one environment line from rank {rank}", result)
        expected = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 2, "GROUP_RANK": 0,
                    "GROUP_WORLD_SIZE": 1, "ROLE_NAME": "default", "ROLE_RANK": rank, "ROLE_WORLD_SIZE": 2,
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": 1}
        got = env_of(lines[0])
        for name, value in expected.items():
            check(got.get(name) == str(value), f"rank {rank}: expected {name}={value}, got {got.get(name)}", result)
        # One run id for the job, under accel's name and torchrun's; rank 0 alone gets the held store socket.
        check(re.fullmatch(r"accel-[0-9a-f]{12}", got.get("ACCELERATE_RUN_ID", "")) is not None and
              got.get("TORCHELASTIC_RUN_ID") == got.get("ACCELERATE_RUN_ID"),
              f"rank {rank}: expected a run id accel-<12 hex digits> under both names, got {got}", result)
        run_ids.add(got["ACCELERATE_RUN_ID"])
        check((got.get("ACCELERATE_STORE_LISTEN_FD") != "<unset>") == (rank == 0),
              f"rank {rank}: only rank 0 gets ACCELERATE_STORE_LISTEN_FD, got {got}", result)
    check(len(run_ids) == 1, f"both ranks must share one run id, got {run_ids}", result)
    again = launch("-q", "--num_processes", "2", PROBE)
    check(env_of(again.stdout).get("ACCELERATE_RUN_ID") not in run_ids, "each launch makes a new run id", again)
    given = launch("-q", "--num_processes", "2", "--rdzv_id", "job-7", PROBE)
    check(given.stdout.count("ACCELERATE_RUN_ID=job-7") == 2, "--rdzv_id sets the run id", given)
    check("OMP_NUM_THREADS=1" in result.stderr, "expected the note about OMP_NUM_THREADS", result)

    quiet = launch("-q", "--num_processes", "2", PROBE)
    check(quiet.code == 0 and quiet.stderr == "", "-q must leave out the OMP_NUM_THREADS note", quiet)

    tuned = launch("--num_processes", "2", PROBE, env=environment(OMP_NUM_THREADS="3"))
    check(tuned.stdout.count("OMP_NUM_THREADS=3") == 2, "a user's OMP_NUM_THREADS must be kept", tuned)
    check("OMP_NUM_THREADS" not in tuned.stderr, "no note when OMP_NUM_THREADS is set", tuned)


def TwoRanksOutputIsPrefixedPerStream():
    result = launch("-q", "--num_processes", "2", PROBE, "--lines", "3000", "--stderr", "to stderr")
    check(result.code == 0, "expected exit code 0", result)
    bad = [line for line in result.stdout.splitlines()
           if not re.fullmatch(r"\[rank(\d)\]: (line \1 \d+ x{80}|probe pid=.*)", line)]
    check(not bad, f"{len(bad)} stdout lines are not whole prefixed lines of their rank, e.g. {bad[:2]}")
    for rank in (0, 1):
        numbers = [int(m) for m in re.findall(rf"^\[rank{rank}\]: line {rank} (\d+) ", result.stdout, re.M)]
        check(numbers == list(range(3000)), f"rank {rank}'s 3000 lines must all arrive, in order")
    check(sorted(result.stderr.splitlines()) == ["[rank0]: to stderr", "[rank1]: to stderr"],
          "each rank's stderr line must reach stderr, prefixed", result)


def SingleRankOutputIsNotPrefixed():
    result = launch(PROBE, "--stderr", "to stderr")
    check(result.code == 0, "expected exit code 0", result)
    check(result.stdout.startswith("probe pid=") and "[rank" not in result.stdout,
          "one rank's output must pass through unprefixed", result)
    check(env_of(result.stdout).get("WORLD_SIZE") == "1", "the default is one rank", result)
    check(env_of(result.stdout).get("OMP_NUM_THREADS") == "<unset>", "one rank keeps OMP_NUM_THREADS unset",
          result)
    check(result.stderr == "to stderr\n", "stderr must pass through unprefixed", result)


def UnterminatedLastLineIsFlushed():
    result = launch("-q", "--num_processes", "2", PROBE, "--no-newline", "tail")
    check(result.code == 0, "expected exit code 0", result)
    for rank in (0, 1):
        check(f"[rank{rank}]: tail\n" in result.stdout, f"rank {rank}'s last line without newline is lost",
              result)


def EqualsFormAndDoubleDashAreAccepted():
    result = launch("-q", "--num_processes=2", "--main_process_port=12345", "--main_process_ip=localhost",
                    "--", PROBE)
    check(result.code == 0, "expected exit code 0", result)
    envs = [env_of(line) for line in result.stdout.splitlines()]
    check(len(envs) == 2 and all(e.get("WORLD_SIZE") == "2" and e.get("MASTER_PORT") == "12345"
                                 and e.get("MASTER_ADDR") == "localhost" for e in envs),
          "--flag=value must set WORLD_SIZE, MASTER_PORT and MASTER_ADDR", result)
    hyphens = launch("-q", "--num-processes", "2", PROBE)
    sizes = [env_of(line).get("WORLD_SIZE") for line in hyphens.stdout.splitlines()]
    check(hyphens.code == 0 and sizes == ["2", "2"],
          "--num-processes must be accepted as --num_processes", hyphens)


def ProgramArgumentsPassThrough():
    result = launch(PROBE, "--echo-args", "--num_processes", "5", "-q", "--", "x")
    check(result.code == 0, "expected exit code 0", result)
    check("probe args: --echo-args --num_processes 5 -q -- x\n" in result.stdout,
          "everything after PROGRAM must reach it untouched", result)
    check(env_of(result.stdout).get("WORLD_SIZE") == "1", "flags after PROGRAM are not accel's", result)


def PortZeroPicksAFreePort():
    result = launch("-q", "--num_processes", "2", "--main_process_port", "0", PROBE)
    check(result.code == 0, "expected exit code 0", result)
    ports = {env_of(line).get("MASTER_PORT") for line in result.stdout.splitlines()}
    check(len(ports) == 1, "both ranks must get the same MASTER_PORT", result)
    port = int(ports.pop())
    check(0 < port < 65536, f"port 0 must be replaced by a real port, got {port}", result)


def ProgramIsFoundOnPath():
    folder, name = os.path.split(PROBE)
    env = environment(PATH=folder + os.pathsep + os.environ.get("PATH", ""))
    result = launch(name, env=env)
    check(result.code == 0 and result.stdout.startswith("probe pid="), "a bare name must be found on PATH",
          result)


# ------------------------------------------------------------------------------------------------ bad input

def ZeroProcessesIsRejected():
    check_usage_error(launch("--num_processes", "0", PROBE),
                      "accel launch: --num_processes must be a whole number >= 1 (got '0')")


def NonNumericProcessesIsRejected():
    check_usage_error(launch("--num_processes", "two", PROBE),
                      "accel launch: --num_processes must be a whole number >= 1 (got 'two')")
    check_usage_error(launch("--num_processes", "-1", PROBE),
                      "accel launch: --num_processes must be a whole number >= 1 (got '-1')")


def MissingFlagValueIsRejected():
    expected = "accel launch: --num_processes needs a value (e.g. --num_processes N)"
    check_usage_error(launch("--num_processes"), expected)
    check_usage_error(launch("--num_processes", "--quiet", PROBE), expected)
    check_usage_error(launch("--quiet=yes", PROBE), "accel launch: --quiet takes no value (got '--quiet=yes')")


def PortOutOfRangeIsRejected():
    check_usage_error(launch("--main_process_port", "65536", PROBE),
                      "accel launch: --main_process_port must be a whole number between 0 and 65535 (got '65536')")


def UnknownFlagSuggestsTheRightOne():
    check_usage_error(launch("--num_process", "2", PROBE),
                      "accel launch: unknown flag --num_process (did you mean --num_processes?)")
    check_usage_error(launch("--nproc_per_node", "2", PROBE),
                      "accel launch: unknown flag --nproc_per_node (did you mean --num_processes?)")
    check_usage_error(launch("--zzz", PROBE), "accel launch: unknown flag --zzz (see --help for the flags)")


def MissingProgramIsRejected():
    missing = os.path.join(os.path.dirname(PROBE), "no_such_program")
    result = launch("--num_processes", "2", missing)
    check_usage_error(result, f"accel launch: cannot run '{missing}': no such file (check the path, or build "
                              "the program first)")
    result = launch("no_such_program_on_path")
    check_usage_error(result, "accel launch: cannot run 'no_such_program_on_path': not found on PATH (give its "
                              "path, like ./no_such_program_on_path, or add its folder to PATH)")


def NonExecutableProgramIsRejected():
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as script:
        script.write("#!/bin/sh\necho started\n")
        script.flush()
        os.chmod(script.name, 0o644)
        check_usage_error(launch(script.name), f"accel launch: cannot run '{script.name}': not an executable "
                                               f"file (if it is one, chmod +x {script.name})")


def NoProgramIsRejected():
    result = launch("--num_processes", "2")
    check(result.code == 2 and len(result.stderr.splitlines()) == 1 and "no program to run" in result.stderr,
          "accel launch without PROGRAM must say so in one line", result)


# ------------------------------------------------------------------------------------------ failure, signals

def run_failing(probe_args, *accel_args):
    with tempfile.TemporaryDirectory() as sync_dir:
        return launch(*accel_args, "-q", "--num_processes", "2", PROBE, "--sync-dir", sync_dir, *probe_args)


def pid_of_rank(stdout, rank):
    match = re.search(rf"^\[rank{rank}\]: probe pid=(\d+)", stdout, re.M)
    check(match is not None, f"rank {rank} printed no pid line\n{stdout}")
    return int(match.group(1))


def FailingRankStopsTheOthers():
    result = run_failing(["--fail", "1", "3", "--sleep", "60"])
    check(result.code == 3, "accel must exit with the failed rank's exit code 3", result)
    check(result.seconds < STOP_WITHIN_S, f"accel must stop within {STOP_WITHIN_S} s", result)
    expected = (f"accel launch: rank 1 (pid {pid_of_rank(result.stdout, 1)}) failed with exit code 3; "
                "stopped the other 1 rank(s)")
    check(result.stderr.splitlines()[-1:] == [expected], f"the last stderr line must be: {expected}", result)
    check_no_process_left(probe_pids(result.stdout), result)


def RankIgnoringSigtermIsKilledAfterGrace():
    result = run_failing(["--fail", "1", "3", "--sleep", "60", "--ignore-sigterm"], "--term_timeout", "1")
    check(result.code == 3, "accel must exit with the failed rank's exit code 3", result)
    check(1 <= result.seconds < STOP_WITHIN_S, "a rank ignoring SIGTERM gets SIGKILL after --term_timeout",
          result)
    check(result.stderr.rstrip().endswith("stopped the other 1 rank(s), with SIGKILL after the 1 s grace "
                                          "period"), "the message must say SIGKILL was needed", result)
    check_no_process_left(probe_pids(result.stdout), result)


def KilledRankIsReported():
    result = run_failing(["--kill-self", "0", str(int(signal.SIGKILL)), "--sleep", "60"])
    check(result.code == 128 + signal.SIGKILL, "a rank killed by signal 9 makes accel exit 137", result)
    expected = (f"accel launch: rank 0 (pid {pid_of_rank(result.stdout, 0)}) was killed by signal 9 (SIGKILL); "
                "stopped the other 1 rank(s)")
    check(result.stderr.splitlines()[-1:] == [expected], f"the last stderr line must be: {expected}", result)
    check_no_process_left(probe_pids(result.stdout), result)


def ChildOfAFailedRankIsStopped():
    result = run_failing(["--spawn-child", "--fail", "1", "3", "--sleep", "60"])
    check(result.code == 3, "expected exit code 3", result)
    check(len(re.findall("probe child pid=", result.stdout)) == 2, "each rank must report its child", result)
    check_no_process_left(probe_pids(result.stdout), result)


def LeftoverChildIsStoppedAfterSuccess():
    result = launch("-q", "--num_processes", "2", PROBE, "--spawn-child")
    check(result.code == 0, "ranks that exit 0 make accel exit 0", result)
    check(result.seconds < STOP_WITHIN_S, "a child holding a rank's output must not keep accel waiting", result)
    check_no_process_left(probe_pids(result.stdout), result)


def signal_launcher(signal_numbers, accel_args=(), probe_args=()):
    """Starts 2 sleeping ranks; once both have printed their pid, sends accel each of `signal_numbers`,
    0.3 s apart. The Result's seconds count from the last signal."""
    start = time.monotonic()
    command = [ACCEL, "launch", "-q", "--num_processes", "2", *accel_args, PROBE, "--sleep", "60", *probe_args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment())
    stdout = b""
    try:
        while stdout.count(b"probe pid=") < 2 and time.monotonic() - start < RUN_TIMEOUT_S:
            if select.select([process.stdout], [], [], 1)[0]:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                stdout += chunk
        for i, signal_number in enumerate(signal_numbers):
            time.sleep(0.3 if i else 0)
            process.send_signal(signal_number)
        sent = time.monotonic()
        rest, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return Result(process.returncode, (stdout + rest).decode(), stderr.decode(), time.monotonic() - sent)


def check_signal_stops_ranks(signal_number):
    result = signal_launcher([signal_number])
    name = signal.Signals(signal_number).name
    check(result.code == 128 + signal_number, f"accel must exit 128 + {name}", result)
    check(result.seconds < STOP_WITHIN_S, f"accel must stop within {STOP_WITHIN_S} s of {name}", result)
    check(result.stderr.splitlines() == [f"accel launch: received {name}; passed it on to 2 running rank(s)"],
          "accel must say which signal stopped it", result)
    check(len(probe_pids(result.stdout)) == 2, "both ranks must have printed their pid", result)
    check_no_process_left(probe_pids(result.stdout), result)


def SigtermToLauncherStopsAllRanks():
    check_signal_stops_ranks(signal.SIGTERM)


def SigintToLauncherStopsAllRanks():
    check_signal_stops_ranks(signal.SIGINT)


def SecondSignalKillsRanksAtOnce():
    result = signal_launcher([signal.SIGTERM, signal.SIGTERM], ["--term_timeout", "30"], ["--ignore-sigterm"])
    check(result.code == 128 + signal.SIGTERM, "accel must exit 128 + SIGTERM", result)
    check(result.seconds < STOP_WITHIN_S, "a second signal must not wait out the 30 s grace period", result)
    check(result.stderr.splitlines() == ["accel launch: received SIGTERM; passed it on to 2 running rank(s), "
                                         "with SIGKILL on a second signal"], "accel must say it used SIGKILL",
          result)
    check_no_process_left(probe_pids(result.stdout), result)


# ------------------------------------------------------------------------------------ machines, settings

def write_config(text):
    config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    config.write(text)
    config.close()
    return config.name


def env_lines(stdout):
    """{rank: {NAME: value}} from `env` run as the program (lines prefixed [rankN]: when N > 1)."""
    ranks = {}
    for line in stdout.splitlines():
        match = re.match(r"(?:\[rank(\d+)\]: )?(\w+)=(.*)", line)
        if match:
            ranks.setdefault(int(match.group(1) or 0), {})[match.group(2)] = match.group(3)
    return ranks


def SecondMachineRanksAreOffset():
    result = launch("-q", "--num_machines", "2", "--machine_rank", "1", "--num_processes", "4",
                    "--main_process_ip", "127.0.0.1", PROBE)
    check(result.code == 0, "machine 1 of 2 must start its ranks", result)
    for local, rank in ((0, 2), (1, 3)):
        lines = [line for line in rank_lines(result.stdout, rank) if "probe pid=" in line]
        check(len(lines) == 1, f"expected global rank {rank} (local {local}) on machine 1", result)
        got = env_of(lines[0])
        expected = {"RANK": rank, "LOCAL_RANK": local, "WORLD_SIZE": 4, "LOCAL_WORLD_SIZE": 2, "GROUP_RANK": 1,
                    "GROUP_WORLD_SIZE": 2, "ROLE_RANK": rank, "ROLE_WORLD_SIZE": 4}
        for name, value in expected.items():
            check(got.get(name) == str(value), f"rank {rank}: expected {name}={value}, got {got.get(name)}", result)


def SettingsComeFromConfigThenEnvironmentThenFlags():
    config = write_config("distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: fp16\ndebug: true\n"
                          "use_cpu: true\n")
    try:
        from_file = env_lines(launch("-q", "--config_file", config, "env").stdout)
        check(sorted(from_file) == [0, 1], "num_processes 2 from the config file must start 2 ranks")
        check(from_file[0].get("ACCELERATE_MIXED_PRECISION") == "fp16" and
              from_file[0].get("ACCELERATE_DEBUG_MODE") == "true" and
              from_file[0].get("ACCELERATE_USE_CPU") == "True", f"the config's settings: {from_file[0]}")
        env = environment(ACCELERATE_MIXED_PRECISION="bf16", ACCELERATE_CONFIG_FILE=config)
        from_env = env_lines(launch("-q", "env", env=env).stdout)
        check(from_env[1].get("ACCELERATE_MIXED_PRECISION") == "bf16", "the environment must beat the config file")
        from_flag = env_lines(launch("-q", "--mixed_precision", "no", "--num_processes", "1", "env", env=env).stdout)
        check(sorted(from_flag) == [0] and from_flag[0].get("ACCELERATE_MIXED_PRECISION") == "no",
              "flags must beat the environment and the config file")
        bad = launch("-q", "env", env=environment(ACCELERATE_MIXED_PRECISION="fp17"))
        check_usage_error(bad, "accel launch: ACCELERATE_MIXED_PRECISION=fp17 in the environment must be one of no, "
                               "fp16, bf16, fp8 (fix or unset it; it overrides the config file)")
    finally:
        os.unlink(config)


# An FSDP file accelerate-cpp runs, and the variables Hugging Face's launcher (accelerate/utils/launch.py,
# prepare_multi_gpu_env, Accelerate 1.15.0) exports for it: every FSDP_* variable it exports, with its flags'
# defaults for the keys the file leaves out, and none for a key without a default (ignored modules).
# The settings library's reason (runtime/settings/strategy.cpp) when another strategy is named with ZeRO stage 1 or 2.
ZERO_STAGE_SELECTS_ZERO = ("a ZeRO stage of 1 or 2 runs the \"zero\" strategy. Leave parallel_strategy unset (zero_stage "
                           "then selects zero) or set it to zero, or set zero_stage to 0 to replicate the model")
FSDP_FILE = ("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\n"
             "mixed_precision: 'no'\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"
             "  fsdp_state_dict_type: FULL_STATE_DICT\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
             "  fsdp_transformer_layer_cls_to_wrap: Block, Pair\n"
             "  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_cpu_ram_efficient_loading: false\n"
             "  fsdp_activation_checkpointing: true\n  fsdp_offload_params: true\n")
FSDP_FILE_EXPORTS = {"FSDP_VERSION": "2", "FSDP_SHARDING_STRATEGY": "FULL_SHARD", "FSDP_RESHARD_AFTER_FORWARD": "false",
                     "FSDP_OFFLOAD_PARAMS": "true", "FSDP_MIN_NUM_PARAMS": "100000000",
                     "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block, Pair",
                     "FSDP_BACKWARD_PREFETCH": "BACKWARD_PRE",
                     "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_FORWARD_PREFETCH": "false",
                     "FSDP_USE_ORIG_PARAMS": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "false",
                     "FSDP_SYNC_MODULE_STATES": "true", "FSDP_ACTIVATION_CHECKPOINTING": "true",
                     "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "false"}
# What it exports for --use_fsdp alone: its flags' defaults (no FSDP_STATE_DICT_TYPE: that flag has none).
FSDP_DEFAULT_EXPORTS = {"FSDP_VERSION": "1", "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
                        "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_OFFLOAD_PARAMS": "false",
                        "FSDP_MIN_NUM_PARAMS": "100000000",
                        "FSDP_FORWARD_PREFETCH": "false", "FSDP_USE_ORIG_PARAMS": "true",
                        "FSDP_CPU_RAM_EFFICIENT_LOADING": "true", "FSDP_SYNC_MODULE_STATES": "true",
                        "FSDP_ACTIVATION_CHECKPOINTING": "false", "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "false"}


def fsdp_variables(variables):
    return {k: v for k, v in variables.items() if k.startswith("FSDP_")}


def FsdpConfigFileExportsAccelerateVariables():
    config = write_config(FSDP_FILE)
    try:
        for args, env in [(("--config_file", config), environment()), ((), environment(ACCELERATE_CONFIG_FILE=config))]:
            result = launch("-q", *args, "env", env=env)
            check(result.code == 0, "an FSDP file must launch", result)
            ranks = env_lines(result.stdout)
            check(sorted(ranks) == [0, 1], "num_processes 2 from the file must start 2 ranks", result)
            for rank, variables in ranks.items():
                check(variables.get("ACCELERATE_USE_FSDP") == "true" and variables.get("ACCELERATE_USE_CPU") == "True",
                      f"rank {rank}: ACCELERATE_USE_FSDP=true and ACCELERATE_USE_CPU=True", result)
                check(fsdp_variables(variables) == FSDP_FILE_EXPORTS,
                      f"rank {rank}: the FSDP_* variables Hugging Face's launcher exports: {FSDP_FILE_EXPORTS}, "
                      f"got {fsdp_variables(variables)}", result)
    finally:
        os.unlink(config)
    # Older Accelerate versions write empty sections, which ask for nothing.
    config = write_config("distributed_type: MULTI_CPU\nnum_processes: 2\nfsdp_config: {}\ndeepspeed_config: {}\n")
    try:
        result = launch("-q", "--config_file", config, "env")
        check(result.code == 0, "a MULTI_CPU file with empty sections must launch", result)
        check("ACCELERATE_USE_DEEPSPEED" not in result.stdout and "ACCELERATE_USE_FSDP" not in result.stdout
              and "FSDP_" not in result.stdout, "empty sections ask for neither ZeRO nor FSDP", result)
    finally:
        os.unlink(config)


def FsdpFlagsExportAccelerateVariables():
    # Accelerate's flag names: the same variables as from a file; a flag beats the file and the environment.
    result = launch("-q", "--use_fsdp", "--fsdp_version", "2", "--fsdp_reshard_after_forward", "False",
                    "--fsdp_state_dict_type", "full_state_dict", "--fsdp_backward_prefetch", "BACKWARD_PRE",
                    "--fsdp_cpu_ram_efficient_loading", "false", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
                    "--fsdp_transformer_layer_cls_to_wrap", "Block, Pair", "--fsdp_activation_checkpointing", "True",
                    "--fsdp_offload_params", "True", "env")
    check(result.code == 0, "accel launch --use_fsdp must run", result)
    got = env_lines(result.stdout)[0]
    check(got.get("ACCELERATE_USE_FSDP") == "true" and fsdp_variables(got) == FSDP_FILE_EXPORTS,
          f"--use_fsdp and its flags: expected {FSDP_FILE_EXPORTS}, got {fsdp_variables(got)}", result)
    alone = env_lines(launch("-q", "--use_fsdp", "env").stdout)[0]
    check(alone.get("ACCELERATE_USE_FSDP") == "true" and fsdp_variables(alone) == FSDP_DEFAULT_EXPORTS,
          f"--use_fsdp alone: Accelerate's defaults {FSDP_DEFAULT_EXPORTS}, got {fsdp_variables(alone)}")
    # FSDP1's spelling: a strategy for --fsdp_reshard_after_forward, exported lower-cased as Accelerate does; the
    # strategy's number.
    spelled = env_lines(launch("-q", "--use_fsdp", "--fsdp_reshard_after_forward", "SHARD_GRAD_OP", "env").stdout)[0]
    check(spelled.get("FSDP_RESHARD_AFTER_FORWARD") == "shard_grad_op", f"FSDP1's spelling: {spelled}")
    numbered = env_lines(launch("-q", "--use_fsdp", "--fsdp_sharding_strategy", "2", "env").stdout)[0]
    check(numbered.get("FSDP_SHARDING_STRATEGY") == "2", f"a strategy's number: {numbered}")
    # The environment's FSDP_SHARDING_STRATEGY=FULL_SHARD (what Accelerate's launcher exports by default) gives way.
    lenient = launch("-q", "--use_fsdp", "--fsdp_reshard_after_forward", "false", "env",
                     env=environment(FSDP_SHARDING_STRATEGY="FULL_SHARD"))
    check(lenient.code == 0 and env_lines(lenient.stdout)[0].get("FSDP_RESHARD_AFTER_FORWARD") == "false",
          "FSDP_SHARDING_STRATEGY=FULL_SHARD in the environment must give way to --fsdp_reshard_after_forward", lenient)
    # ACCELERATE_USE_FSDP=true in the environment asks for FSDP as --use_fsdp does; false asks for nothing.
    from_env = launch("-q", "env", env=environment(ACCELERATE_USE_FSDP="true"))
    check(from_env.code == 0 and fsdp_variables(env_lines(from_env.stdout)[0]) == FSDP_DEFAULT_EXPORTS,
          "ACCELERATE_USE_FSDP=true must launch FSDP", from_env)
    off = launch("-q", "env", env=environment(ACCELERATE_USE_FSDP="false"))
    check(off.code == 0 and "FSDP_" not in off.stdout, "ACCELERATE_USE_FSDP=false asks for nothing", off)
    # A mode flag beats the environment: the ranks are told FSDP is off.
    other = launch("-q", "--use_deepspeed", "env", env=environment(ACCELERATE_USE_FSDP="true"))
    check(other.code == 0 and env_lines(other.stdout)[0].get("ACCELERATE_USE_FSDP") == "false",
          "--use_deepspeed must turn ACCELERATE_USE_FSDP=true from the environment off in the ranks", other)
    # Without --use_fsdp the FSDP flags do nothing, as in Accelerate.
    plain = env_lines(launch("-q", "--fsdp_version", "2", "env").stdout)[0]
    check(not fsdp_variables(plain) and "ACCELERATE_USE_FSDP" not in plain,
          f"--fsdp_version without --use_fsdp: {plain}")
    # ZeRO stage 3 runs the fsdp strategy: DeepSpeed's variables, as Accelerate exports them.
    stage3 = launch("-q", "--use_deepspeed", "--zero_stage", "3", PROBE, "--print-env", "ACCELERATE_")
    check(stage3.code == 0 and env_lines(stage3.stdout)[0].get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3",
          "--use_deepspeed --zero_stage 3 must launch", stage3)


OFFLOAD = ("conflicts with fsdp_activation_checkpointing false: only the inputs a checkpointed unit keeps can be "
           "offloaded, and without activation checkpointing no unit keeps them (set fsdp_activation_checkpointing true "
           "as well, or fsdp_activation_checkpointing_offload false)")
HYBRID = ("shards within each machine and replicates across machines, but the job runs on one machine (num_machines 1), "
          "where there is nothing to replicate: use {} on one machine, or launch on several (--num_machines N "
          "--machine_rank R --main_process_ip ADDRESS on each)")


def UnsupportedFsdpSettingsAreRefused():
    # Each setting the fsdp strategy does not run yet, by the flag, variable or key that asked for it: one line, exit 2,
    # no rank started.
    refused = [
        (["--fsdp_offload_params", "maybe"], "--fsdp_offload_params must be true or false (got 'maybe')"),
        (["--fsdp_auto_wrap_policy", "transformer_based_wrap"],
         "--fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP makes units of the module classes "
         "fsdp_transformer_layer_cls_to_wrap lists, and it lists none (name the classes, comma-separated, e.g. "
         "fsdp_transformer_layer_cls_to_wrap: Block; accelerate-cpp has no Transformers `_no_split_modules` to take "
         "them from; or use SIZE_BASED_WRAP or NO_WRAP)"),
        (["--fsdp_auto_wrap_policy", "FOO"],
         "--fsdp_auto_wrap_policy must be one of TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP (got 'FOO')"),
        (["--fsdp_min_num_params", "-1"], "--fsdp_min_num_params must be a whole number >= 0 (got '-1')"),
        (["--fsdp_activation_checkpointing_offload", "true"],
         f"--fsdp_activation_checkpointing_offload true {OFFLOAD}"),
        (["--fsdp_sharding_strategy", "HYBRID_SHARD"],
         f"--fsdp_sharding_strategy HYBRID_SHARD {HYBRID.format('FULL_SHARD')}"),
        (["--fsdp_reshard_after_forward", "hybrid_shard_zero2"],
         f"--fsdp_reshard_after_forward HYBRID_SHARD_ZERO2 {HYBRID.format('SHARD_GRAD_OP')}"),
        (["--fsdp_state_dict_type", "LOCAL_STATE_DICT"],
         "--fsdp_state_dict_type LOCAL_STATE_DICT is FSDP1's per-process flat shards, which neither FSDP2 nor "
         "accelerate-cpp writes (use SHARDED_STATE_DICT: each process writes its shards, or FULL_STATE_DICT: the main "
         "process writes whole models)"),
        (["--fsdp_version", "3"], "--fsdp_version must be a whole number between 1 and 2 (got '3')"),
        (["--fsdp_sharding_strategy", "FULL"],
         "--fsdp_sharding_strategy must be one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
         "HYBRID_SHARD_ZERO2, or a number from 1 to 5 (got 'FULL')"),
        (["--fsdp_sharding_strategy", "SHARD_GRAD_OP", "--fsdp_reshard_after_forward", "true"],
         "--fsdp_sharding_strategy SHARD_GRAD_OP conflicts with --fsdp_reshard_after_forward true: "
         "fsdp_reshard_after_forward true means FULL_SHARD (or HYBRID_SHARD), false SHARD_GRAD_OP (or NO_SHARD, "
         "HYBRID_SHARD_ZERO2) (set one of the two, or make them agree)"),
    ]
    for flags, expected in refused:
        check_usage_error(launch("--use_fsdp", *flags, PROBE), f"accel launch: {expected}")
    # With activation checkpointing its offload is taken, and exported as Accelerate does.
    both = launch("-q", "--use_fsdp", "--fsdp_activation_checkpointing", "true",
                  "--fsdp_activation_checkpointing_offload", "true", PROBE, "--print-env", "FSDP_")
    check(both.code == 0 and env_lines(both.stdout)[0].get("FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD") == "true",
          "activation checkpointing with its offload must launch and export FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
          both)
    # The same settings from the environment (the ranks would inherit them), and from a file.
    check_usage_error(launch("--use_fsdp", PROBE, env=environment(FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD="true")),
                      f"accel launch: FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD=true in the environment {OFFLOAD}")
    check_usage_error(launch(PROBE, env=environment(ACCELERATE_USE_FSDP="true", FSDP_VERSION="3")),
                      "accel launch: FSDP_VERSION=3 in the environment must be a whole number between 1 and 2 (fix or "
                      "unset it; it overrides the config file)")
    config = write_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing_offload: true\n")
    try:
        check_usage_error(launch("--config_file", config, PROBE),
                          f"accel launch: {config}:3:3: fsdp_config.fsdp_activation_checkpointing_offload true "
                          f"{OFFLOAD}")
    finally:
        os.unlink(config)
    # Settings that contradict each other: both named.
    check_usage_error(launch("--use_fsdp", PROBE, env=environment(ACCELERATE_PARALLEL_STRATEGY="ddp")),
                      "accel launch: ACCELERATE_PARALLEL_STRATEGY=ddp in the environment conflicts with --use_fsdp: "
                      "FSDP runs the \"fsdp\" strategy. Leave parallel_strategy unset or set it to fsdp, or leave out "
                      "the FSDP settings (distributed_type MULTI_GPU or MULTI_CPU without an fsdp_config section, "
                      "ACCELERATE_USE_FSDP unset)")
    check_usage_error(launch("--use_deepspeed", "--zero_stage", "3", PROBE,
                             env=environment(ACCELERATE_PARALLEL_STRATEGY="zero")),
                      "accel launch: ACCELERATE_PARALLEL_STRATEGY=zero in the environment conflicts with "
                      "--zero_stage 3: ZeRO stage 3 shards the parameters too, which the \"fsdp\" strategy runs. "
                      "Leave parallel_strategy unset (zero_stage 3 then selects fsdp) or set it to fsdp, or set "
                      "zero_stage to 1 or 2")
    check_usage_error(launch("--use_fsdp", PROBE, env=environment(ACCELERATE_DEEPSPEED_ZERO_STAGE="2")),
                      "accel launch: ACCELERATE_DEEPSPEED_ZERO_STAGE=2 in the environment conflicts with --use_fsdp: "
                      "a ZeRO stage of 1 or 2 runs the zero strategy, and FSDP the fsdp strategy; ask for one: leave "
                      "out the DeepSpeed settings (or use zero_stage 3, which is fully sharded), or the FSDP ones")
    # DeepSpeed's optimizer offload with FSDP asked for other than through zero_stage 3.
    check_usage_error(launch("--use_fsdp", PROBE, env=environment(ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE="cpu")),
                      "accel launch: ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=cpu in the environment conflicts "
                      "with the fsdp strategy: the fsdp strategy keeps the optimizer state in CPU memory with "
                      "fsdp_offload_params (use none, and fsdp_offload_params true in fsdp_config, "
                      "FSDP_OFFLOAD_PARAMS=true or --fsdp_offload_params true: the shards, their gradients and the "
                      "optimizer state in CPU memory; ZeRO stage 1 or 2 offloads the optimizer state alone, and "
                      "zero_stage 3 takes DeepSpeed's offload as fsdp_offload_params)")


def ZeroStage3OffloadRunsAsFsdpOffload():
    # DeepSpeed's CPU offload at stage 3 launches, exported as Accelerate's launcher exports it; the runtime reads it
    # as fsdp_offload_params (config.FsdpFilesAreJudgedAlikeByAccelAndTheRuntime, config_test.py).
    for flags in (["--offload_optimizer_device", "cpu"], ["--offload_param_device", "cpu"],
                  ["--offload_optimizer_device", "cpu", "--offload_param_device", "CPU"]):
        result = launch("-q", "--use_deepspeed", "--zero_stage", "3", *flags, PROBE, "--print-env", "ACCELERATE_")
        check(result.code == 0, f"--zero_stage 3 {' '.join(flags)} must launch", result)
        got = env_lines(result.stdout)[0]
        for flag, value in zip(flags[::2], flags[1::2]):
            variable = "ACCELERATE_DEEPSPEED_" + flag[2:].upper()
            check(got.get(variable) == value.lower(), f"expected {variable}={value.lower()}, got {got.get(variable)}",
                  result)
    # Parameter offload below stage 3, and against fsdp_offload_params false, is refused; false exported by a launcher
    # (in the environment) gives way.
    check_usage_error(launch("--use_deepspeed", "--offload_param_device", "cpu", PROBE),
                      "accel launch: --offload_param_device cpu conflicts with zero_stage 2: DeepSpeed offloads "
                      "parameters at ZeRO stage 3 only (use zero_stage 3, where it runs as fsdp_offload_params true, "
                      "or offload_param_device none)")
    check_usage_error(launch("--use_deepspeed", "--zero_stage", "3", "--offload_param_device", "nvme", PROBE),
                      "accel launch: --offload_param_device nvme: accelerate-cpp does not offload to NVMe (use none or "
                      "cpu)")
    check_usage_error(launch("--use_deepspeed", "--zero_stage", "3", "--offload_optimizer_device", "cpu",
                             "--fsdp_offload_params", "false", PROBE),
                      "accel launch: --offload_optimizer_device cpu conflicts with --fsdp_offload_params false: under "
                      "ZeRO stage 3 (the fsdp strategy) DeepSpeed's CPU offload runs as fsdp_offload_params true: the "
                      "shards, their gradients and the optimizer state in CPU memory (set the DeepSpeed offload "
                      "devices to none, or fsdp_offload_params true)")
    given_way = launch("-q", "--use_deepspeed", "--zero_stage", "3", "--offload_param_device", "cpu", PROBE,
                       env=environment(FSDP_OFFLOAD_PARAMS="false"))
    check(given_way.code == 0, "FSDP_OFFLOAD_PARAMS=false in the environment must give way", given_way)


# The variables Hugging Face's launcher (accelerate/utils/launch.py, prepare_deepspeed_cmd_env) exports for
# this file, which accel launch must give every rank.
ZERO_FILE = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: false\n"
             "mixed_precision: 'no'\ndeepspeed_config:\n  zero_stage: 2\n  gradient_clipping: 1.0\n"
             "  gradient_accumulation_steps: 3\n  offload_optimizer_device: none\n")
ZERO_FILE_EXPORTS = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2",
                     "ACCELERATE_GRADIENT_CLIPPING": "1.0", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "3",
                     "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none", "ACCELERATE_MIXED_PRECISION": "no",
                     "ACCELERATE_CONFIG_DS_FIELDS":
                         "gradient_accumulation_steps,gradient_clipping,offload_optimizer_device,zero_stage,"
                         "mixed_precision"}


def DeepSpeedConfigExportsZeroSettingsToEveryRank():
    config = write_config(ZERO_FILE)
    try:
        result = launch("-q", "--config_file", config, PROBE, "--print-env", "ACCELERATE_")
        check(result.code == 0, "a DeepSpeed ZeRO-2 file must launch", result)
        ranks = env_lines(result.stdout)
        check(sorted(ranks) == [0, 1], "num_processes 2 from the file must start 2 ranks", result)
        for rank, variables in ranks.items():
            for name, value in ZERO_FILE_EXPORTS.items():
                check(variables.get(name) == value, f"rank {rank}: expected {name}={value}, got {variables.get(name)}",
                      result)
        check("ACCELERATE_DEEPSPEED_ZERO3_INIT" not in result.stdout, "keys the file does not set are not exported",
              result)
    finally:
        os.unlink(config)


def DeepSpeedFlagsExportZeroSettings():
    # Accelerate's own flag names: the same variables as from a file.
    result = launch("-q", "--use_deepspeed", "--zero_stage", "1", "--gradient_clipping", "0.5",
                    "--offload_optimizer_device", "CPU", "--gradient_accumulation_steps", "4", PROBE, "--print-env",
                    "ACCELERATE_")
    check(result.code == 0, "accel launch --use_deepspeed must run", result)
    got = env_lines(result.stdout)[0]
    expected = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "1",
                "ACCELERATE_GRADIENT_CLIPPING": "0.5", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu",
                "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4", "ACCELERATE_CONFIG_DS_FIELDS": ""}
    for name, value in expected.items():
        check(got.get(name) == value, f"expected {name}={value}, got {got.get(name)}", result)
    # --use_deepspeed alone: no stage is exported, and the runtime takes Accelerate's default stage 2.
    alone = env_lines(launch("-q", "--use_deepspeed", PROBE, "--print-env", "ACCELERATE_").stdout)[0]
    check(alone.get("ACCELERATE_USE_DEEPSPEED") == "true" and "ACCELERATE_DEEPSPEED_ZERO_STAGE" not in alone,
          f"--use_deepspeed alone: {alone}")
    # Without --use_deepspeed the DeepSpeed flags do nothing, as in Accelerate.
    plain = env_lines(launch("-q", "--zero_stage", "2", PROBE, "--print-env", "ACCELERATE_").stdout)[0]
    check("ACCELERATE_DEEPSPEED_ZERO_STAGE" not in plain and "ACCELERATE_USE_DEEPSPEED" not in plain,
          f"--zero_stage without --use_deepspeed: {plain}")


def UnsupportedZeroSettingsAreRefused():
    check_usage_error(launch("--use_deepspeed", "--zero_stage", "4", PROBE),
                      "accel launch: --zero_stage must be a whole number between 0 and 3 (got '4')")
    check_usage_error(launch("--use_deepspeed", "--offload_optimizer_device", "nvme", PROBE),
                      "accel launch: --offload_optimizer_device nvme: accelerate-cpp does not offload to NVMe (use "
                      "none or cpu)")
    missing = os.path.join(tempfile.gettempdir(), f"accel-missing-{os.getpid()}.json")
    check_usage_error(launch("--use_deepspeed", "--deepspeed_config_file", missing, PROBE),
                      f"accel launch: DeepSpeed config {missing} cannot be read (No such file or directory; named by "
                      f"--deepspeed_config_file {missing}): fix the path (a relative one is from the working "
                      "directory, as in Accelerate)")
    check_usage_error(launch("--use_deepspeed", "--zero3_init_flag", "true", PROBE),
                      "accel launch: --zero3_init_flag true is for ZeRO stage 3's partitioned construction "
                      "(deepspeed.zero.Init), which accelerate-cpp does not do: every process builds the whole model "
                      "and prepare() shards it (use false)")
    # An explicit strategy other than zero with a ZeRO stage of 1 or 2: both named.
    check_usage_error(launch("--use_deepspeed", "--zero_stage", "2", PROBE,
                             env=environment(ACCELERATE_PARALLEL_STRATEGY="ddp")),
                      "accel launch: ACCELERATE_PARALLEL_STRATEGY=ddp in the environment conflicts with --zero_stage "
                      f"2: {ZERO_STAGE_SELECTS_ZERO}")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "zero.yaml")
        cases = [("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n",
                  "3:15: deepspeed_config.zero_stage must be a whole number between 0 and 3 (got '4')"),
                 ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: nvme\n",
                  "3:3: deepspeed_config.offload_optimizer_device nvme: accelerate-cpp does not offload to NVMe (use "
                  "none or cpu)"),
                 ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n  zero_stage: 2\n",
                  "4:3: with deepspeed_config_file set, Accelerate ignores these config keys and refuses them: "
                  "zero_stage. Give them in the DeepSpeed config file (gradient_accumulation_steps, "
                  "gradient_clipping, zero_optimization.stage, zero_optimization.offload_optimizer.device, "
                  "zero_optimization.offload_param.device, fp16.enabled or bf16.enabled) and remove them here")]
        for text, what in cases:
            with open(path, "w") as file:
                file.write(text)
            check_usage_error(launch("--config_file", path, PROBE), f"accel launch: {path}:{what}")
        with open(path, "w") as file:
            file.write("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n")
        check_usage_error(launch("--config_file", path, PROBE, env=environment(ACCELERATE_PARALLEL_STRATEGY="ddp")),
                          "accel launch: ACCELERATE_PARALLEL_STRATEGY=ddp in the environment conflicts with "
                          f"deepspeed_config.zero_stage 1 in the config file: {ZERO_STAGE_SELECTS_ZERO}")


def ProcessCountsAboveTheSystemLimitsAreRefusedBeforeAnyRankStarts():
    """Each process of a job keeps a connection to every other (and rank 0 one from each to its store): with
    the open-file limit lowered, a count that cannot run is refused at once, naming the limit; so is a count
    above the per-user process limit. A count within both still runs."""
    import resource

    def launch_limited(limit, value, *args):
        def lower():
            resource.setrlimit(limit, (value, resource.getrlimit(limit)[1]))
        start = time.monotonic()
        completed = subprocess.run([ACCEL, "launch", *args], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                                   env=environment(), preexec_fn=lower)
        return Result(completed.returncode, completed.stdout, completed.stderr, time.monotonic() - start)

    result = launch_limited(resource.RLIMIT_NOFILE, 256, "--num_processes", "200", PROBE)
    check_usage_error(result, "accel launch: --num_processes 200 needs about 464 open files in each process (a "
                              "connection to every other process of the job, and at rank 0 one from each to the "
                              f"rendezvous store), over this machine's limit of 256 (ulimit -n; hard limit "
                              f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]}): raise it (ulimit -n 464) or start "
                              "fewer processes")
    check(result.seconds < 5, "the refusal must come before any rank starts, within 5 s", result)
    result = launch_limited(resource.RLIMIT_NPROC, 3, "--num_processes", "4", PROBE)
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    check_usage_error(result, "accel launch: --num_processes 4 starts 4 processes on this machine, over its limit of 3 "
                              "processes per user (ulimit -u; hard limit "
                              f"{'unlimited' if hard == resource.RLIM_INFINITY else hard}): raise it or start "
                              "fewer processes")
    result = launch_limited(resource.RLIMIT_NOFILE, 256, "--num_processes", "2", PROBE)
    check(result.code == 0, "2 processes fit in 256 open files and must run", result)


def GpuIdsBecomeCudaVisibleDevices():
    gpus = env_lines(launch("-q", "--gpu_ids", "1", "env").stdout)[0]
    check(gpus.get("CUDA_VISIBLE_DEVICES") == "1", "--gpu_ids must become CUDA_VISIBLE_DEVICES")
    cpu = env_lines(launch("-q", "--cpu", "--gpu_ids", "1", "env", env=environment(CUDA_VISIBLE_DEVICES=None)).stdout)[0]
    check("CUDA_VISIBLE_DEVICES" not in cpu, "--cpu must not set CUDA_VISIBLE_DEVICES")


def RestartsStartEveryRankAgain():
    result = launch("-q", "--num_processes", "2", "--max_restarts", "2", PROBE, "--fail", "1", "3")
    check(result.code == 3, "a rank failing every time ends with its exit code after the restarts", result)
    restarts = [line for line in result.stderr.splitlines() if "restarting the 2 local rank(s)" in line]
    check(len(restarts) == 2 and "restart 2 of --max_restarts 2" in restarts[1], "two restarts must be reported",
          result)
    # Rank 1 prints its pid before failing, each time (rank 0 may be stopped before it prints).
    check(len(re.findall(r"\[rank1\]: probe pid=", result.stdout)) == 3, "each of 3 attempts must start rank 1",
          result)


def LogDirKeepsEachRanksOutput():
    with tempfile.TemporaryDirectory() as logs:
        result = launch("-q", "--num_processes", "2", "--log_dir", logs, "--tee", "3", PROBE, "--stderr", "oops")
        check(result.code == 0, "expected exit code 0", result)
        check("[rank1]: oops" in result.stderr, "with --tee the console still gets the output", result)
        with open(os.path.join(logs, "attempt_0", "1", "stderr.log")) as log:
            check(log.read() == "oops\n", "rank 1's stderr.log must hold its stderr, unprefixed")
        with open(os.path.join(logs, "attempt_0", "0", "stdout.log")) as log:
            check(log.read().startswith("probe pid="), "rank 0's stdout.log must hold its stdout")
    check_usage_error(launch("--tee", "3", PROBE), "accel launch: --tee 3 needs --log_dir (the folder the log files "
                                                   "go to)")


def MultiMachineMistakesAreRejected():
    check_usage_error(launch("--num_machines", "2", "--num_processes", "2", PROBE),
                      "accel launch: --num_machines 2 needs --main_process_ip (the address of machine rank 0, "
                      "reachable from every machine)")
    check_usage_error(launch("--num_machines", "2", "--num_processes", "2", "--main_process_ip", "127.0.0.1",
                             "--main_process_port", "0", PROBE),
                      "accel launch: --main_process_port 0 picks a free port on one machine only; with "
                      "--num_machines 2 give every machine the same port, like 29500")
    check_usage_error(launch("--num_machines", "2", "--machine_rank", "2", "--main_process_ip", "127.0.0.1", PROBE),
                      "accel launch: --machine_rank must be below --num_machines 2 (got 2)")
    check_usage_error(launch("--num_machines", "2", "--num_processes", "3", "--main_process_ip", "127.0.0.1", PROBE),
                      "accel launch: --num_processes is the total over all machines, as in Accelerate: 3 is not a "
                      "multiple of --num_machines 2 (give 4, for example)")
    check_usage_error(launch("--cpu", "--use_fsdp", PROBE),
                      "accel launch: use one of --cpu, --multi_gpu, --use_fsdp, --use_deepspeed at a time (got --cpu "
                      "and --use_fsdp)")
    check_usage_error(launch("--multi_gpu", "--num_processes", "1", PROBE),
                      "accel launch: --multi_gpu needs at least 2 processes (got 1; for one GPU, leave out --multi_gpu)")


def BusyPortIsRejected():
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        check_usage_error(launch("--num_processes", "2", "--main_process_port", str(port), PROBE),
                          f"accel launch: --main_process_port {port} is already in use on this machine (another job's "
                          "rendezvous? give another port, or 0 to pick a free one)")


# ------------------------------------------------------------------------------------------------------ CLI

def HelpAndUnknownCommand():
    top = accel("--help")
    check(top.code == 0 and "launch" in top.stdout, "accel --help must list launch", top)
    sub = accel("launch", "--help")
    check(sub.code == 0 and "--num_processes N" in sub.stdout and "--main_process_port PORT" in sub.stdout,
          "accel launch --help must list its flags", sub)
    typo = accel("lanch")
    check(typo.code == 2 and typo.stderr.splitlines() == ["accel: unknown command 'lanch' (did you mean "
                                                          "'launch'?)"], "a mistyped command gets a hint", typo)
    bare = accel()
    check(bare.code == 2 and "usage: accel" in bare.stderr, "accel alone prints usage to stderr, exit 2", bare)


# The tests are the functions named in CamelCase; CMakeLists.txt registers each with ctest (--list).
TESTS = {name: test for name, test in globals().items()
         if isinstance(test, types.FunctionType) and name[0].isupper()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the test names, one a line, and exit")
    parser.add_argument("--accel")
    parser.add_argument("--probe")
    parser.add_argument("test", nargs="?", choices=sorted(TESTS))
    args = parser.parse_args()
    if args.list:
        print("\n".join(TESTS))
        return
    if not (args.accel and args.probe and args.test):
        parser.error("give --accel, --probe and a test name (or --list)")
    global ACCEL, PROBE
    ACCEL, PROBE = os.path.abspath(args.accel), os.path.abspath(args.probe)

    def give_up(signum, frame):
        kill_leftovers()
        sys.exit(f"FAIL {args.test}: no result after {HARD_TIMEOUT_S} s (a hang)")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(HARD_TIMEOUT_S)
    try:
        TESTS[args.test]()
    except (AssertionError, subprocess.TimeoutExpired) as failure:
        sys.exit(f"FAIL {args.test}: {failure}")
    finally:
        kill_leftovers()
    print(f"PASS {args.test}")


if __name__ == "__main__":
    main()
