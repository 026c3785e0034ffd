#!/usr/bin/env python3
"""Holds docs/architecture.md to the tree (ctest docs.architecture_matches_tree).

Checks that every folder the page names exists, that every top-level folder and every folder of runtime/ has a
row, that each runtime folder includes (`#include "<folder>/..."`) only the folders its row allows, and that no
hand-written source under runtime/, include/ or tools/ is over 1,000 lines unless the page's "Files over 1,000
lines" section lists it (passes/ too), and that no rewrite pass includes another pass's header or the pass table
(passes/Registry.h: only the table itself and the accelerator pass, which reads its rows). Prints every problem,
one a line, and exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "architecture.md")
LINE_LIMIT = 1000
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu")


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line and os.path.exists(os.path.join(ROOT, line))]


def table_rows(text, heading):
    """The rows `| `folder/` | ... |` of the table under `heading`, as lists of cells."""
    section = text.split(heading, 1)
    if len(section) < 2:
        return None
    rows = []
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and cells:
            rows.append(cells)
    return rows


def folder_of(cell):
    match = re.match(r"`([^`]+/)`", cell)
    return match.group(1) if match else None


def main():
    text = open(PAGE, encoding="utf-8").read()
    files = tracked_files()
    problems = []

    # Every folder named in backticks exists.
    for name in sorted(set(re.findall(r"`((?:[a-z_]+/)+)`", text))):
        if not os.path.isdir(os.path.join(ROOT, name)):
            problems.append(f"docs/architecture.md names `{name}`, which is not a folder of the tree")

    top_rows = table_rows(text, "## Top-level folders")
    runtime_rows = table_rows(text, "## The runtime's folders")
    if top_rows is None or runtime_rows is None:
        print("docs/architecture.md: the sections '## Top-level folders' and '## The runtime's folders' are missing")
        return 1

    described_top = {folder_of(row[0]) for row in top_rows}
    for top in sorted({f.split("/", 1)[0] + "/" for f in files if "/" in f and not f.startswith(".")}):
        if top not in described_top:
            problems.append(f"top-level folder {top} has no row in docs/architecture.md's 'Top-level folders'")

    allowed = {}
    folders = []
    for row in runtime_rows:
        folder = folder_of(row[0])
        if not folder or not folder.startswith("runtime/") or len(row) < 3:
            problems.append(f"docs/architecture.md: a runtime row does not read | `runtime/<folder>/` | owns | may include |: {row}")
            continue
        name = folder[len("runtime/"):-1]
        folders.append(name)
        allowed[name] = set(re.findall(r"`([a-z_]+)`", row[2]))
    for name in folders:
        if "every folder above" in " ".join(r[2] for r in runtime_rows if folder_of(r[0]) == f"runtime/{name}/"):
            allowed[name] = set(folders[: folders.index(name)])
    actual = sorted(d for d in os.listdir(os.path.join(ROOT, "runtime")) if os.path.isdir(os.path.join(ROOT, "runtime", d)))
    for name in actual:
        if name not in allowed:
            problems.append(f"runtime/{name}/ has no row in docs/architecture.md's 'The runtime's folders'")

    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
    for path in files:
        parts = path.split("/")
        if len(parts) < 3 or parts[0] != "runtime" or parts[1] not in allowed or not path.endswith(SOURCE_SUFFIXES):
            continue
        if "gloo_shim" in parts:
            continue
        own = parts[1]
        with open(os.path.join(ROOT, path), encoding="utf-8") as source:
            for number, line in enumerate(source, 1):
                match = include.match(line)
                if match and match.group(1) in allowed and match.group(1) != own and match.group(1) not in allowed[own]:
                    problems.append(f"{path}:{number}: runtime/{own}/ includes runtime/{match.group(1)}/, which its "
                                    f"row in docs/architecture.md does not allow")

    exceptions_section = text.split("## Files over 1,000 lines", 1)
    exceptions = set(re.findall(r"^- `([^`]+)`", exceptions_section[1], re.M)) if len(exceptions_section) > 1 else set()
    for path in files:
        if path.split("/", 1)[0] not in ("runtime", "include", "tools", "passes") or not path.endswith(SOURCE_SUFFIXES):
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as source:
            lines = sum(1 for _ in source)
        if lines > LINE_LIMIT and path not in exceptions:
            problems.append(f"{path} has {lines} lines (limit {LINE_LIMIT}): split it by concern, or list it with "
                            f"the reason under docs/architecture.md's 'Files over 1,000 lines'")
    for path in sorted(exceptions):
        if path not in files:
            problems.append(f"docs/architecture.md lists `{path}` as over 1,000 lines, but there is no such file")

    # A pass includes the vocabulary (passes/Pass.h) and the facts module, not another pass nor the table.
    pass_include = re.compile(r'^\s*#\s*include\s+"passes/([A-Za-z]+Pass|Registry)\.h"')
    for path in files:
        if not path.startswith("passes/") or not path.endswith(SOURCE_SUFFIXES):
            continue
        own = os.path.splitext(os.path.basename(path))[0]
        with open(os.path.join(ROOT, path), encoding="utf-8") as source:
            for number, line in enumerate(source, 1):
                match = pass_include.match(line)
                if not match or match.group(1) == own or own == "Registry":
                    continue
                if match.group(1) == "Registry" and own == "AcceleratorPass":
                    continue
                problems.append(f"{path}:{number}: includes passes/{match.group(1)}.h; a pass includes passes/Pass.h "
                                f"and the facts module (passes/TrainingCode.h), never another pass or the table "
                                f"(docs/development.md, 'Adding a pass')")

    for problem in problems:
        print(problem)
    if not problems:
        print(f"docs/architecture.md matches the tree ({len(folders)} runtime folders, {len(described_top)} "
              f"top-level folders)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
