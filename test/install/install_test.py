#!/usr/bin/env python3
"""The installed package as a user meets it: `cmake --install`, find_package(AccelerateCpp), accelerate_target().

  package: installs the current build into <work>/prefix, copies test/install/project to <work>/project,
           configures it against the prefix alone, builds `train`, and runs it on 2 ranks with the installed
           `accel launch`. Its loss (all-reduced by the rewritten loop) must be finite, fall, and equal the
           same binary's single-process run at the same global batch (rtol 1e-5).
  rebuild: in that build (after `package`), checks the rewrite's dependencies through the build tool's
           output: an unchanged tree and a touched unrelated header do not re-run the rewrite, a touched
           included header does, and so does an edited source; a compile error planted in that source
           is reported at the original file and line (through the rewritten copy's #line directives).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from numerics import report_spread  # noqa: E402  (the line scripts/numerics-matrix.sh reads)

REWRITE = re.compile(r"accel-rewrite train\.cpp")
STEP = re.compile(r"^(?:\[rank(\d+)\]: )?step (\d+) loss (\S+)$")


def fail(message, output=""):
    sys.exit(f"install_test: FAILED: {message}\n{output}")


def run(command, timeout=600, env=None, check=True):
    started = time.time()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                            env=dict(os.environ, **(env or {})))
    print(f"install_test: {' '.join(command)} -> {result.returncode} ({time.time() - started:.1f} s)", flush=True)
    if check and result.returncode != 0:
        fail(f"{' '.join(command)} exited {result.returncode}", result.stdout)
    return result


def build(options, check=True):
    command = [options.cmake, "--build", os.path.join(options.work, "build"), "--target", "train", "-j", "2"]
    return run(command, check=check)


def losses(output):
    values = {}
    for line in output.splitlines():
        match = STEP.match(line.strip())
        if match:
            values.setdefault(int(match.group(1) or 0), {})[int(match.group(2))] = float(match.group(3))
    return values


def tidy(options, prefix):
    """The installed accel-clang-tidy loads the installed module, which runs the passes and checks that its
    rewrite compiles: the fix is offered on a plain loop (on the pass tests' small stand-in headers)."""
    inputs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "passes", "Inputs")
    plain = os.path.join(options.work, "tidy_train.cpp")
    shutil.copy(os.path.join(inputs, "small_loop.cpp"), plain)
    output = run([os.path.join(prefix, "bin", "accel-clang-tidy"), "-checks=-*,accelerate-*", plain, "--",
                  "-std=c++17", f"-I{inputs}"]).stdout
    if "distribute it with accelerate" not in output or "the fix applies them all" not in output:
        fail("the installed accel-clang-tidy offered no fix for a plain training loop", output)


def lsp(options, prefix):
    """The installed accel-lsp offers the rewrite of a plain loop as a code action, its compile check against
    the installed runtime headers passing (on the pass tests' small stand-in headers)."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(tests, "lsp"))
    from lsp_client import Client

    inputs = os.path.join(tests, "passes", "Inputs")
    folder = os.path.join(options.work, "lsp")
    os.makedirs(folder)
    plain = os.path.join(folder, "train.cpp")
    shutil.copy(os.path.join(inputs, "small_loop.cpp"), plain)
    with open(os.path.join(folder, "compile_commands.json"), "w") as database:
        json.dump([{"directory": folder, "file": plain,
                    "arguments": ["clang++", "-std=c++17", f"-I{inputs}", "-c", plain]}], database)
    client = Client([os.path.join(prefix, "bin", "accel-lsp")])
    try:
        client.initialize(folder)
        client.open(plain)
        actions = client.code_actions(plain, 0, 120).get("result") or []
        offered = [a for a in actions if a.get("title") == "Distribute this training loop with accelerate"]
        if not offered or "edit" not in offered[0]:
            fail("the installed accel-lsp offered no rewrite for a plain training loop", json.dumps(actions)[:1000])
        client.shutdown()
    finally:
        client.kill()


def package(options):
    work = options.work
    shutil.rmtree(work, ignore_errors=True)
    prefix = os.path.join(work, "prefix")
    run([options.cmake, "--install", options.build_dir, "--prefix", prefix])
    for path in ("bin/accel", "bin/accel-rewrite", "bin/accel-clang-tidy", "bin/accel-lsp", "lib/accelerate-tidy.so",
                 "lib/libaccelerate_runtime.so",
                 "include/accelerate/accelerate.h", "lib/cmake/AccelerateCpp/AccelerateCppConfig.cmake",
                 "lib/cmake/AccelerateCpp/AccelerateCppConfigVersion.cmake"):
        if not os.path.exists(os.path.join(prefix, path)):
            fail(f"`cmake --install` did not install {path}; build everything first (`make build`)")
    tidy(options, prefix)
    lsp(options, prefix)
    project = os.path.join(work, "project")
    shutil.copytree(options.project, project)

    configure = [options.cmake, "-S", project, "-B", os.path.join(work, "build"), "-G", options.generator,
                 "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}",
                 f"-DCMAKE_CXX_COMPILER={options.cxx}", "-Wno-dev"]
    if options.launcher:
        configure.append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={options.launcher}")
    run(configure)
    with open(os.path.join(work, "build", "CMakeCache.txt")) as cache:
        found = re.search(r"^AccelerateCpp_DIR:PATH=(.*)$", cache.read(), re.M)
    expected = os.path.join(prefix, "lib", "cmake", "AccelerateCpp")
    if not found or os.path.realpath(found.group(1)) != os.path.realpath(expected):
        fail(f"the project found AccelerateCpp in {found and found.group(1)}, not in {expected}")

    output = build(options).stdout
    if not REWRITE.search(output):
        fail("the first build did not run accel-rewrite on train.cpp", output)
    train = os.path.join(work, "build", "train")
    libraries = run(["ldd", train]).stdout
    runtime = re.search(r"libaccelerate_runtime\.so => (\S+)", libraries)
    if not runtime or os.path.realpath(runtime.group(1)) != os.path.realpath(
            os.path.join(prefix, "lib", "libaccelerate_runtime.so")):
        fail("train does not load the installed libaccelerate_runtime.so", libraries)
    if "not found" in libraries:
        fail("train misses libraries at run time", libraries)

    env = {"OMP_NUM_THREADS": "1"}
    single = run([train, "64", "2"], timeout=240, env=env).stdout
    ranks = run([os.path.join(prefix, "bin", "accel"), "launch", "--num_processes", "2", "--main_process_port",
                 "0", train, "32", "2"], timeout=240, env=env).stdout
    print(ranks, end="")
    plain = losses(single).get(0, {})
    distributed = losses(ranks)
    steps = sorted(plain)
    if len(steps) < 4:
        fail("the single-process run printed fewer than four steps", single)
    if not distributed:
        fail("the 2-rank run printed no step line", ranks)
    worst = 0.0  # the largest relative difference seen: the measured spread behind the rtol
    for rank, values in sorted(distributed.items()):
        if sorted(values) != steps:
            fail(f"rank {rank} printed steps {sorted(values)}, the single-process run {steps}", ranks)
        for step in steps:
            if not math.isfinite(values[step]):
                fail(f"rank {rank} step {step}: loss {values[step]}", ranks)
            relative = abs(values[step] - plain[step]) / abs(plain[step])
            worst = max(worst, relative)
            if not relative <= 1e-5:
                fail(f"step {step}: 2 ranks {values[step]!r} vs single process {plain[step]!r} (rtol 1e-5)", ranks)
    report_spread("2 ranks against the single-process run", worst, 1e-5)
    if not plain[steps[-1]] < 0.5 * plain[steps[0]]:
        fail(f"the loss did not fall: step {steps[0]} {plain[steps[0]]} -> step {steps[-1]} {plain[steps[-1]]}")
    mismatch(options, prefix, project)
    print(f"install_test: the installed package built train; on 2 ranks its loss matches the single-process "
          f"run at every printed step (largest relative difference {worst:.2e}, rtol 1e-5): {plain[steps[0]]:.6g} -> {plain[steps[-1]]:.6g}")


def mismatch(options, prefix, project):
    """A package recorded as built against another Torch refuses this one, naming both versions."""
    other = os.path.join(options.work, "prefix-other-torch")
    shutil.copytree(prefix, other, symlinks=True)
    config = os.path.join(other, "lib", "cmake", "AccelerateCpp", "AccelerateCppConfig.cmake")
    with open(config) as file:
        text = file.read()
    recorded = re.search(r'set\(AccelerateCpp_TORCH_VERSION "([^"]+)"\)', text)
    if not recorded:
        fail(f"{config} records no Torch version")
    with open(config, "w") as file:
        file.write(text.replace(recorded.group(0), 'set(AccelerateCpp_TORCH_VERSION "1.13.1")'))
    result = run([options.cmake, "-S", project, "-B", os.path.join(options.work, "build-other-torch"), "-G",
                  options.generator, f"-DCMAKE_PREFIX_PATH={other}", "-Wno-dev"], check=False)
    message = " ".join(result.stdout.split())
    if result.returncode == 0 or not ("built against Torch 1.13.1" in message
                                      and f"uses Torch {recorded.group(1)}" in message):
        fail("configuring against a package built for another Torch did not fail naming both versions",
             result.stdout)
    shutil.rmtree(other)
    print(f"install_test: a package built for Torch 1.13.1 refuses Torch {recorded.group(1)} at configure time")


def rebuild(options):
    project = os.path.join(options.work, "project")
    if not os.path.exists(os.path.join(options.work, "build", "train")):
        fail(f"{options.work} has no built project; run the `package` step first")

    def expect(what, rewrites, check=True):
        result = build(options, check=check)
        if bool(REWRITE.search(result.stdout)) != rewrites:
            fail(f"{what}: the rewrite {'did not run' if rewrites else 'ran'}", result.stdout)
        print(f"install_test: {what}: the rewrite {'ran' if rewrites else 'did not run'}")
        return result

    build(options)  # brings the build up to date (a no-op after `package`)
    expect("nothing changed", False)
    time.sleep(1.1)  # a new mtime, also on file systems with 1 s resolution
    os.utime(os.path.join(project, "unrelated.h"))
    expect("unrelated.h touched", False)
    os.utime(os.path.join(project, "model.h"))
    expect("model.h (included by train.cpp) touched", True)

    # A line that the rewriter (Clang) skips but the compiler does not, after lines the rewrite adds: a missing
    # header, which GCC reports before it parses anything (the whole file is lexed first), keeping this fast.
    if options.cxx_id == "Clang":
        print("install_test: the compiler is Clang, like the rewriter; the planted-error check needs another "
              "compiler and is skipped")
        return
    source = os.path.join(project, "train.cpp")
    with open(source) as file:
        text = file.read()
    planted_line = text.count("\n") + 2
    with open(source, "w") as file:
        file.write(text + "#ifndef __clang__\n#include \"planted_missing_header.h\"\n#endif\n")
    try:
        result = expect("train.cpp edited", True, check=False)
        if result.returncode == 0:
            fail("the build with a planted error succeeded", result.stdout)
        where = f"{source}:{planted_line}:"
        if where not in result.stdout or "planted_missing_header.h" not in result.stdout:
            fail(f"the planted error is not reported at {where}", result.stdout)
        with open(os.path.join(options.work, "build", "train.accelerate", "train.cpp")) as file:
            physical = file.read().split("\n").index('#include "planted_missing_header.h"') + 1
        if physical == planted_line:
            fail("the rewritten copy has the planted line at the same line; the check proves nothing")
        print(f"install_test: the planted error is reported at train.cpp:{planted_line} (line {physical} of the "
              f"rewritten copy)")
    finally:
        with open(source, "w") as file:
            file.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["package", "rebuild"])
    parser.add_argument("--cmake", required=True)
    parser.add_argument("--build-dir", required=True, help="the accelerate-cpp build to install")
    parser.add_argument("--project", required=True, help="the user project's sources")
    parser.add_argument("--work", required=True, help="where the prefix, project copy and its build go")
    parser.add_argument("--generator", required=True)
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--cxx-id", default="")
    parser.add_argument("--launcher", default="")
    options = parser.parse_args()
    (package if options.step == "package" else rebuild)(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
