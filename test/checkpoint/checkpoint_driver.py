#!/usr/bin/env python3
"""Whole-process checkpoint tests: ranks of checkpoint_train started, killed and resumed from here.

    checkpoint_driver.py <scenario> --train build/bin/checkpoint_train --work /tmp/dir

Scenarios (each one ctest test, see CMakeLists.txt):
  kill-resume       2 ranks SIGKILLed at a random step after a checkpoint; the survivor must fail within the
                    timeout (no hang); resumed, the run ends bit-identical to an uninterrupted one (parameters,
                    optimizer state, learning rate, generator) and consumed the same batches.
  kill-during-save  SIGKILL between the files of save_state (ACCELERATE_TEST_KILL_DURING_SAVE): the previous
                    checkpoint stays the latest, the half-written one is ignored, resuming ends bit-identical.
  topology          a checkpoint written by 2 ranks resumes on 1 and on 3 ranks at the same global batch and
                    trains like a run that never stopped (float64, rtol 1e-9 on parameters, same batches).
  full-disk         save_state on a full filesystem (a small tmpfs in a private mount namespace) fails on every
                    rank with the reason, and the previous checkpoint stays intact and loadable.
Ranks are started directly with torchrun's variables, so this script can kill any of them at any moment.
Exits 77 (a ctest skip) with the reason when a scenario cannot run here.
"""
import argparse
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import json

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from numerics import report_spread  # noqa: E402  (the line scripts/numerics-matrix.sh reads)

SKIP = 77
TIMEOUT_S = 10  # the collective timeout the ranks run with (checkpoint_train --timeout)


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Ranks:
    """N ranks of checkpoint_train, each with its output in <work>/<name>.<rank>.out."""

    def __init__(self, driver, name, nproc, flags, env=None):
        self.name, self.nproc = name, nproc
        port = free_port()
        self.outputs = [os.path.join(driver.work, f"{name}.{rank}.out") for rank in range(nproc)]
        self.processes = []
        for rank in range(nproc):
            rank_env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                            LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                            OMP_NUM_THREADS="1", **(env or {}))
            with open(self.outputs[rank], "w") as out:
                self.processes.append(subprocess.Popen(
                    [driver.train, "--timeout", str(TIMEOUT_S), *flags], stdout=out, stderr=subprocess.STDOUT,
                    env=rank_env, start_new_session=True))
        driver.running.append(self)

    def output(self, rank):
        with open(self.outputs[rank], errors="replace") as out:
            return out.read()

    def all_output(self):
        return "".join(f"--- {self.name} rank {rank} ---\n{self.output(rank)}" for rank in range(self.nproc))

    def wait(self, timeout, expect_success=True):
        deadline = time.monotonic() + timeout
        codes = []
        for process in self.processes:
            try:
                codes.append(process.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise Failure(f"{self.name}: ranks still running after {timeout} s (a hang); killed them\n"
                              + self.all_output())
        if expect_success and any(codes):
            raise Failure(f"{self.name}: exit codes {codes}\n" + self.all_output())
        return codes

    def kill(self):
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Driver:
    def __init__(self, args):
        self.train, self.work = args.train, args.work
        self.running = []
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def run(self, name, nproc, flags, env=None, timeout=60):
        ranks = Ranks(self, name, nproc, flags, env)
        ranks.wait(timeout)
        return ranks

    def cleanup(self):
        for ranks in self.running:
            ranks.kill()


# ---- Reading what the ranks wrote -----------------------------------------------------------------------

def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_safetensors(path):
    """A dependency-free reader (torch only) for the dtypes the final states hold."""
    import torch
    data = read_bytes(path)
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    dtypes = {"F64": torch.float64, "F32": torch.float32, "I64": torch.int64, "U8": torch.uint8}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(data[8 + length + begin:8 + length + end])
        tensor = torch.frombuffer(raw, dtype=dtypes[entry["dtype"]]) if raw else torch.empty(0, dtype=dtypes[entry["dtype"]])
        tensors[name] = tensor.reshape(entry["shape"])
    return tensors


def read_log(path):
    """Lines of `<optimizer steps before the batch> <sample indices...>`."""
    with open(path) as f:
        return [[int(word) for word in line.split()] for line in f if line.strip()]


def global_batches(prefix, nproc, first_step=0, end_step=None):
    """Per micro-step of the optimizer steps [first_step, end_step), the global batch: every rank's sample
    indices in rank order."""
    logs = [[line for line in read_log(f"{prefix}.{rank}")
             if first_step <= line[0] and (end_step is None or line[0] < end_step)] for rank in range(nproc)]
    check(len({len(log) for log in logs}) == 1, f"{prefix}: ranks logged different numbers of batches")
    merged = []
    for lines in zip(*logs):
        check(len({line[0] for line in lines}) == 1, f"{prefix}: ranks disagree on the step: {lines}")
        merged.append([lines[0][0]] + [index for line in lines for index in line[1:]])
    return merged


def list_checkpoints(project):
    root = os.path.join(project, "checkpoints")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def latest(project):
    with open(os.path.join(project, "checkpoints", "latest")) as f:
        return f.read().strip()


def resumed_step(ranks):
    for line in ranks.output(0).splitlines():
        if line.startswith("resumed "):
            return int(line.split()[1])
    raise Failure(f"{ranks.name}: did not resume\n" + ranks.all_output())


# ---- Scenarios --------------------------------------------------------------------------------------------

TRAINING = ["--steps", "24", "--save-every", "4", "--accumulation", "2", "--total-limit", "2", "--dropout", "0.1",
            "--noise", "1e-3"]


def expect_identical_finals(reference, candidate, nproc):
    for rank in range(nproc):
        ours, theirs = read_bytes(f"{reference}.{rank}.safetensors"), read_bytes(f"{candidate}.{rank}.safetensors")
        if ours != theirs:
            import torch
            a, b = read_safetensors(f"{reference}.{rank}.safetensors"), read_safetensors(f"{candidate}.{rank}.safetensors")
            differing = [name for name in a if not torch.equal(a[name], b[name])]
            raise Failure(f"rank {rank}: the resumed run's final state differs from the uninterrupted run's in "
                          f"{differing}")


def kill_resume(driver, seed):
    rng = random.Random(seed)
    reference = driver.run("reference", 2, TRAINING + ["--project", driver.path("reference"), "--log",
                                                      driver.path("reference.log"), "--final", driver.path("reference.final")])
    steps, first_save = 24, 4
    kill_at = rng.randint(first_save + 1, steps - 2)
    victim = rng.randint(0, 1)
    print(f"kill-resume: seed {seed}: SIGKILL rank {victim} at step {kill_at}")

    project = driver.path("run")
    killed = Ranks(driver, "killed", 2, TRAINING + ["--project", project, "--log", driver.path("run1.log"),
                                                   "--step-delay-ms", "40"])
    deadline = time.monotonic() + 60
    while f"step {kill_at}\n" not in killed.output(0):
        check(time.monotonic() < deadline and all(p.poll() is None for p in killed.processes),
              "the run ended or stalled before the kill step\n" + killed.all_output())
        time.sleep(0.005)
    os.kill(killed.processes[victim].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    codes = killed.wait(TIMEOUT_S + 20, expect_success=False)
    noticed = time.monotonic() - killed_at
    survivor = 1 - victim
    check(codes[victim] == -signal.SIGKILL, f"rank {victim} was not killed: {codes}")
    check(codes[survivor] != 0, f"rank {survivor} finished although rank {victim} died\n" + killed.all_output())
    print(f"kill-resume: rank {survivor} failed {noticed:.1f} s after rank {victim} died "
          f"(timeout {TIMEOUT_S} s): {killed.output(survivor).strip().splitlines()[-1]}")

    resumed = driver.run("resumed", 2, TRAINING + ["--project", project, "--resume", "--log", driver.path("run2.log"),
                                                  "--final", driver.path("resumed.final")])
    start = resumed_step(resumed)
    check(first_save <= start <= kill_at and start % 4 == 0, f"resumed at step {start}, killed at {kill_at}")
    expect_identical_finals(driver.path("reference.final"), driver.path("resumed.final"), 2)
    before = global_batches(driver.path("run1.log"), 2, end_step=start)
    after = global_batches(driver.path("run2.log"), 2)
    check(before + after == global_batches(driver.path("reference.log"), 2),
          "the interrupted and resumed run consumed other batches than the uninterrupted run")
    check(list_checkpoints(project) == ["checkpoint_4", "checkpoint_5", "latest"],
          f"total_limit 2 across the restart: {list_checkpoints(project)}")
    print(f"kill-resume: resumed at step {start}; {len(before) + len(after)} batches and the final state "
          f"({os.path.getsize(driver.path('resumed.final.0.safetensors'))} bytes per rank) identical to the "
          f"uninterrupted run")


def kill_during_save(driver, seed):
    flags = ["--steps", "12", "--save-every", "4", "--dropout", "0.1"]
    driver.run("reference", 2, flags + ["--project", driver.path("reference"), "--final", driver.path("reference.final")])
    for point in ["model.safetensors", "random_states_1.bin", "optimizer.bin", "metadata.json", "rename", "latest"]:
        project = driver.path(point)
        killed = Ranks(driver, f"{point}.killed", 2, flags + ["--project", project],
                       env={"ACCELERATE_TEST_KILL_DURING_SAVE": f"{point}@2"})
        codes = killed.wait(TIMEOUT_S + 20, expect_success=False)
        check(-signal.SIGKILL in codes and all(codes), f"{point}: expected one rank killed, both failed: {codes}\n"
              + killed.all_output())
        found = list_checkpoints(project)
        check(latest(project) == "checkpoint_0", f"{point}: latest is {latest(project)}")
        if point == "latest":
            check("checkpoint_1" in found, f"{point}: the renamed checkpoint is missing: {found}")
        else:
            check("checkpoint_1" not in found, f"{point}: a half-written checkpoint became visible: {found}")
        leftovers = [name for name in found if name.startswith(".")]
        resumed = driver.run(f"{point}.resumed", 2, flags + ["--project", project, "--resume", "--final",
                                                              driver.path(f"{point}.final")])
        check(resumed_step(resumed) == 4, f"{point}: resumed at {resumed_step(resumed)}, not 4")
        expect_identical_finals(driver.path("reference.final"), driver.path(f"{point}.final"), 2)
        check(not [name for name in list_checkpoints(project) if name.startswith(".")],
              f"{point}: leftovers after the next save: {list_checkpoints(project)}")
        left = ("a complete checkpoint_1 that `latest` does not name yet" if point == "latest"
                else f"{leftovers} (ignored, then removed by the next save)" if leftovers else "nothing")
        print(f"kill-during-save: killed at {point!r} of the second save: latest stayed checkpoint_0, left "
              f"{left}; resumed bit-identical")


def topology(driver, seed):
    import torch
    flags = ["--float64", "--dropout", "0", "--noise", "0", "--global-batch", "12", "--dataset", "96"]
    project = driver.path("topology")
    driver.run("saved-by-2", 2, flags + ["--steps", "8", "--save-every", "8", "--project", project])
    reference = driver.run("never-stopped", 1, flags + ["--steps", "16", "--save-every", "0", "--log",
                                                        driver.path("reference.log"), "--final",
                                                        driver.path("reference.final")])
    del reference
    expected = read_safetensors(driver.path("reference.final.0.safetensors"))
    expected_batches = global_batches(driver.path("reference.log"), 1, first_step=8)
    for nproc in (1, 3):
        name = f"resumed-on-{nproc}"
        ranks = driver.run(name, nproc, flags + ["--steps", "16", "--save-every", "0", "--project", project,
                                                 "--resume", "--log", driver.path(f"{name}.log"), "--final",
                                                 driver.path(f"{name}.final")])
        check(resumed_step(ranks) == 8, f"{name}: resumed at {resumed_step(ranks)}")
        check(global_batches(driver.path(f"{name}.log"), nproc) == expected_batches,
              f"{name}: the global batches after the checkpoint differ from the run that never stopped")
        worst = 0.0
        for rank in range(nproc):
            got = read_safetensors(driver.path(f"{name}.final.{rank}.safetensors"))
            for key, want in expected.items():
                if key.startswith("model."):
                    check(torch.allclose(got[key], want, rtol=1e-9, atol=0),
                          f"{name} rank {rank}: {key} differs by {(got[key] - want).abs().max().item():.3g}")
                    worst = max(worst, ((got[key] - want).abs() / want.abs().clamp_min(1e-300)).max().item())
            check(torch.equal(got["optimizer.lr"], expected["optimizer.lr"]), f"{name}: the learning rate differs")
        report_spread(f"saved by 2 ranks, resumed on {nproc}", worst, 1e-9)
        print(f"topology: saved by 2 ranks, resumed on {nproc}: same {len(expected_batches)} global batches, "
              f"parameters within rtol {worst:.2g} of the run that never stopped")


def full_disk(driver, seed, inner):
    if not inner:
        if shutil.which("unshare") is None:
            print("SKIPPED: `unshare` (util-linux) is not installed; it gives this test a private small tmpfs")
            return SKIP
        probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {driver.work}"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            print("SKIPPED: cannot mount a private tmpfs here (unshare -rm: "
                  f"{(probe.stderr or probe.stdout).strip()}); unprivileged user namespaces are off")
            return SKIP
        command = ["unshare", "-rm", sys.executable, os.path.abspath(__file__), "full-disk", "--inner",
                   "--train", driver.train, "--work", driver.work, "--seed", str(seed)]
        return subprocess.run(command).returncode
    flags = ["--steps", "8", "--save-every", "4", "--hidden", "128"]
    # How much one checkpoint takes, in tmpfs pages.
    measured = driver.run("measure", 2, flags + ["--steps", "4", "--project", driver.path("measure"),
                                                 "--final", driver.path("reference.final")])
    del measured
    checkpoint = driver.path("measure", "checkpoints", "checkpoint_0")
    pages = sum(-(-os.path.getsize(os.path.join(checkpoint, name)) // 4096) for name in os.listdir(checkpoint))
    disk = driver.path("disk")
    os.makedirs(disk)
    size_kb = (pages + 4) * 4 * 3 // 2  # room for one checkpoint and a half
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", disk], check=True)
    try:
        full = Ranks(driver, "full", 2, flags + ["--project", disk])
        codes = full.wait(TIMEOUT_S + 30, expect_success=False)
        check(codes == [1, 1], f"expected both ranks to fail with an error, got {codes}\n" + full.all_output())
        rank0, rank1 = full.output(0), full.output(1)
        # Whichever process hit the full disk first (rank 0 writes the shared files, every rank its random
        # state), each one fails naming it: its own error, or the other's relayed.
        for rank, output in enumerate((rank0, rank1)):
            check("No space left on device" in output and "the previous checkpoints are untouched" in output,
                  f"rank {rank} does not name the full disk:\n" + output)
        check(list_checkpoints(disk) == ["checkpoint_0", "latest"], f"left behind: {list_checkpoints(disk)}")
        resumed = driver.run("after-full", 2, flags + ["--steps", "4", "--project", disk, "--resume", "--final",
                                                       driver.path("after-full.final")])
        check(resumed_step(resumed) == 4, f"resumed at {resumed_step(resumed)}")
        expect_identical_finals(driver.path("reference.final"), driver.path("after-full.final"), 2)
        print(f"full-disk: a {size_kb} KiB filesystem filled during the second save; every rank failed with "
              f"the reason and checkpoint_0 loads intact:\n  rank 0: "
              + next(line for line in rank0.splitlines() if "error" in line)
              + "\n  rank 1: " + next(line for line in rank1.splitlines() if "error" in line))
    finally:
        subprocess.run(["umount", disk])
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=["kill-resume", "kill-during-save", "topology", "full-disk"])
    parser.add_argument("--train", required=True, help="path to checkpoint_train")
    parser.add_argument("--work", required=True, help="scratch directory (emptied first)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random kill step (default: time)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    if args.inner:
        driver = Driver.__new__(Driver)
        driver.train, driver.work, driver.running = args.train, args.work, []
    else:
        driver = Driver(args)
    try:
        if args.scenario == "kill-resume":
            kill_resume(driver, seed)
        elif args.scenario == "kill-during-save":
            kill_during_save(driver, seed)
        elif args.scenario == "topology":
            topology(driver, seed)
        else:
            code = full_disk(driver, seed, args.inner)
            if code != 0 or not args.inner:
                return code
    except Failure as failure:
        print(f"FAILED ({args.scenario}, seed {seed}): {failure}")
        return 1
    finally:
        driver.cleanup()
    print(f"{args.scenario}: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
