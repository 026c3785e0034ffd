#!/usr/bin/env python3
"""The mlflow tracker against a real `mlflow server`, read back with MLflow's own Python client.

    mlflow_test.py --train build/test/tracking/tracking_train --plain build/test/tracking/mlflow_plain
                   --accel build/bin/accel --mlflow-python VENV/bin/python --work DIR [scenario ...]

Starts one `mlflow server` (sqlite backend, loopback, a free port) from the MLflow venv that scripts/bootstrap.sh
installs, and runs the scenarios against it in order (all of them when none is named). A server that does not
start fails the test; nothing is skipped.
  two-processes   `--log-with all` on 2 processes with MLFLOW_TRACKING_URI set: one run, from the main process,
                  holding every logged step and value exactly (float64), the configuration as params, MLFLOW_TAGS
                  as tags, status FINISHED; a text value is left out with one warning.
  stopped-server  the server SIGSTOPped mid-run for longer than a request's timeout: training goes on (no gap
                  between the steps' timestamps near the timeout), one warning, and after SIGCONT the spooled
                  values are in the run and the spool file is gone.
  restart         `accel launch --max_restarts 1` on 2 processes, crashing at step 10 after a save_state at step 8:
                  the restart continues the same run (its id from the checkpoint), one run holds every step.
  next-start      a server that is not there at all: the run ends, its values kept in mlflow-spool.jsonl; the next
                  start in that directory, with the server there, sends them to a run of their own, FINISHED.
  settings        MLFLOW_TRACKING_URI unset (mlflow named: a warning naming the variable; "all": not selected),
                  MLFLOW_TAGS not an object, MLFLOW_RUN_ID continuing a run, MLFLOW_NESTED_RUN making a child run,
                  a run id the server does not have; training goes on in each.
  rewritten       a plain loop built by accelerate_target(... LOG_WITH mlflow), run on 2 processes: its printed
                  loss is in the run.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
from mlflow_server import MlflowServer, free_port  # noqa: E402
from tracking_test import Failure, check, logged  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Harness:
    def __init__(self, args, server):
        self.args, self.server = args, server
        self.work = args.work

    def read(self, experiment):
        """The experiment's runs as mlflow_read.py returns them (None: no such experiment)."""
        done = subprocess.run([self.args.mlflow_python, os.path.join(HERE, "mlflow_read.py"), self.server.uri,
                               experiment], capture_output=True, text=True, timeout=120)
        check(done.returncode == 0, f"mlflow_read.py failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout)["runs"]

    def command(self, program, flags, nproc, launch_flags=()):
        if nproc == 1 and not launch_flags:
            return [program, *flags]
        return [self.args.accel, "launch", "--num_processes", str(nproc), "--main_process_port", "0",
                *launch_flags, program, *flags]

    def environment(self, env):
        environment = dict(os.environ, OMP_NUM_THREADS="1")
        for name in list(environment):
            if name.startswith("MLFLOW_") or name in ("ACCEL_PROJECT_DIR", "ACCELERATE_LOG_LEVEL"):
                environment.pop(name)
        environment.update(env)
        return environment

    def run(self, flags, env, nproc=1, program=None, launch_flags=(), timeout=180, expect_done=True):
        done = subprocess.run(self.command(program or self.args.train, flags, nproc, launch_flags),
                              capture_output=True, text=True, env=self.environment(env), timeout=timeout,
                              cwd=self.work, start_new_session=True)
        check(done.returncode == 0, f"{' '.join(flags)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        if expect_done:
            check(re.search(r"done \d+ steps", done.stdout), f"the run did not reach its end:\n{done.stdout}")
        return done.stdout, done.stderr


def one_run(runs, experiment):
    check(runs is not None, f"the server has no experiment '{experiment}'")
    check(len(runs) == 1, f"experiment '{experiment}' holds {len(runs)} runs, expected one: "
                          f"{[(r['run_id'], r['status']) for r in runs]}")
    return runs[0]


def check_values(run, values, names=("loss", "lr", "step_number")):
    """Every logged (step, name) is in the run exactly once, with the exact value."""
    for name in names:
        history = run["metrics"].get(name)
        check(history is not None, f"the run has no metric '{name}': {sorted(run['metrics'])}")
        expected = sorted((step, value) for (step, key), value in values.items() if key == name)
        got = [(step, value) for step, value, _ in history]
        check(got == expected, f"metric '{name}': the run holds {got[:6]}... ({len(got)}), the program logged "
                               f"{expected[:6]}... ({len(expected)})")


def warnings(stderr, text):
    return [line for line in stderr.splitlines() if "WARNING" in line and text in line]


# ---------------------------------------------------------------------------------------------- scenarios

def two_processes(h):
    env = {"MLFLOW_TRACKING_URI": h.server.uri, "MLFLOW_EXPERIMENT_NAME": "two-processes",
           "MLFLOW_TAGS": json.dumps({"team": "cpp", "attempt": 3})}
    out, err = h.run(["--log-with", "all", "--project-dir", "runs", "--project", "two", "--dataset", "64",
                      "--batch", "4"], env, nproc=2)
    values = logged(out)
    run = one_run(h.read("two-processes"), "two-processes")
    check(run["status"] == "FINISHED", f"the run's status is {run['status']}, end_training ends it FINISHED")
    check_values(run, values)
    check(sorted(run["metrics"]) == ["loss", "lr", "step_number"],
          f"the run holds the metrics {sorted(run['metrics'])}; the text 'note' is not a metric")
    check(run["params"] == {"lr": "0.05", "batch_size": "4", "processes": "2", "optimizer": "SGD"},
          f"params: {run['params']}")
    check(run["tags"].get("team") == "cpp" and run["tags"].get("attempt") == "3",
          f"MLFLOW_TAGS are not the run's tags: {run['tags']}")
    check(run["tags"].get("mlflow.source.type") == "LOCAL", f"tags: {run['tags']}")
    check(len(warnings(err, "'note' is a text")) == 1, f"expected one warning about the text 'note':\n{err}")
    check(not os.path.exists(os.path.join(h.work, "runs", "two", "mlflow-spool.jsonl")), "a spool file was left")
    check(os.path.exists(os.path.join(h.work, "runs", "two", "metrics.jsonl")), "'all' left out jsonl")


def stopped_server(h):
    env = {"MLFLOW_TRACKING_URI": h.server.uri, "MLFLOW_EXPERIMENT_NAME": "stopped-server"}
    command = h.command(h.args.train, ["--log-with", "mlflow", "--project-dir", "runs", "--project", "stopped",
                                       "--dataset", "1200", "--batch", "2", "--step-delay-ms", "20",
                                       "--text-every", "0"], 1)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=h.work,
                               env=h.environment(env), start_new_session=True)
    lines, errors = [], []
    reached = {}
    event = threading.Condition()

    def read_out():
        for line in process.stdout:
            lines.append(line)
            match = re.match(r"logged (\d+) loss", line)
            if match:
                with event:
                    reached["step"] = int(match.group(1))
                    event.notify_all()

    def read_err():
        errors.extend(process.stderr)

    threads = [threading.Thread(target=read_out), threading.Thread(target=read_err)]
    for thread in threads:
        thread.start()

    def wait_step(step, timeout=120):
        with event:
            check(event.wait_for(lambda: reached.get("step", -1) >= step or process.poll() is not None, timeout),
                  f"the run did not reach step {step}")
        check(process.poll() is None, f"the run ended (exit {process.returncode}) before step {step}")
        return reached["step"]

    wait_step(40)
    h.server.signal(signal.SIGSTOP)
    stopped_at = wait_step(41)
    time.sleep(9)  # longer than a request's timeout (5 s): the sender finds the server silent, and spools
    spool = os.path.join(h.work, "runs", "stopped", "mlflow-spool.jsonl")
    spooled = os.path.exists(spool)
    resumed_at = reached["step"]
    h.server.signal(signal.SIGCONT)
    process.wait(timeout=180)
    for thread in threads:
        thread.join()
    out, err = "".join(lines), "".join(errors)
    check(process.returncode == 0, f"the run exited {process.returncode}:\n{err}")
    check(spooled, f"nothing was spooled while the server was stopped:\n{err}")
    check(resumed_at - stopped_at > 100, f"training did not go on while the server was stopped: steps "
                                         f"{stopped_at} to {resumed_at} in 9 s")
    silent = warnings(err, "does not answer")
    check(len(silent) == 1, f"expected one warning that the server does not answer, got {len(silent)}:\n{err}")
    check("were sent" in err, f"no line says the spooled values were sent:\n{err}")
    check(not os.path.exists(spool), "the spool file is still there after the server answered again")
    run = one_run(h.read("stopped-server"), "stopped-server")
    check_values(run, logged(out))
    check(run["status"] == "FINISHED", f"status {run['status']}")
    # A step never waited for the server: the steps' own timestamps (taken in log) show no pause near the 5 s
    # request timeout (a step takes about 20 ms here).
    stamps = [timestamp for _, _, timestamp in run["metrics"]["loss"]]
    gap = max(b - a for a, b in zip(stamps, stamps[1:]))
    check(gap < 2500, f"a step waited {gap} ms for the stopped server")
    print(f"stopped-server: steps {stopped_at}..{resumed_at} ran while the server was stopped; "
          f"largest gap between steps {gap} ms")


def restart(h):
    env = {"MLFLOW_TRACKING_URI": h.server.uri, "MLFLOW_EXPERIMENT_NAME": "restart"}
    out, err = h.run(["--log-with", "mlflow", "--project-dir", "runs", "--project", "restart", "--dataset", "96",
                      "--batch", "4", "--checkpoint", "restart-checkpoint", "--save-every", "4",
                      "--crash-at-step", "10"], env, nproc=2, launch_flags=("--max_restarts", "1"))
    check("resumed at step 8" in out, f"the restart did not resume from step 8:\n{out}\n{err}")
    check("continues MLflow run" not in out + err, f"the restart made a run before load_state named one:\n{err}")
    run = one_run(h.read("restart"), "restart")
    check(run["status"] == "FINISHED", f"status {run['status']}")
    steps = sorted({step for step, _, _ in run["metrics"]["loss"]})
    check(steps == list(range(12)), f"the continued run holds the steps {steps}, expected 0..11")
    final = logged(out)
    history = run["metrics"]["loss"]
    for step in (10, 11):  # after the restart: the values the resumed run logged
        check(any(s == step and v == final[(step, "loss")] for s, v, _ in history),
              f"step {step}'s loss {final[(step, 'loss')]} is not in the run")


def next_start(h):
    nobody = f"http://127.0.0.1:{free_port()}"
    flags = ["--log-with", "mlflow", "--project-dir", "runs", "--project", "later", "--dataset", "16", "--batch", "2"]
    out, err = h.run(flags, {"MLFLOW_TRACKING_URI": nobody, "MLFLOW_EXPERIMENT_NAME": "next-start"})
    first = logged(out)
    check(len(warnings(err, "does not answer")) == 1, f"expected one warning, the server being away:\n{err}")
    spool = os.path.join(h.work, "runs", "later", "mlflow-spool.jsonl")
    check(os.path.exists(spool), "the values of a run whose server was away are not kept")
    out, err = h.run(flags + ["--dataset", "8"], {"MLFLOW_TRACKING_URI": h.server.uri,
                                                  "MLFLOW_EXPERIMENT_NAME": "next-start"})
    second = logged(out)
    check(not os.path.exists(spool), f"the next start did not send the spool:\n{err}")
    runs = h.read("next-start")
    check(runs is not None and len(runs) == 2, f"expected the earlier start's run and this one's: {runs}")
    by_steps = sorted(runs, key=lambda r: len(r["metrics"].get("loss", [])), reverse=True)
    check_values(by_steps[0], first)
    check_values(by_steps[1], second)
    check(all(r["status"] == "FINISHED" for r in runs), f"statuses {[r['status'] for r in runs]}")


def settings(h):
    flags = ["--project-dir", "runs", "--project", "settings", "--dataset", "8", "--batch", "2"]
    _, err = h.run(["--log-with", "mlflow", *flags], {})
    check(any("MLFLOW_TRACKING_URI is not set" in w for w in warnings(err, "mlflow")),
          f"mlflow without MLFLOW_TRACKING_URI: no warning naming the variable:\n{err}")
    _, err = h.run(["--log-with", "all", *flags], {})
    check("mlflow" not in err.lower(), f"'all' without MLFLOW_TRACKING_URI selected mlflow:\n{err}")
    _, err = h.run(["--log-with", "mlflow", *flags], {"MLFLOW_TRACKING_URI": h.server.uri, "MLFLOW_TAGS": "[1, 2]"})
    check(any("MLFLOW_TAGS" in w and "not a JSON object" in w for w in warnings(err, "mlflow")),
          f"MLFLOW_TAGS as a list: no clear warning:\n{err}")
    # MLFLOW_RUN_ID continues a run; MLFLOW_NESTED_RUN makes a child of it.
    env = {"MLFLOW_TRACKING_URI": h.server.uri, "MLFLOW_EXPERIMENT_NAME": "settings"}
    out, _ = h.run(["--log-with", "mlflow", *flags], env)
    parent = one_run(h.read("settings"), "settings")
    out, _ = h.run(["--log-with", "mlflow", *flags, "--dataset", "12"], dict(env, MLFLOW_RUN_ID=parent["run_id"]))
    runs = h.read("settings")
    check(len(runs) == 1, f"MLFLOW_RUN_ID made a new run instead of continuing it: {len(runs)} runs")
    check(len(runs[0]["metrics"]["loss"]) == 4 + 6, f"the continued run holds {runs[0]['metrics']['loss']}")
    h.run(["--log-with", "mlflow", *flags], dict(env, MLFLOW_RUN_ID=parent["run_id"], MLFLOW_NESTED_RUN="true"))
    runs = h.read("settings")
    children = [r for r in runs if r["tags"].get("mlflow.parentRunId") == parent["run_id"]]
    check(len(runs) == 2 and len(children) == 1, f"MLFLOW_NESTED_RUN: no child run of {parent['run_id']}: "
                                                 f"{[(r['run_id'], r['tags'].get('mlflow.parentRunId')) for r in runs]}")
    _, err = h.run(["--log-with", "mlflow", *flags], dict(env, MLFLOW_RUN_ID="0123456789abcdef0123456789abcdef"))
    check(any("0123456789abcdef0123456789abcdef" in w for w in warnings(err, "mlflow")),
          f"a run id the server does not have: no warning naming it:\n{err}")


def rewritten(h):
    env = {"MLFLOW_TRACKING_URI": h.server.uri, "MLFLOW_EXPERIMENT_NAME": "rewritten"}
    out, err = h.run([], env, nproc=2, program=h.args.plain, expect_done=False)
    printed = [float(v) for v in re.findall(r"^(?:\[rank0\]: )?step \d+ loss (\S+)$", out, re.M)]
    check(printed, f"the rewritten program printed no loss:\n{out}\n{err}")
    runs = h.read("rewritten")
    check(runs is not None and len(runs) == 1, f"the rewritten program made {runs and len(runs)} runs:\n{err}")
    history = runs[0]["metrics"].get("loss", [])
    check(len(history) == len(printed), f"the run holds {len(history)} losses, the program printed {len(printed)}")
    for (_, value, _), shown in zip(history, printed):
        # The print shows 6 significant digits: within half a unit of the sixth, at most 5e-6 relative.
        check(abs(value - shown) <= 5e-6 * abs(shown), f"the run's loss {value} is not the printed {shown}")


SCENARIOS = {
    "two-processes": two_processes,
    "stopped-server": stopped_server,
    "restart": restart,
    "next-start": next_start,
    "settings": settings,
    "rewritten": rewritten,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", default=[], help=f"any of {', '.join(SCENARIOS)}")
    parser.add_argument("--train", required=True)
    parser.add_argument("--plain", required=True)
    parser.add_argument("--accel", required=True)
    parser.add_argument("--mlflow-python", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    for name in ("train", "plain", "accel", "mlflow_python", "work"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; the scenarios are {', '.join(SCENARIOS)}")
    if not os.path.exists(args.mlflow_python):
        print(f"FAILED: no MLflow venv at {args.mlflow_python}: run scripts/bootstrap.sh --mlflow")
        return 1
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    names = args.scenarios or list(SCENARIOS)
    server = None
    try:
        try:
            server = MlflowServer(args.mlflow_python, args.work)
        except RuntimeError as error:
            raise Failure(str(error))
        print(f"mlflow server answered on {server.uri} after {server.start_seconds:.1f} s")
        harness = Harness(args, server)
        for name in names:
            started = time.time()
            SCENARIOS[name](harness)
            print(f"PASSED: {name} ({time.time() - started:.1f} s)")
    except Failure as failure:
        print(f"FAILED: {failure}")
        return 1
    finally:
        if server:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
