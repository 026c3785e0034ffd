#!/usr/bin/env python3
"""Experiment tracking, logging and progress bars, read back by the tools people use.

    tracking_test.py <scenario> --train build/test/tracking/tracking_train --accel build/bin/accel --work DIR

Scenarios (each one ctest test, see CMakeLists.txt):
  tensorboard-two-processes  a 2-process run: TensorBoard's own reader (EventAccumulator, over its record reader,
                             which checks every CRC32C) returns every logged step and value, exactly as float32,
                             the texts and the run's configuration, from one event file the main process wrote.
  tensorboard-http           `tensorboard --logdir` on loopback serves those scalars on its HTTP data endpoint.
  jsonl-csv                  the JSON Lines and CSV files parse with Python's json and csv, every value exact.
  killed-run                 a 2-process run SIGKILLed mid-way leaves files the readers open up to the last record.
  full-disk                  a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) gives one warning; training goes on,
                             and the event file holds whole records only.
  custom-tracker             a tracker registered by name for every process receives every call on each process, and
                             the built-in one beside it writes on the main process only.
  bad-input                  an unknown tracker, a project directory that cannot be written, a value that is no
                             number, a log before init_trackers: a clear message each, training goes on.
  project-dir                the default ./runs, and ACCEL_PROJECT_DIR overriding it.
  logger                     get_logger: the main process only, every process with its rank, ACCELERATE_LOG_LEVEL.
  progress-terminal          in a pseudo-terminal (util-linux `script`) the bar redraws one line with a moving count;
                             a line accelerator.print writes clears it and the bar comes back under it.
  progress-pipe              through a pipe, plain lines from the main process; the other rank prints none.
Exits 77 (a ctest skip) with the reason when a scenario cannot run here.
"""
import argparse
import csv
import glob
import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

SKIP = 77


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def float32(value):
    """`value` rounded to float32, as the event files store scalars."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


class Runner:
    def __init__(self, args):
        self.train, self.accel, self.work = args.train, args.accel, args.work
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def command(self, flags, nproc):
        program = [self.train, *flags]
        if nproc == 1:
            return program
        return [self.accel, "launch", "--num_processes", str(nproc), "--main_process_port", "0", *program]

    def run(self, flags, nproc=1, env=None, timeout=120, preexec=None, cwd=None):
        """Runs to the end; returns (exit code, stdout, stderr)."""
        environment = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        for name in ("ACCEL_PROJECT_DIR", "ACCELERATE_LOG_LEVEL"):
            if name not in (env or {}):
                environment.pop(name, None)
        done = subprocess.run(self.command(flags, nproc), capture_output=True, text=True, env=environment,
                              timeout=timeout, preexec_fn=preexec, cwd=cwd or self.work, start_new_session=True)
        return done.returncode, done.stdout, done.stderr

    def run_ok(self, flags, **kwargs):
        code, out, err = self.run(flags, **kwargs)
        check(code == 0, f"tracking_train {' '.join(flags)} exited {code}:\n{out}\n{err}")
        check(re.search(r"done \d+ steps", out), f"the run did not reach its end:\n{out}\n{err}")
        return out, err


def logged(output):
    """{(step, name): value} from the main process's `logged <step> <name> <hex>` lines."""
    values = {}
    for match in re.finditer(r"^(?:\[rank(\d+)\]: )?logged (\d+) (\S+) (\S+)$", output, re.M):
        check(match.group(1) in (None, "0"), f"a process other than the main one logged: {match.group(0)}")
        values[(int(match.group(2)), match.group(3))] = float.fromhex(match.group(4))
    check(values, f"the run printed no logged values:\n{output}")
    return values


def steps_of(values):
    return sorted({step for step, _ in values})


def event_files(directory):
    return sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))


def read_records(path):
    """Every record of an event file through TensorBoard's record reader, which checks each CRC32C; fails on a
    bad checksum or a torn record."""
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    from tensorboard.compat.proto import event_pb2

    reader = pywrap_tensorflow.PyRecordReader_New(path)
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return events
        except errors.DataLossError as error:
            raise Failure(f"{path}: TensorBoard's reader found a damaged record: {error}")
        events.append(event_pb2.Event.FromString(reader.record()))


def accumulate(directory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(directory, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def texts(accumulator, tag):
    from tensorboard.util import tensor_util

    return {event.step: tensor_util.make_ndarray(event.tensor_proto).tolist()[0].decode()
            for event in accumulator.Tensors(tag)}


def note(step):
    return f'step {step}, "quoted" | piped'


def check_scalars(accumulator, values, names=("loss", "lr", "step_number")):
    for name in names:
        expected = {step: float32(value) for (step, key), value in values.items() if key == name}
        read = {event.step: event.value for event in accumulator.Scalars(name)}
        check(read == expected, f"TensorBoard's reader returned {name} {read}, the run logged {expected}")


# ---------------------------------------------------------------------------------------------- scenarios

def two_process_run(runner, trackers, flags=()):
    out, err = runner.run_ok(["--log-with", trackers, "--project-dir", "runs", "--project", "twoproc",
                              "--dataset", "64", "--batch", "4", *flags], nproc=2)
    values = logged(out)
    check(steps_of(values) == list(range(8)), f"expected steps 0..7 (64 samples, 2 x 4 per step): {steps_of(values)}")
    return os.path.join(runner.work, "runs", "twoproc"), values, out + err


def tensorboard_two_processes(runner):
    run_dir, values, _ = two_process_run(runner, "tensorboard")
    files = event_files(run_dir)
    check(len(files) == 1, f"expected one event file (the main process's) in {run_dir}: {os.listdir(run_dir)}")
    check(sorted(os.listdir(run_dir)) == [os.path.basename(files[0])],
          f"the run directory holds other files: {os.listdir(run_dir)}")
    events = read_records(files[0])
    check(events[0].file_version == "brain.Event:2", f"the first record is not the file version: {events[0]}")
    check(len(events) == 2 + 8, f"expected the version, the configuration and 8 steps: {len(events)} records")
    accumulator = accumulate(run_dir)
    check_scalars(accumulator, values)
    expected_notes = {step: note(step) for step in range(0, 8, 3)}
    check(texts(accumulator, "note") == expected_notes,
          f"texts read back {texts(accumulator, 'note')}, logged {expected_notes}")
    config = texts(accumulator, "config")[0]
    for row in ("| lr | 0.05 |", "| batch_size | 4 |", "| processes | 2 |", "| optimizer | SGD |"):
        check(row in config, f"the configuration text lacks {row!r}:\n{config}")


def tensorboard_http(runner):
    run_dir, values, _ = two_process_run(runner, "tensorboard")
    logdir = os.path.dirname(run_dir)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
                               "--port", str(port), "--load_fast", "false", "--reload_interval", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        query = urllib.parse.urlencode({"run": "twoproc", "tag": "loss"})
        url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}"
        expected = [(step, float32(value)) for (step, name), value in sorted(values.items()) if name == "loss"]
        deadline, served, last_error = time.time() + 90, None, ""
        while time.time() < deadline:
            if server.poll() is not None:
                raise Failure(f"tensorboard exited {server.returncode}:\n{server.stdout.read()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    served = [(step, value) for _, step, value in json.load(response)]
                if len(served) == len(expected):
                    break
            except (OSError, ValueError) as error:
                last_error = str(error)
            time.sleep(0.5)
        check(served == expected, f"tensorboard served {served} ({last_error}); the run logged {expected}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def jsonl_csv(runner):
    run_dir, values, _ = two_process_run(runner, "jsonl,csv")
    check(sorted(os.listdir(run_dir)) == ["config.csv", "metrics.csv", "metrics.jsonl"],
          f"unexpected files in {run_dir}: {os.listdir(run_dir)}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as lines:
        records = [json.loads(line) for line in lines]
    check(records[0]["config"] == {"lr": 0.05, "batch_size": 4, "processes": 2, "optimizer": "SGD"},
          f"the JSONL configuration record is {records[0]}")
    read = {}
    for record in records[1:]:
        for name, value in record["values"].items():
            read[(record["step"], name)] = value
    expected = {**values, **{(step, "note"): note(step) for step in range(0, 8, 3)}}
    check(read == expected, f"JSONL holds {read}, the run logged {expected}")
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as rows:
        table = list(csv.DictReader(rows))
    read = {(int(row["step"]), row["name"]): row["value"] if row["name"] == "note" else float(row["value"])
            for row in table}
    check(read == expected, f"CSV holds {read}, the run logged {expected}")
    with open(os.path.join(run_dir, "config.csv"), newline="") as rows:
        config = {row["name"]: row["value"] for row in csv.DictReader(rows)}
    check(config == {"lr": "0.05", "batch_size": "4", "processes": "2", "optimizer": "SGD"},
          f"config.csv holds {config}")


def custom_tracker(runner):
    run_dir, values, _ = two_process_run(runner, "every_process,jsonl", ["--every-process-tracker"])
    check(sorted(os.listdir(run_dir)) == ["calls.0.txt", "calls.1.txt", "metrics.jsonl"],
          f"expected each process's calls and the main process's metrics.jsonl: {os.listdir(run_dir)}")
    for rank in (0, 1):
        with open(os.path.join(run_dir, f"calls.{rank}.txt")) as calls:
            lines = calls.read().splitlines()
        check(lines[0] == "config lr=0x1.999999999999ap-5 batch_size=0x1p+2 processes=0x1p+1 optimizer=text",
              f"process {rank}'s tracker got the configuration {lines[0]!r}")
        check(lines[-1] == "finish", f"process {rank}'s tracker was not finished: {lines[-1]!r}")
        logs = lines[1:-1]
        check(len(logs) == 8, f"process {rank}'s tracker got {len(logs)} log calls, not 8:\n{lines}")
        for step, line in enumerate(logs):
            fields = dict(field.split("=") for field in line.split()[2:])
            check(line.split()[:2] == ["log", str(step)], f"process {rank}, call {step}: {line!r}")
            for name in ("loss", "lr", "step_number"):
                check(float.fromhex(fields[name]) == values[(step, name)],
                      f"process {rank}, step {step}: {name}={fields[name]}, the run logged {values[(step, name)]}")
            check(("note" in fields) == (step % 3 == 0), f"process {rank}, step {step}: {line!r}")


def killed_run(runner):
    run_dir = os.path.join(runner.work, "runs", "killed")
    command = runner.command(["--log-with", "tensorboard,jsonl,csv", "--project-dir", "runs", "--project", "killed",
                              "--dataset", "800", "--batch", "4", "--step-delay-ms", "50"], nproc=2)
    process = subprocess.Popen(command, cwd=runner.work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    jsonl = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline and process.poll() is None:
        if os.path.exists(jsonl) and open(jsonl).read().count("\n") >= 6:
            break
        time.sleep(0.05)
    check(process.poll() is None, f"the run ended (exit {process.returncode}) before it could be killed")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    files = event_files(run_dir)
    check(len(files) == 1, f"expected one event file in {run_dir}: {os.listdir(run_dir)}")
    steps = [event.step for event in read_records(files[0]) if event.summary.value and
             event.summary.value[0].tag == "loss"]
    check(len(steps) >= 5 and steps == list(range(len(steps))),
          f"the killed run's event file holds the steps {steps}: expected 0, 1, 2, ... up to the kill")
    check(len(steps) < 100, f"the run was not killed mid-way: {len(steps)} of 100 steps")
    accumulated = [event.step for event in accumulate(run_dir).Scalars("loss")]
    check(accumulated == steps, f"EventAccumulator read the steps {accumulated}, the record reader {steps}")
    with open(jsonl) as lines:
        text = lines.read()
    check(text.endswith("\n"), "metrics.jsonl ends inside a record")
    json_steps = [json.loads(line)["step"] for line in text.splitlines()[1:]]
    check(json_steps == list(range(len(json_steps))), f"metrics.jsonl holds the steps {json_steps}")
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as rows:
        text = rows.read()
    check(text.endswith("\n"), "metrics.csv ends inside a record")
    csv_steps = sorted({int(row["step"]) for row in csv.DictReader(text.splitlines())})
    check(csv_steps == list(range(len(csv_steps))), f"metrics.csv holds the steps {csv_steps}")


def full_disk(runner):
    limit = 3000

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the first write past the limit kills the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out, err = runner.run_ok(["--log-with", "tensorboard", "--project-dir", "runs", "--project", "full",
                              "--dataset", "256", "--batch", "4", "--text-every", "0"], preexec=limited)
    check(steps_of(logged(out)) == list(range(64)), "training did not go on to its 64 steps after the disk filled")
    warnings = re.findall(r"^WARNING accelerate\.tracking: .*$", err, re.M)
    check(len(warnings) == 1, f"expected one warning, got {len(warnings)}:\n{err}")
    check("'tensorboard' tracker failed" in warnings[0] and "exceeds the size" in warnings[0] and
          "training goes on" in warnings[0], f"the warning does not say what failed and why: {warnings[0]}")
    files = event_files(os.path.join(runner.work, "runs", "full"))
    size = os.path.getsize(files[0])
    check(size <= limit, f"the event file ({size} bytes) is larger than the limit {limit}")
    steps = [event.step for event in read_records(files[0]) if event.summary.value and
             event.summary.value[0].tag == "loss"]
    check(0 < len(steps) < 64 and steps == list(range(len(steps))),
          f"the event file holds the steps {steps}: expected whole records 0, 1, 2, ... up to the limit")


def bad_input(runner):
    # A tracker nobody registered: named, with the known ones; the others still log.
    out, err = runner.run_ok(["--log-with", "tensorbord,jsonl", "--project-dir", "runs", "--project", "unknown"])
    check(re.search(r"log_with names 'tensorbord', but no tracker is registered by that name; the known ones are "
                    r"'csv', 'jsonl', 'mlflow', 'tensorboard'", err), f"no clear message for an unknown tracker:\n{err}")
    check(os.path.exists(os.path.join(runner.work, "runs", "unknown", "metrics.jsonl")), "jsonl did not log")
    # A project directory that cannot be written (a regular file stands where a directory must go).
    blocker = os.path.join(runner.work, "a_file")
    open(blocker, "w").close()
    out, err = runner.run_ok(["--log-with", "tensorboard", "--project-dir", blocker + "/runs"])
    check(re.search(r"the 'tensorboard' tracker could not start in '" + re.escape(blocker + "/runs/run") +
                    r"': creating directory '" + re.escape(blocker) +
                    r"' failed: Not a directory.*ACCEL_PROJECT_DIR.*training goes on", err),
          f"no clear message naming the directory that cannot be written:\n{err}")
    # A value that is not a number: reported once, left out; the others logged.
    out, err = runner.run_ok(["--log-with", "tensorboard", "--project-dir", "runs", "--project", "nan",
                              "--bad-value"])
    reports = re.findall(r"the value 'not_a_number' is a tensor of shape \[2, 3\] \(6 elements\), not a number", err)
    check(len(reports) == 1, f"expected one report of the value that is no number, got {len(reports)}:\n{err}")
    accumulator = accumulate(os.path.join(runner.work, "runs", "nan"))
    check_scalars(accumulator, logged(out))
    check("not_a_number" not in accumulator.Tags()["scalars"] + accumulator.Tags()["tensors"],
          "the value that is no number reached the event file")
    # log before init_trackers: one message; the file holds only what was logged after.
    out, err = runner.run_ok(["--log-with", "tensorboard", "--project-dir", "runs", "--project", "early",
                              "--log-before-init"])
    check(err.count("was called before accelerator.init_trackers") == 1, f"expected one message:\n{err}")
    run_dir = os.path.join(runner.work, "runs", "early")
    check_scalars(accumulate(run_dir), logged(out))
    check(len(read_records(event_files(run_dir)[0])) == 2 + 16, "the event file holds more than the 16 steps")


def project_dir(runner):
    runner.run_ok(["--log-with", "jsonl", "--project", "default"])
    check(os.path.exists(os.path.join(runner.work, "runs", "default", "metrics.jsonl")),
          "without project_dir the trackers did not write under ./runs")
    elsewhere = os.path.join(runner.work, "elsewhere")
    runner.run_ok(["--log-with", "jsonl", "--project", "env"], env={"ACCEL_PROJECT_DIR": elsewhere})
    check(os.path.exists(os.path.join(elsewhere, "env", "metrics.jsonl")),
          "ACCEL_PROJECT_DIR did not move the trackers' directory")
    check(not os.path.exists(os.path.join(runner.work, "runs", "env")), "ACCEL_PROJECT_DIR was not used")


def logger(runner):
    out, err = runner.run_ok(["--logger"], nproc=2)
    lines = err.splitlines()
    check("[rank0]: INFO tracking_train: an info line from the main process" in lines,
          f"the main process's info line is missing:\n{err}")
    check(not any(line.startswith("[rank1]:") and "main process" in line for line in lines),
          f"process 1 printed a main-process-only line:\n{err}")
    for rank in (0, 1):
        check(f"[rank{rank}]: [rank {rank}] INFO tracking_train: an info line from process {rank}" in lines,
              f"process {rank}'s every-process line (with its rank) is missing:\n{err}")
    check("debug line" not in err, f"a debug line printed at the default level (INFO):\n{err}")
    # One process: the every-process line (the last INFO) has no rank in front.
    levels = {"debug": ["DEBUG", "INFO", "WARNING", "INFO"], "WARNING": ["WARNING"], "error": []}
    for variable, shown in levels.items():
        _, err = runner.run_ok(["--logger"], env={"ACCELERATE_LOG_LEVEL": variable})
        printed = re.findall(r"^(DEBUG|INFO|WARNING) tracking_train: a", err, re.M)
        check(printed == shown, f"ACCELERATE_LOG_LEVEL={variable} printed {printed}, expected {shown}:\n{err}")
    _, err = runner.run_ok(["--logger"], env={"ACCELERATE_LOG_LEVEL": "verbose"})
    check("ACCELERATE_LOG_LEVEL='verbose' is not a level; use DEBUG, INFO, WARNING, ERROR or CRITICAL" in err,
          f"no clear message for a bad ACCELERATE_LOG_LEVEL:\n{err}")


def progress_terminal(runner):
    if shutil.which("script") is None:
        print("SKIPPED: util-linux `script` is not installed")
        return SKIP
    command = " ".join([runner.train, "--progress", "--log-with", "jsonl", "--dataset", "160", "--batch", "4",
                        "--step-delay-ms", "40", "--print-every", "5"])
    typescript = os.path.join(runner.work, "typescript")
    done = subprocess.run(["script", "-q", "-e", "-c", command, typescript], cwd=runner.work, capture_output=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(done.returncode == 0, f"script exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    with open(typescript, "rb") as recorded:
        screen = recorded.read().decode(errors="replace")
    states = [state for state in screen.split("\r") if "epoch 0:" in state]
    counts = [int(match.group(1)) for match in (re.search(r"\| (\d+)/40 \[", state) for state in states) if match]
    check(len(set(counts)) >= 4 and counts == sorted(counts) and counts[-1] == 40,
          f"the bar did not redraw a moving count up to 40/40 in place: {counts}\n{screen!r}")
    check(re.search(r"100%\|#{20}\| 40/40 \[\d\d:\d\d<00:00, [\d.]+it/s, loss=[\d.e-]+\]", screen),
          f"the last state lacks the rate, the times or the loss:\n{screen!r}")
    # A line accelerator.print writes clears the bar's line first, and the bar comes back under it (tqdm's write).
    printed = re.findall(r"\r\x1b\[Kprinted step (\d+)\r\n\repoch 0:", screen)
    check(printed == [str(step) for step in range(0, 40, 5)],
          f"accelerator.print did not clear the bar's line and draw the bar again under it: {printed}\n{screen!r}")


def progress_pipe(runner):
    out, _ = runner.run_ok(["--progress", "--log-with", "jsonl", "--dataset", "320", "--batch", "4"], nproc=2)
    bar_lines = [line for line in out.splitlines() if "epoch 0:" in line]
    check(bar_lines and all(line.startswith("[rank0]: ") for line in bar_lines),
          f"a process other than the local main one printed a progress line:\n{out}")
    check(not any("\r" in line or "\033" in line for line in bar_lines), f"a pipe got terminal controls:\n{out}")
    counts = [int(re.search(r" (\d+)/40 \[", line).group(1)) for line in bar_lines]
    check(counts == [4 * k for k in range(1, 11)], f"expected a plain line at every tenth: {counts}\n{out}")
    check(re.search(r"epoch 0: 100% 40/40 \[\d\d:\d\d<00:00, [\d.]+it/s, loss=[\d.e-]+\]$", bar_lines[-1]),
          f"the last line lacks the rate, the times or the loss: {bar_lines[-1]}")
    # A bar over a step count, updated by hand: one process, its output a pipe.
    out, _ = runner.run_ok(["--bar-steps", "16", "--log-with", "jsonl", "--dataset", "64", "--batch", "4"])
    counts = [int(count) for count in re.findall(r"^steps: +\d+% (\d+)/16 \[", out, re.M)]
    check(counts == [2, 4, 5, 7, 8, 10, 12, 13, 15, 16], f"expected a line at every tenth of 16 steps: {counts}\n{out}")


SCENARIOS = {
    "tensorboard-two-processes": tensorboard_two_processes,
    "tensorboard-http": tensorboard_http,
    "jsonl-csv": jsonl_csv,
    "custom-tracker": custom_tracker,
    "killed-run": killed_run,
    "full-disk": full_disk,
    "bad-input": bad_input,
    "project-dir": project_dir,
    "logger": logger,
    "progress-terminal": progress_terminal,
    "progress-pipe": progress_pipe,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--train", required=True)
    parser.add_argument("--accel", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print("SKIPPED: the Python package tensorboard is not installed (scripts/bootstrap.sh --torch installs it)")
        return SKIP
    try:
        result = SCENARIOS[args.scenario](Runner(args))
    except Failure as failure:
        print(f"FAILED: {args.scenario}: {failure}")
        return 1
    if result == SKIP:
        return SKIP
    print(f"PASSED: {args.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
