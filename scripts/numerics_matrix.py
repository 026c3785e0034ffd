#!/usr/bin/env python3
"""The numerics matrix: reruns the numerics-sensitive tests under the settings that change floating-point
results across real CPUs, and reports each test's worst measured spread per setting.

Run it through scripts/numerics-matrix.sh (see there for the options). Standard library only.

A test reports a spread by printing, anywhere in its output, the line
    numerics: <label>: relative difference <value> (limit <limit>)
(test/support/numerics.h's report_spread, test/harness/numerics.py's report_spread). Per ctest entry and setting
the table shows the largest value, and its last column the smallest limit/value ratio over all the entry's
lines and settings (the margin the tightest tolerance has). An entry that failed under a setting is marked
FAILED there; the script then exits 1.
"""
import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

SPREAD = re.compile(r"numerics: (?P<label>.*?): relative difference (?P<value>[-+0-9.eEinfa]+) "
                    r"\(limit (?P<limit>[-+0-9.eEinfa]+)\)")

# The groups whose tests compare floating-point results between runs, processes or code paths.
DEFAULT_TESTS = r"^(multirank|fixtures|e2e|checkpoint|resume|launch\.train|bench\.(loss_curve|fsdp_offload))\."
# Within them, entries whose floating-point arithmetic another entry already runs, or that check something
# other than numbers, left out to keep the matrix near 20 minutes on 2 cores: debug-mode twins (the same
# training with checks), refusals and failure handling (bad input, killed or hung ranks, full disks, file
# formats), launcher and restart plumbing (their training is launch.train.TrainingIsIdenticalUnderEveryLauncher's),
# bookkeeping of loaders, buckets and checkpoints, entries that only read configuration or generated text, and
# the float64 fixtures of rewritten loop shapes (they check what the rewriter wrote; their arithmetic is the DDP
# path the multirank entries run, and their margins were above 8e8x under every setting on 2026-12-05).
DEFAULT_EXCLUDE = (r"\.debug$|DebugMode|^checkpoint\.(kill-during-save|full-disk|safetensors|loads-format|bad)|"
                   r"python_accelerate_reads|negative_control|generated_up_to_date|readme_shows|Refused|Refuses|"
                   r"Reported|Hang|Timeout|Named|Fails|Exits|Crash|Killed|Restart|Bad|WaitForEveryone|"
                   r"Unprepared|PlainBackward|Unknown|Holds|Recorded|TotalLimit|Torchrun|Penalty|Unwrap|"
                   r"SecondAccelerator|SplitBatches|Buckets|DrawTheSameOrder|GatherForMetrics|Dispatch|"
                   r"WorkerThreads|"
                   r"^fixtures\.(member_optimizers|reach|trainer_main|unmovable_batch|trains_like_original|header_training)\.")

DOC_BEGIN = "<!-- numerics-matrix: begin (scripts/numerics-matrix.sh --update-doc writes this part) -->"
DOC_END = "<!-- numerics-matrix: end -->"


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def settings_for(flags, own_capability):
    """The settings this CPU can run: (name, environment, what it stands for). Those named in OPTIONAL run
    only when asked for with --settings."""
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    avx2 = {"avx2", "fma"} <= flags
    settings = [("as-is", {}, f"this CPU as it is (ATen {own_capability}), 1 intra-op thread")]
    if avx512 and own_capability != "AVX512":
        settings.append(("aten-avx512", {"ATEN_CPU_CAPABILITY": "avx512"}, "ATen's AVX-512 kernels"))
    if avx2 and own_capability != "AVX2":
        settings.append(("aten-avx2", {"ATEN_CPU_CAPABILITY": "avx2"}, "ATen's AVX2 kernels"))
    settings.append(("aten-default", {"ATEN_CPU_CAPABILITY": "default"}, "ATen's kernels without vector extensions"))
    if avx512:
        settings.append(("mkl-avx2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
                         "MKL and oneDNN capped at AVX2 code paths, as on a CPU without AVX-512"))
    settings.append(("mkl-cbwr-compatible", {"MKL_CBWR": "COMPATIBLE"},
                     "MKL's conditional reproducibility, SSE2-compatible paths (as on a CPU MKL does not favour)"))
    if avx512:
        settings.append(("onednn-avx2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "oneDNN alone capped at AVX2"))
        settings.append(("mkl-only-avx2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "MKL alone capped at AVX2"))
    settings.append(("threads-2", {"ACCEL_TEST_INTRA_OP_THREADS": "2", "OMP_NUM_THREADS": "2"},
                     "2 intra-op threads in every test process"))
    return settings


# Settings that run only when named: each is half of mkl-avx2, for telling which library a difference comes from.
OPTIONAL = {"onednn-avx2", "mkl-only-avx2"}


def own_aten_capability(python):
    try:
        result = subprocess.run([python, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                                capture_output=True, text=True, timeout=120)
        return result.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def run_setting(build_dir, log_dir, name, environment, tests, exclude, jobs):
    """Runs the tests under one setting; returns {entry: (passed, [(label, value, limit)], seconds)}."""
    junit = os.path.join(log_dir, f"{name}.xml")
    log = os.path.join(log_dir, f"{name}.log")
    env = dict(os.environ)
    env.update(environment)
    command = ["ctest", "--test-dir", build_dir, "-R", tests, "-j", str(jobs), "--output-junit", junit,
               "--test-output-size-passed", "10000000", "--test-output-size-failed", "10000000"]
    if exclude:
        command += ["-E", exclude]
    with open(log, "w") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    results = {}
    if not os.path.exists(junit):
        return results
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        entry = case.get("name")
        status = case.get("status", "")
        passed = status == "run" and case.find("failure") is None and case.find("error") is None
        skipped = case.find("skipped") is not None or status in ("notrun", "disabled")
        output = "".join(node.text or "" for node in case.iter("system-out"))
        spreads = [(m.group("label"), float(m.group("value")), float(m.group("limit")))
                   for m in SPREAD.finditer(output)]
        results[entry] = ("skipped" if skipped else ("passed" if passed else "FAILED"), spreads,
                          float(case.get("time", "0") or 0))
    return results


def fmt(value):
    return "0" if value == 0 else f"{value:.2e}"


def table(settings, results):
    names = [name for name, _, _ in settings]
    entries = sorted({entry for per in results.values() for entry in per})
    lines = ["| test | " + " | ".join(f"`{n}`" for n in names) + " | tightest limit / worst |",
             "|---|" + "---|" * len(names) + "---|"]
    for entry in entries:
        cells, margin, margin_label, any_spread = [], None, "", False
        for name in names:
            status, spreads, _ = results.get(name, {}).get(entry, ("not run", [], 0))
            if status == "FAILED":
                cells.append("**FAILED**" + (f" {fmt(max(v for _, v, _ in spreads))}" if spreads else ""))
            elif status != "passed":
                cells.append(status)
            elif spreads:
                cells.append(fmt(max(v for _, v, _ in spreads)))
            else:
                cells.append("passed")
            for label, value, limit in spreads:
                any_spread = True
                ratio = float("inf") if value == 0 else limit / value
                if margin is None or ratio < margin:
                    margin, margin_label = ratio, label
        if margin is None:
            last = "—"
        elif margin == float("inf"):
            last = "all 0"
        else:
            last = f"{margin:,.0f}x ({margin_label})"
        if any_spread or any(c.startswith("**FAILED") for c in cells):
            lines.append(f"| `{entry}` | " + " | ".join(cells) + f" | {last} |")
    quiet = [e for e in entries
             if all(not results.get(n, {}).get(e, ("", [], 0))[1] for n in names)
             and all(results.get(n, {}).get(e, ("passed", [], 0))[0] in ("passed", "skipped", "not run") for n in names)]
    return lines, quiet


def update_doc(doc, block):
    with open(doc) as f:
        text = f.read()
    if DOC_BEGIN in text and DOC_END in text:
        before, rest = text.split(DOC_BEGIN, 1)
        _, after = rest.split(DOC_END, 1)
        text = before + DOC_BEGIN + "\n" + block + "\n" + DOC_END + after
    else:
        text = text.rstrip("\n") + "\n\n" + DOC_BEGIN + "\n" + block + "\n" + DOC_END + "\n"
    with open(doc, "w") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(prog="numerics-matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--tests", default=DEFAULT_TESTS, help="ctest -R regex (default: %(default)s)")
    parser.add_argument("--exclude", default=DEFAULT_EXCLUDE, help="ctest -E regex (default: %(default)s)")
    parser.add_argument("--settings", default="", help="comma-separated setting names (default: all this CPU has)")
    parser.add_argument("--list-settings", action="store_true")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--python", default=sys.executable, help="a Python with torch (to read ATen's own choice)")
    parser.add_argument("--update-doc", metavar="FILE", default="",
                        help="write the table into FILE between the numerics-matrix markers")
    options = parser.parse_args()

    capability = own_aten_capability(options.python)
    available = settings_for(cpu_flags(), capability)
    if options.list_settings:
        for name, environment, what in available:
            what += " (only when named)" if name in OPTIONAL else ""
            print(f"{name:22} {' '.join(f'{k}={v}' for k, v in environment.items()) or '(nothing set)':60} {what}")
        return 0
    chosen = [s for s in available if s[0] not in OPTIONAL]
    if options.settings:
        wanted = [s.strip() for s in options.settings.split(",") if s.strip()]
        known = {name for name, _, _ in available}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            print(f"numerics-matrix: unknown or unavailable setting(s) {', '.join(unknown)} on this CPU; "
                  f"choose from {', '.join(sorted(known))} (--list-settings)", file=sys.stderr)
            return 2
        chosen = [s for s in available if s[0] in wanted]
    if not os.path.exists(os.path.join(options.build_dir, "CTestTestfile.cmake")):
        print(f"numerics-matrix: {options.build_dir} is not a built tree (no CTestTestfile.cmake); run "
              f"'make build' first or pass --build-dir", file=sys.stderr)
        return 2
    log_dir = os.path.abspath(os.path.join(options.build_dir, "numerics-matrix"))
    os.makedirs(log_dir, exist_ok=True)

    started = time.monotonic()
    results, durations = {}, {}
    for name, environment, what in chosen:
        begun = time.monotonic()
        shown = " ".join(f"{k}={v}" for k, v in environment.items()) or "nothing set"
        print(f"numerics-matrix: {name} ({shown}) ...", flush=True)
        results[name] = run_setting(options.build_dir, log_dir, name, environment, options.tests,
                                    options.exclude, options.jobs)
        durations[name] = time.monotonic() - begun
        failed = [e for e, (status, _, _) in results[name].items() if status == "FAILED"]
        print(f"numerics-matrix: {name}: {len(results[name])} tests, {len(failed)} failed, "
              f"{durations[name]:.0f} s" + (f": {', '.join(failed)}" if failed else ""), flush=True)
    elapsed = time.monotonic() - started

    lines, quiet = table(chosen, results)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    header = [
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()} ({os.cpu_count()} cores; ATen's own "
        f"choice {capability}), commit {commit or 'unknown'}, in {elapsed / 60:.1f} min "
        f"(`scripts/numerics-matrix.sh --update-doc docs/development.md`). Settings:",
        "",
    ]
    for name, environment, what in chosen:
        shown = " ".join(f"{k}={v}" for k, v in environment.items()) or "nothing set"
        header.append(f"- `{name}`: `{shown}` — {what}; {durations[name]:.0f} s")
    header.append("")
    block = "\n".join(header + lines + [
        "",
        f"{len(quiet)} more entries passed under every setting without printing a spread (exact checks, or "
        "comparisons whose scripts print none): " + ", ".join(f"`{q}`" for q in quiet) + "."])
    print()
    print(block)
    if options.update_doc:
        update_doc(options.update_doc, block)
        print(f"\nnumerics-matrix: table written into {options.update_doc}")
    failed_any = any(status == "FAILED" for per in results.values() for status, _, _ in per.values())
    empty = [name for name in results if not results[name]]
    if empty:
        print(f"numerics-matrix: no test ran under {', '.join(empty)} (see {log_dir})", file=sys.stderr)
    return 1 if failed_any or empty else 0


if __name__ == "__main__":
    sys.exit(main())
