#!/usr/bin/env python3
"""A rewritten program resumes from its checkpoint after a restart: resume_test.py --accel A --train T
--train-always R --train-logged L TestName (one ctest test each, resume.<TestName>).

T is test/resume/resume_train.cpp built by accelerate_target() (the rewrite saves a checkpoint every other step
and loads it before the epoch loop on a launcher's restart), R the same source built with RESUME (it loads the
checkpoint on any start that finds one), L the same source built with LOG_WITH jsonl and PROGRESS_BAR. CRASH_AT_STEP=n stops process 1 before step n on the first start. The
oracle: every run ends with the parameter sums of an uninterrupted run, printed to 17 digits in float64
(bit-identical runs print identical lines), and prints how many steps it trained itself (15 uninterrupted;
fewer when it resumed). Each test runs in a temporary directory (the checkpoint goes to ./checkpoint), ends
within HARD_TIMEOUT_S and kills whatever it started. Exit 77 = skipped, with the reason.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HARD_TIMEOUT_S = 110  # below ctest's TIMEOUT 120
RUN_TIMEOUT_S = 60
SKIP = 77
STEPS = 15  # 3 epochs of 5 global batches (40 samples, 4 per process on 2 processes)

ACCEL = TRAIN = TRAIN_ALWAYS = TRAIN_LOGGED = ""
TOKEN_VARIABLE = "ACCEL_RESUME_TEST_TOKEN"
TOKEN = f"{os.getpid()}-{time.time_ns()}"
PARAMETER = re.compile(r"parameter (\S+) sum (\S+)")
TRAINED = re.compile(r"trained (\d+) steps, step counter (\d+)")
NO_CHECKPOINT_NOTE = "holds no checkpoint yet (the job failed before its first save_state): training starts"


class Skip(Exception):
    pass


def check(condition, message, output=None):
    if not condition:
        raise AssertionError(message + (f"\n--- output ---\n{output}--- end ---" if output is not None else ""))


# The test program's scratch folders (HF_HOME, working folders), in one folder removed when it ends.
SCRATCH = tempfile.TemporaryDirectory(prefix="accel-resume-")


def environment(**overrides):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATE_", "FSDP_", "OMPI_", "PMIX_", "SLURM_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "CRASH_AT_STEP")}
    env.update(OMP_NUM_THREADS="1", HF_HOME=tempfile.mkdtemp(dir=SCRATCH.name))
    env[TOKEN_VARIABLE] = TOKEN
    env.update({k: v for k, v in overrides.items() if v is not None})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run(command, cwd, **env):
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", env=environment(**env), timeout=RUN_TIMEOUT_S)
    return done.returncode, done.stdout


def accel(program, cwd, *arguments, restarts=None, crash_at=None):
    command = [ACCEL, "launch", "--cpu", "--num_processes", "2", "--main_process_port", free_port()]
    if restarts is not None:
        command += ["--max_restarts", str(restarts)]
    return run(command + [program, *arguments], cwd, CRASH_AT_STEP=crash_at and str(crash_at))


def result(output):
    """(parameter sums, steps this run trained), each printed once, by the main process only."""
    sums = PARAMETER.findall(output)
    check(len(sums) == 4, "expected the 4 parameter sums once, from the main process only", output)
    trained = TRAINED.findall(output)
    check(len(trained) == 1, "expected one `trained N steps, step counter M` line", output)
    # The loop's own step counter is registered by the rewrite: a resumed run's goes on from the checkpoint,
    # so every run ends with it at STEPS, however many steps this start trained.
    check(int(trained[0][1]) == STEPS, f"the loop's step counter must end at {STEPS}", output)
    return sums, int(trained[0][0])


def workdir():
    return tempfile.mkdtemp(dir=SCRATCH.name)


def reference():
    """An uninterrupted 2-process run: the parameters every resumed run must end with."""
    code, output = accel(TRAIN, workdir())
    check(code == 0, f"the uninterrupted run must exit 0 (got {code})", output)
    sums, trained = result(output)
    check(trained == STEPS, f"the uninterrupted run must train {STEPS} steps", output)
    return sums


def kill_leftovers():
    marker = f"{TOKEN_VARIABLE}={TOKEN}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    if marker in environ.read():
                        os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


# ------------------------------------------------------------------------------------------------ tests

def RestartResumesFromTheLastCheckpoint():
    """accel launch --max_restarts 1: process 1 stops before step 7 (checkpoint of step 6: mid-epoch) or step 11
    (checkpoint of step 10: the last batch of epoch 2, so the resumed epoch loop starts on an epoch whose
    batches are all consumed); the restarted job loads it and trains the rest, ending where an uninterrupted run
    does. Before step 1 there is no checkpoint yet: the restart starts over, with a note."""
    expected = reference()
    for crash_at, resumed_from in ((7, 6), (11, 10), (1, 0)):
        code, output = accel(TRAIN, workdir(), restarts=1, crash_at=crash_at)
        check(code == 0, f"a crash before step {crash_at} with --max_restarts 1 must end in success (got {code})",
              output)
        check("restart 1 of --max_restarts 1" in output, "accel must say it restarted", output)
        sums, trained = result(output)
        check(trained == STEPS - resumed_from,
              f"the restarted job must train the {STEPS - resumed_from} steps after the checkpoint of step "
              f"{resumed_from}", output)
        check(sums == expected, f"after a crash before step {crash_at}, the resumed run must end with the "
                                f"uninterrupted run's parameters", output)
        notes = output.count(NO_CHECKPOINT_NOTE)
        check(notes == (1 if resumed_from == 0 else 0),
              "a restart without a checkpoint must say so once (main process), one with a checkpoint never",
              output)
        print(f"crash before step {crash_at}: resumed from step {resumed_from}, trained {trained}, identical")


def TorchrunRestartResumes():
    """The same program under torchrun's elastic agent (--max-restarts 1) resumes too."""
    probe = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"], capture_output=True,
                           timeout=60)
    if probe.returncode != 0:
        raise Skip(f"torchrun does not run with {sys.executable}")
    expected = reference()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
               "--master-port", free_port(), "--no-python", TRAIN]
    code, output = run(command, workdir(), CRASH_AT_STEP="7")
    check(code == 0, f"torchrun --max-restarts 1 must end in success after one crash (got {code})", output)
    sums, trained = result(output)
    check(trained == STEPS - 6, f"the restarted job must train the {STEPS - 6} steps after step 6", output)
    check(sums == expected, "under torchrun, the resumed run must end with the uninterrupted run's parameters",
          output)


def ResumeLoadsTheCheckpointOnAFirstStart():
    """RESUME (accel-rewrite --resume): a job that failed before step 7 without restarts, started again by
    hand, continues from step 6; the program built without it starts over on a first start."""
    expected = reference()
    for program, resumed_from in ((TRAIN_ALWAYS, 6), (TRAIN, 0)):
        directory = workdir()
        code, output = accel(program, directory, crash_at=7)
        check(code == 3, f"the run stopped before step 7 must fail with its exit code 3 (got {code})", output)
        check(os.path.exists(os.path.join(directory, "checkpoint", "metadata.json")),
              "the failed run must leave the checkpoint of step 6", output)
        code, output = accel(program, directory)
        check(code == 0, f"the second start must exit 0 (got {code})", output)
        sums, trained = result(output)
        check(trained == STEPS - resumed_from,
              f"{os.path.basename(program)}: the second start must train {STEPS - resumed_from} steps", output)
        check(sums == expected, "the second start must end with the uninterrupted run's parameters", output)
        check(NO_CHECKPOINT_NOTE not in output, "a first start is no restart: no note", output)


def CheckpointOfAnotherModelIsRefused():
    """A checkpoint directory that holds another model's checkpoint (a hidden layer of 6, not 8): the load
    stops every process with the mismatch named, and the checkpoint stays as it was."""
    directory = workdir()
    code, output = accel(TRAIN_ALWAYS, directory, "6")
    check(code == 0, f"the run of the other model must exit 0 (got {code})", output)
    checkpoint = os.path.join(directory, "checkpoint")
    before = {name: open(os.path.join(checkpoint, name), "rb").read() for name in sorted(os.listdir(checkpoint))}
    start = time.monotonic()
    code, output = accel(TRAIN_ALWAYS, directory)
    took = time.monotonic() - start
    check(code != 0, "loading another model's checkpoint must fail", output)
    check("holds another model than prepared model 0" in output and "different shapes" in output
          and "hidden.weight" in output, "the error must name the mismatch", output)
    check(took < 30, f"every process must stop within 30 s (took {took:.1f} s)", output)
    after = {name: open(os.path.join(checkpoint, name), "rb").read() for name in sorted(os.listdir(checkpoint))}
    check(before == after, "the checkpoint must be left as it was", output)
    check(TRAINED.search(output) is None, "nothing may train after the refused load", output)


def AFolderThatIsNoCheckpointStopsTheRunNamingIt():
    """RESUME: a checkpoint folder that holds files but no metadata.json (another program's, or a damaged
    checkpoint) stops the run with the folder named, instead of a fresh start that would later fail to save;
    the folder is left as it was. An empty folder holds nothing yet: the run starts from the beginning."""
    directory = workdir()
    checkpoint = os.path.join(directory, "checkpoint")
    os.makedirs(checkpoint)
    with open(os.path.join(checkpoint, "notes.txt"), "w") as file:
        file.write("not a checkpoint\n")
    code, output = accel(TRAIN_ALWAYS, directory)
    check(code != 0, "a folder that is no checkpoint must stop the run", output)
    check("'checkpoint' holds 1 entries but no metadata.json, so it is not a complete checkpoint" in output,
          "the error must name the folder and what is missing", output)
    check("terminate called" not in output, "the error must not escape as `terminate called ...`", output)
    check(TRAINED.search(output) is None, "nothing may train", output)
    check(sorted(os.listdir(checkpoint)) == ["notes.txt"], "the folder must be left as it was", output)
    os.remove(os.path.join(checkpoint, "notes.txt"))
    code, output = accel(TRAIN_ALWAYS, directory)
    check(code == 0, f"an empty checkpoint folder is no checkpoint yet: the run must train (exit {code})", output)
    check(result(output)[1] == STEPS, f"the run must train all {STEPS} steps from the beginning", output)


def RestartCountThatIsNotANumberIsRefused():
    """TORCHELASTIC_RESTART_COUNT set by hand to something that is no count: one process (no launcher) stops with
    the variable named, the runtime's one-line report instead of `terminate called after throwing`."""
    directory = workdir()
    code, output = run([TRAIN], directory, TORCHELASTIC_RESTART_COUNT="once")
    check(code != 0, "a restart count that is not a number must stop the program", output)
    check("TORCHELASTIC_RESTART_COUNT is 'once', not a restart count" in output, "the error must name the variable",
          output)
    check("terminate called" not in output, "the error must not escape as `terminate called ...`", output)
    check(not os.path.exists(os.path.join(directory, "checkpoint")), "nothing may train or save", output)


def TrackerStepsAndProgressBarContinueAfterARestart():
    """LOG_WITH jsonl and PROGRESS_BAR, process 1 stopped before step 8 (checkpoint of step 6, step 7 already
    logged): the restarted run logs from step 7 on at the step the restored counter gives, and drops the first
    attempt's step 7, so metrics.jsonl holds steps 1..15, each once, in order. Its progress bar over the loader
    of epoch 1 (5 batches a process; the checkpoint had consumed 1) goes on from there: the restarted run's
    plain lines for epoch 1 show 2/5 to 5/5, not 1/5 to 4/5."""
    directory = workdir()
    code, output = accel(TRAIN_LOGGED, directory, restarts=1, crash_at=8)
    check(code == 0, f"one crash with --max_restarts 1 must end in success (got {code})", output)
    sums, trained = result(output)
    check(trained == STEPS - 6, f"the restarted job must train the {STEPS - 6} steps after step 6", output)
    path = os.path.join(directory, "runs", "resume_train_logged", "metrics.jsonl")
    check(os.path.exists(path), f"the jsonl tracker must write {path}", output)
    with open(path) as lines:
        steps = [json.loads(line)["step"] for line in lines if '"step"' in line]
    check(steps == list(range(1, STEPS + 1)), f"metrics.jsonl must hold steps 1..{STEPS} once each, got {steps}",
          output)
    print(f"metrics.jsonl after a restart from step 6: steps {steps[0]}..{steps[-1]}, each once")
    marker = "restart 1 of --max_restarts 1"
    check(marker in output, "accel must say it restarted", output)
    restarted = output[output.index(marker):]
    bars = {epoch: [int(count) for count in re.findall(rf"^\[rank0\]: epoch {epoch}: +\d+% (\d+)/5 \[", restarted,
                                                       re.M)]
            for epoch in (0, 1, 2)}
    check(bars == {0: [], 1: [2, 3, 4, 5], 2: [1, 2, 3, 4, 5]},
          f"after the restart, the bar of epoch 1 must go on from the checkpoint's batch (2/5 to 5/5) and the bar "
          f"of epoch 2 start at 1/5; got {bars}", output)
    print(f"progress bar after a restart from step 6: epoch 1 at {bars[1]}, epoch 2 at {bars[2]}")


TESTS = {test.__name__: test for test in (RestartResumesFromTheLastCheckpoint, TorchrunRestartResumes,
                                          ResumeLoadsTheCheckpointOnAFirstStart, CheckpointOfAnotherModelIsRefused,
                                          RestartCountThatIsNotANumberIsRefused,
                                          AFolderThatIsNoCheckpointStopsTheRunNamingIt,
                                          TrackerStepsAndProgressBarContinueAfterARestart)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the test names, one a line, and exit")
    parser.add_argument("--accel")
    parser.add_argument("--train")
    parser.add_argument("--train-always")
    parser.add_argument("--train-logged")
    parser.add_argument("test", nargs="?", choices=sorted(TESTS))
    args = parser.parse_args()
    if args.list:
        print("\n".join(TESTS))
        return 0
    if not (args.accel and args.train and args.train_always and args.train_logged and args.test):
        parser.error("give --accel, --train, --train-always, --train-logged and a test name (or --list)")
    global ACCEL, TRAIN, TRAIN_ALWAYS, TRAIN_LOGGED
    ACCEL, TRAIN, TRAIN_ALWAYS, TRAIN_LOGGED = (
        os.path.abspath(p) for p in (args.accel, args.train, args.train_always, args.train_logged))

    def give_up(signum, frame):
        kill_leftovers()
        sys.exit(f"FAIL {args.test}: no result after {HARD_TIMEOUT_S} s (a hang)")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(HARD_TIMEOUT_S)
    try:
        TESTS[args.test]()
    except Skip as reason:
        print(f"SKIP {args.test}: {reason}")
        return SKIP
    except (AssertionError, subprocess.TimeoutExpired) as failure:
        print(f"FAIL {args.test}: {failure}")
        return 1
    finally:
        kill_leftovers()
    print(f"PASS {args.test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
