#!/usr/bin/env python3
"""The profiler (`accelerator.profile`), read back as Chrome traces with Python's json.

    profile_test.py <scenario> --train build/test/tracking/profile_train --accel build/bin/accel --work DIR

Scenarios (each one ctest test, see CMakeLists.txt):
  two-processes  a 2-process run under a schedule (wait 1, warmup 1, active 3): each process writes
                 <dir>/profile_<process_index>.json, which parses as JSON and holds exactly the three active steps
                 (ProfilerStep#2..#4, PyTorch's markers), the CPU operators of the step (aten::addmm, the
                 backward's), the input shapes asked for, and no memory events (profile_memory off).
  memory         with profile_memory, each of the 2 processes' traces holds `[memory]` instant events.
  settings       ACCEL_PROFILE_DIR and ACCEL_PROFILE_SCHEDULE stand in for what ProfileKwargs leaves unset; with
                 repeat, on_trace_ready sees each cycle and the file written at the end holds the last one
                 (Accelerate's export after PyTorch's cycles); without a schedule every step is recorded and no
                 step is marked; an empty output_trace_dir writes no file.
  rewritten      a plain loop built by accelerate_target(... PROFILE) (plain_loop.cpp), run on 2 processes with
                 ACCEL_PROFILE_SCHEDULE and ACCEL_PROFILE_DIR: each process's trace holds the schedule's active steps.
  bad-settings   a schedule that is not one (from the variable: at construction; from ProfileKwargs), an unknown
                 activity, a trace directory that cannot be made: each refused with the bad value and the fix; a
                 schedule that never records warns and writes nothing.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


class Runner:
    def __init__(self, args):
        self.train, self.accel, self.work = args.train, args.accel, args.work
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def run(self, flags, nproc=1, env=None):
        """Runs to the end; returns (exit code, stdout, stderr)."""
        environment = dict(os.environ, OMP_NUM_THREADS="1")
        for name in ("ACCEL_PROFILE_DIR", "ACCEL_PROFILE_SCHEDULE"):
            environment.pop(name, None)
        environment.update(env or {})
        program = [self.train, *flags]
        if nproc > 1:
            program = [self.accel, "launch", "--num_processes", str(nproc), "--main_process_port", "0", *program]
        done = subprocess.run(program, capture_output=True, text=True, env=environment, timeout=120, cwd=self.work,
                              start_new_session=True)
        return done.returncode, done.stdout, done.stderr

    def run_ok(self, flags, **kwargs):
        code, out, err = self.run(flags, **kwargs)
        check(code == 0, f"profile_train {' '.join(flags)} exited {code}:\n{out}\n{err}")
        return out, err


def events(path):
    """The trace's events; fails unless the file parses as JSON with a traceEvents list."""
    check(os.path.isfile(path), f"no trace at {path}")
    with open(path) as file:
        try:
            trace = json.load(file)
        except json.JSONDecodeError as error:
            raise Failure(f"{path} is not JSON: {error}")
    check(isinstance(trace.get("traceEvents"), list), f"{path} has no traceEvents list")
    return trace["traceEvents"]


def step_markers(trace_events):
    """The step numbers of the ProfilerStep#<n> ranges, sorted."""
    return sorted(int(event["name"].split("#")[1]) for event in trace_events
                  if event.get("ph") == "X" and str(event.get("name", "")).startswith("ProfilerStep#"))


def cpu_ops(trace_events):
    return {event["name"] for event in trace_events if event.get("cat") == "cpu_op"}


def memory_events(trace_events):
    return [event for event in trace_events if event.get("name") == "[memory]" and event.get("ph") == "i"]


def check_step_trace(path, expected_steps):
    trace_events = events(path)
    check(step_markers(trace_events) == expected_steps,
          f"{path}: expected the steps {expected_steps} marked, found {step_markers(trace_events)}")
    ops = cpu_ops(trace_events)
    check("aten::addmm" in ops and any("Backward" in op for op in ops) and "aten::mse_loss" in ops,
          f"{path}: the step's CPU operators (aten::addmm, aten::mse_loss, the backward's) are missing: "
          f"{sorted(ops)[:40]}")
    return trace_events


def two_processes(runner):
    out, _ = runner.run_ok(["--schedule", "1,1,3,1", "--steps", "8", "--trace-dir", "traces", "--shapes"], nproc=2)
    check(re.search(r"trace traces/profile_0\.json", out), f"the main process did not say where it wrote:\n{out}")
    names = sorted(os.listdir(os.path.join(runner.work, "traces")))
    check(names == ["profile_0.json", "profile_1.json"], f"expected one trace per process, found {names}")
    for index in (0, 1):
        trace_events = check_step_trace(os.path.join(runner.work, "traces", f"profile_{index}.json"), [2, 3, 4])
        check(not memory_events(trace_events), f"profile_{index}.json has memory events without profile_memory")
        shapes = [event for event in trace_events if event.get("name") == "aten::addmm"
                  and event.get("args", {}).get("Input Dims")]
        check(shapes, f"profile_{index}.json: record_shapes gave aten::addmm no input dimensions")


def memory(runner):
    runner.run_ok(["--schedule", "0,1,2,1", "--steps", "6", "--trace-dir", "traces", "--memory"], nproc=2)
    for index in (0, 1):
        path = os.path.join(runner.work, "traces", f"profile_{index}.json")
        trace_events = check_step_trace(path, [1, 2])
        found = memory_events(trace_events)
        check(len(found) >= 10 and all("Bytes" in event.get("args", {}) for event in found),
              f"{path}: profile_memory gave {len(found)} [memory] events with their sizes")


def settings(runner):
    # The variables stand in for what the kwargs leave unset: ACCEL_PROFILE_DIR, ACCEL_PROFILE_SCHEDULE.
    env = {"ACCEL_PROFILE_DIR": "from-env", "ACCEL_PROFILE_SCHEDULE": "0, 1, 2, 2"}
    out, _ = runner.run_ok(["--steps", "10", "--cycle-files"], env=env)
    check("trace from-env/profile_0.json" in out, f"ACCEL_PROFILE_DIR was not used:\n{out}")
    # Two cycles of (warmup 1, active 2): steps 1-2 and 4-5 recorded; on_trace_ready saw each, the file at the
    # end holds the last.
    directory = os.path.join(runner.work, "from-env")
    cycles = sorted(os.path.basename(path) for path in glob.glob(os.path.join(directory, "cycle_*.json")))
    check(cycles == ["cycle_0_3.json", "cycle_0_6.json"], f"on_trace_ready did not see each cycle: {cycles}")
    check_step_trace(os.path.join(directory, "cycle_0_3.json"), [1, 2])
    check_step_trace(os.path.join(directory, "profile_0.json"), [4, 5])
    # The kwargs win over the variables.
    runner.run_ok(["--steps", "6", "--schedule", "0,0,1,1", "--trace-dir", "from-kwargs"], env=env)
    check_step_trace(os.path.join(runner.work, "from-kwargs", "profile_0.json"), [0])
    # No schedule: every step recorded in one trace, no step markers (PyTorch's without a schedule); the
    # default directory is ./profile.
    runner.run_ok(["--steps", "3"])
    trace_events = events(os.path.join(runner.work, "profile", "profile_0.json"))
    check(not step_markers(trace_events), "steps were marked without a schedule")
    calls = [event for event in trace_events if event.get("name") == "aten::mse_loss"]
    check(len(calls) == 3, f"expected the 3 steps' aten::mse_loss, found {len(calls)}")
    # An empty output_trace_dir writes no file (an empty variable counts as unset, as every variable of ours).
    os.rename(os.path.join(runner.work, "profile"), os.path.join(runner.work, "profile.before"))
    out, _ = runner.run_ok(["--steps", "2", "--trace-dir", ""], env={"ACCEL_PROFILE_DIR": "from-env-2"})
    check(re.search(r"^trace $", out, re.M), f"an empty output_trace_dir still named a trace:\n{out}")
    check(not os.path.exists(os.path.join(runner.work, "from-env-2")) and
          not os.path.exists(os.path.join(runner.work, "profile")), "an empty output_trace_dir still made a directory")


def bad_settings(runner):
    for text in ("1,x,3", "1,1,0", "1,2", "1,1,1,1,1"):
        code, out, err = runner.run(["--steps", "2"], env={"ACCEL_PROFILE_SCHEDULE": text})
        check(code != 0 and "profile_schedule='" + text + "'" in err and "ACCEL_PROFILE_SCHEDULE" in err
              and "wait,warmup,active" in err,
              f"ACCEL_PROFILE_SCHEDULE={text!r} was not refused with the value, the variable and the form:\n{err}")
    code, _, err = runner.run(["--steps", "2", "--schedule", "1,1,0"])
    check(code != 0 and "active=0" in err and "active must be >= 1" in err,
          f"schedule_option with active 0 was not refused with the fix:\n{err}")
    code, _, err = runner.run(["--steps", "2", "--activities", "cpu,gpu"])
    check(code != 0 and "'gpu' is not a profiler activity" in err and '"cuda"' in err,
          f"the activity 'gpu' was not refused with the known ones:\n{err}")
    with open(os.path.join(runner.work, "a-file"), "w") as file:
        file.write("not a directory\n")
    code, _, err = runner.run(["--steps", "2", "--trace-dir", "a-file/traces"])
    check(code != 0 and "'a-file/traces' cannot be made" in err and "ACCEL_PROFILE_DIR" in err,
          f"a trace directory under a file was not refused with the fix:\n{err}")
    # A schedule that never reaches its active steps: a warning, no file, training unharmed.
    out, err = runner.run_ok(["--steps", "4", "--schedule", "10,1,1", "--trace-dir", "never"])
    check("no step was recorded in 4 steps" in out + err, f"no warning for a schedule that never recorded:\n{err}")
    check(not os.listdir(os.path.join(runner.work, "never")), "a trace was written for a run that recorded nothing")


def rewritten(runner):
    # profile_plain, a plain loop built by accelerate_target(... PROFILE): 8 steps on each of 2 processes.
    env = {"ACCEL_PROFILE_SCHEDULE": "2,1,3,1", "ACCEL_PROFILE_DIR": "traces"}
    out, _ = runner.run_ok([], nproc=2, env=env)
    check("done" in out, f"the rewritten loop did not finish:\n{out}")
    for index in (0, 1):
        check_step_trace(os.path.join(runner.work, "traces", f"profile_{index}.json"), [3, 4, 5])


SCENARIOS = {
    "two-processes": two_processes,
    "memory": memory,
    "settings": settings,
    "bad-settings": bad_settings,
    "rewritten": rewritten,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--train", required=True)
    parser.add_argument("--accel", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    try:
        SCENARIOS[args.scenario](Runner(args))
    except Failure as failure:
        print(f"FAILED: {args.scenario}: {failure}")
        return 1
    print(f"PASSED: {args.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
