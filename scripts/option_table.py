#!/usr/bin/env python3
"""Generates docs/api.md's table of AcceleratorOptions, and docs/cli.md's table of the launch flags that come
from the same rows, from include/accelerate/detail/option_table.h.

    python3 scripts/option_table.py            print the table
    python3 scripts/option_table.py --update   rewrite the table in docs/api.md
    python3 scripts/option_table.py --check    exit 1, with the difference, when docs/api.md's table differs

The tables sit in docs/api.md and docs/cli.md between the BEGIN and END lines below; ctest
config.OptionTableMatchesApiDoc runs --check. `accel launch` gives every row with an environment variable that
its own list of Accelerate's settings does not spell a flag of the row's name (tools/accel/LaunchSettings.cpp):
those are the rows with a variable and no config file key, our own settings.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generated_table import print_update_or_check, split_top_level  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "include", "accelerate", "detail", "option_table.h")
API_DOC = os.path.join(ROOT, "docs", "api.md")
BEGIN = ("<!-- option table: generated from include/accelerate/detail/option_table.h by "
         "`python3 scripts/option_table.py --update`; do not edit by hand -->")
END = "<!-- end of option table -->"
CLI_DOC = os.path.join(ROOT, "docs", "cli.md")
CLI_BEGIN = ("<!-- launch flags from the option table: generated from include/accelerate/detail/option_table.h by "
             "`python3 scripts/option_table.py --update`; do not edit by hand -->")
CLI_END = "<!-- end of launch flags from the option table -->"
COLUMNS = ["TYPE", "NAME", "FIELD", "DEFAULT", "ENVIRONMENT", "YAML_KEY", "CHECK", "DOC"]


def string_literal(text):
    """The value of one or more adjacent C++ string literals."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    if not parts or re.sub(r'"((?:[^"\\]|\\.)*)"', "", text).strip():
        raise ValueError(f"expected string literals, got {text!r}")
    return "".join(part.encode().decode("unicode_escape") for part in parts)


def read_rows(path=HEADER):
    with open(path) as file:
        text = re.sub(r"//[^\n]*", "", file.read())
    rows = []
    for match in re.finditer(r"\bACCELERATE_OPTION\(", text):
        depth, start = 1, match.end()
        end = start
        quoted = False
        while depth:
            char = text[end]
            if quoted:
                if char == "\\":
                    end += 1
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            end += 1
        arguments = split_top_level(text[start:end - 1], "([{<", ")]}>")
        if len(arguments) != len(COLUMNS):
            raise ValueError(f"{path}: a row has {len(arguments)} arguments, not {len(COLUMNS)}: {arguments}")
        rows.append(dict(zip(COLUMNS, arguments)))
    if not rows:
        raise ValueError(f"{path}: no ACCELERATE_OPTION rows")
    return rows


def default_text(row):
    value = row["DEFAULT"]
    if value == "std::nullopt":
        return "unset"
    if value.startswith('"'):
        literal = string_literal(value)
        return f'`"{literal}"`' if literal else "empty"
    if re.fullmatch(r"std::vector<.*>\(\)", value):
        return "none"
    duration = re.fullmatch(r"std::chrono::(minutes|seconds|milliseconds)\((\d+)\)", value)
    if duration:
        return f"{duration.group(2)} {duration.group(1)}"
    number = re.fullmatch(r"(\d+)\.0", value)
    return number.group(1) if number else value


def mapped(text):
    return "—" if text == "unmapped" else f"`{string_literal(text)}`"


def markdown(rows):
    lines = [BEGIN,
             "| setter | default | environment | config file key | meaning |",
             "|---|---|---|---|---|"]
    for row in rows:
        setter = f"`{row['NAME']}({row['TYPE'].replace('std::uint64_t', 'uint64_t').replace('std::int64_t', 'int64_t')})`"
        lines.append(f"| {setter} | {default_text(row)} | {mapped(row['ENVIRONMENT'])} | "
                     f"{mapped(row['YAML_KEY'])} | {string_literal(row['DOC'])} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def launch_flags(rows):
    lines = [CLI_BEGIN,
             "| flag | variable every rank gets | meaning |",
             "|---|---|---|"]
    for row in rows:
        if row["ENVIRONMENT"] != "unmapped" and row["YAML_KEY"] == "unmapped":
            lines.append(f"| `--{row['NAME']} VALUE` | {mapped(row['ENVIRONMENT'])} | {string_literal(row['DOC'])} |")
    lines.append(CLI_END)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the table in docs/api.md")
    parser.add_argument("--check", action="store_true", help="fail when docs/api.md's table differs")
    parser.add_argument("--header", default=HEADER)
    parser.add_argument("--doc", default=API_DOC)
    parser.add_argument("--cli-doc", default=CLI_DOC)
    args = parser.parse_args()
    rows = read_rows(args.header)
    api = print_update_or_check(markdown(rows), args.doc, args.header, "option_table.py", "option table", BEGIN,
                                END, args.update, args.check)
    cli = print_update_or_check(launch_flags(rows), args.cli_doc, args.header, "option_table.py",
                                "table of launch flags from the option table", CLI_BEGIN, CLI_END, args.update,
                                args.check)
    return api or cli


if __name__ == "__main__":
    sys.exit(main())
