#!/usr/bin/env python3
"""Generates docs/passes.md's table of the rewrite passes from the passes' rows.

    python3 scripts/passes_table.py            print the table
    python3 scripts/passes_table.py --update   rewrite the table in docs/passes.md
    python3 scripts/passes_table.py --check    exit 1, with the difference, when docs/passes.md's table differs

passes/Passes.def is the one list of the passes, in the order they run: `ACCELERATE_PASS(Row)` names the
function `PassInfo Row()` that the pass's own file (passes/<Name>Pass.cpp) defines as `return {...};`. Each
row gives, in PassInfo's order, the pass's name, rule, Summary ("rewrites"), OnByDefault, WhenNothingFound, LeavesAlone ("leaves alone")
and TurnedOnBy ("on" for a pass off by default). The table sits in docs/passes.md between the BEGIN and END
lines below; the lit test test/passes/passes-table.cpp runs --check.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generated_table import STRING, print_update_or_check, split_top_level  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGISTRY = os.path.join(ROOT, "passes", "Passes.def")
PASSES_DOC = os.path.join(ROOT, "docs", "passes.md")
BEGIN = ("<!-- passes table: generated from passes/Passes.def and the passes' rows by "
         "`python3 scripts/passes_table.py --update`; do not edit by hand -->")
END = "<!-- end of passes table -->"
# PassInfo's fields, in the order a row of the registry gives them (passes/Registry.h); a row may leave out
# the last ones.
FIELDS = ["Name", "MakeRule", "Summary", "OnByDefault", "WhenNothingFound", "LeavesAlone", "TurnedOnBy",
          "UsesAccelerator", "UsesAcceleratorInMain", "AcceleratorOptions", "Setting"]


def without_comments(text):
    """`text` without its // and /* */ comments (string literals kept as they are)."""
    return re.sub(STRING + r"|//[^\n]*|/\*.*?\*/",
                  lambda match: match.group(0) if match.group(0).startswith('"') else " ", text, flags=re.S)


def closing(text, start):
    """The index just past the bracket that closes the one at `text[start]`, skipping string literals."""
    depth, index = 0, start
    while True:
        char = text[index]
        if char == '"':
            index = re.compile(STRING).match(text, index).end()
            continue
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1


def string_value(text, where):
    """The value of one or more adjacent C++ string literals; `{}` is the empty string."""
    if text == "{}":
        return ""
    parts = re.findall(STRING, text)
    if not parts or re.sub(STRING, "", text).strip():
        raise ValueError(f"{where}: expected string literals, got {text!r}")
    return "".join(re.sub(r"\\(.)", r"\1", part[1:-1]) for part in parts)


def row_texts(path):
    """(where, braced row) for each `ACCELERATE_PASS(Row)` of `path`, in its order: the list `PassInfo Row()`
    returns in the passes/ file that defines it."""
    with open(path) as file:
        names = re.findall(r"^ACCELERATE_PASS\((\w+)\)", without_comments(file.read()), re.M)
    if not names:
        raise ValueError(f"{path}: no ACCELERATE_PASS(Row) line")
    folder = os.path.dirname(path)
    sources = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".cpp"):
            with open(os.path.join(folder, name)) as file:
                sources[name] = without_comments(file.read())
    texts = []
    for row_name in names:
        found = [(name, match) for name, text in sources.items()
                 for match in [re.search(r"\bPassInfo\s+" + row_name + r"\s*\(\s*\)\s*\{\s*return\s*\{", text)]
                 if match]
        if len(found) != 1:
            raise ValueError(f"{path}: ACCELERATE_PASS({row_name}) is defined {len(found)} times as "
                             f"`PassInfo {row_name}() {{ return {{...}}; }}` in {folder}")
        name, match = found[0]
        start = match.end() - 1
        texts.append((os.path.join("passes", name), sources[name][start:closing(sources[name], start)]))
    return texts


def read_rows(path=REGISTRY):
    rows = []
    for where_file, item in row_texts(path):
        if not (item.startswith("{") and item.endswith("}")):
            raise ValueError(f"{where_file}: a row of the pass table is not a braced list: {item!r}")
        values = split_top_level(item[1:-1])
        if not 3 <= len(values) <= len(FIELDS):
            raise ValueError(f"{where_file}: a row has {len(values)} fields, not 3 to {len(FIELDS)}: {values}")
        row = dict(zip(FIELDS, values))
        where = f"{where_file}, pass {row['Name']}"
        for field in ("Name", "Summary", "WhenNothingFound", "LeavesAlone", "TurnedOnBy"):
            row[field] = string_value(row.get(field, "{}"), where)
        on = row.get("OnByDefault", "true")
        if on not in ("true", "false"):
            raise ValueError(f"{where}: OnByDefault is {on!r}, not true or false")
        row["OnByDefault"] = on == "true"
        if not row["OnByDefault"] and not row["TurnedOnBy"]:
            raise ValueError(f"{where}: off by default, but TurnedOnBy does not say what turns it on")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: the pass table has no rows")
    return rows


def cell(text):
    """`text` as a table cell: `|` escaped, and outside code spans `<` and `>` (which would open an HTML tag)."""
    if not text:
        return "—"
    spans = text.replace("|", "\\|").split("`")
    for index in range(0, len(spans), 2):
        spans[index] = spans[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(spans)


def markdown(rows):
    lines = [BEGIN,
             "| pass | rewrites | leaves alone, and says so | on |",
             "|---|---|---|---|"]
    for row in rows:
        on = "yes" if row["OnByDefault"] else f"no: {row['TurnedOnBy']}"
        lines.append(f"| `{row['Name']}` | {cell(row['Summary'])} | {cell(row['LeavesAlone'])} | {cell(on)} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the table in docs/passes.md")
    parser.add_argument("--check", action="store_true", help="fail when docs/passes.md's table differs")
    parser.add_argument("--registry", default=REGISTRY)
    parser.add_argument("--doc", default=PASSES_DOC)
    args = parser.parse_args()
    table = markdown(read_rows(args.registry))
    return print_update_or_check(table, args.doc, args.registry, "passes_table.py", "passes table", BEGIN, END,
                                 args.update, args.check)


if __name__ == "__main__":
    sys.exit(main())
