#!/usr/bin/env python3
"""Runs one multi-process test: N ranks of a binary started by `accel launch` on loopback (with --machines M, as
M machines: M launchers, N/M ranks each, on loopback addresses of their own where a network namespace can be made:
machines.py).

Fails with the ranks' output when any rank fails, and never hangs: past --timeout seconds the whole process
tree (launcher and ranks, one process group) is killed and the test fails saying so.

    run_ranks.py --accel build/bin/accel --nproc 2 --timeout 120 -- ./test_binary --gtest_brief=1

For a GoogleTest binary (a --gtest_filter in the command), the filter must select at least one test (asked of the
binary with --gtest_list_tests first): a renamed test fails instead of passing by running nothing. When the ranks
skipped a test (GTEST_SKIP), the run exits 77, which ctest reports as skipped (SKIP_RETURN_CODE 77), not passed.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

import machines


SKIP = 77
GTEST_SKIPPED = re.compile(r"^(?:\[rank(\d+)\]: )?\[  SKIPPED \] (\d+) tests?[,.]", re.M)


def gtest_selected(command):
    """The tests the command's --gtest_filter selects, listed by the binary itself (no rank is started)."""
    listing = subprocess.run([command[0], *[a for a in command[1:] if a.startswith("--gtest_filter")],
                              "--gtest_list_tests"], capture_output=True, text=True, timeout=60)
    if listing.returncode != 0:
        sys.exit(f"run_ranks: FAILED: {command[0]} --gtest_list_tests exited {listing.returncode}:\n"
                 f"{listing.stdout}{listing.stderr}")
    suite, tests = "", []
    for line in listing.stdout.splitlines():
        if line and not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif line.strip():
            tests.append(suite + line.split("#")[0].strip())
    return tests


def skipped_somewhere(output):
    """True when a rank skipped a test it ran (GTEST_SKIP): the run is then not counted as passed."""
    return any(int(count) > 0 for _, count in GTEST_SKIPPED.findall(output))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accel", required=True, help="path to the accel launcher")
    parser.add_argument("--nproc", type=int, default=2, help="number of ranks (of all machines together)")
    parser.add_argument("--machines", type=int, default=1,
                        help="run the ranks as this many machines on loopback, one `accel launch` each")
    parser.add_argument("--timeout", type=float, default=120, help="hard limit in seconds for the whole run")
    parser.add_argument("--expect-exit", type=int, default=0, help="the launcher exit code that means success")
    parser.add_argument("--expect-output", action="append", default=[],
                        help="a string the combined output must contain (repeatable)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- binary [args...]")
    args = parser.parse_args()
    if args.machines > 1:
        machines.enter_machine_namespace()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no binary given after --")

    gtest = any(arg.startswith("--gtest_filter") for arg in command[1:])
    if gtest:
        selected = gtest_selected(command)
        if not selected:
            print(f"run_ranks: FAILED: {' '.join(command)} selects no test (a renamed or removed test would pass "
                  f"by running nothing); see `{command[0]} --gtest_list_tests`")
            return 1

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if args.machines == 1:
        launches = [[args.accel, "launch", "--num_processes", str(args.nproc), "--main_process_port", "0", *command]]
    else:
        launches = machines.launch_commands(args.accel, args.machines, args.nproc, command)
    processes = [subprocess.Popen(launch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=machines.env_of(machine, env), start_new_session=True, text=True,
                                  errors="replace") for machine, launch in enumerate(launches)]
    outputs = [""] * len(processes)
    deadline = time.monotonic() + args.timeout
    try:
        for i, process in enumerate(processes):
            outputs[i], _ = process.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        for process in processes:
            process.terminate()  # the launcher stops its ranks on SIGTERM
        for i, process in enumerate(processes):
            try:
                more, _ = process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                more, _ = process.communicate()
            outputs[i] += more or ""
        sys.stdout.write("".join(outputs))
        print(f"run_ranks: FAILED: {args.nproc} ranks of {command[0]} still running after {args.timeout:g} s; "
              "killed them all (a hang: look for the collective one rank never reached)")
        return 1
    finally:
        for process in processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # nothing of the run outlives it
            except ProcessLookupError:
                pass
    output = "".join(outputs)
    sys.stdout.write(output)
    for machine, process in enumerate(processes):
        if process.returncode != args.expect_exit:
            where = f" (machine {machine})" if len(processes) > 1 else ""
            print(f"run_ranks: FAILED: accel launch{where} exited {process.returncode}, expected {args.expect_exit}")
            return 1
    missing = [text for text in args.expect_output if text not in output]
    if missing:
        print(f"run_ranks: FAILED: output lacks {missing!r}")
        return 1
    if gtest and skipped_somewhere(output):
        print(f"run_ranks: SKIPPED: of {', '.join(selected)}, a rank skipped at least one (GTEST_SKIP; the reason "
              "and the count are above); the others passed")
        return SKIP
    print(f"run_ranks: {args.nproc} ranks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
