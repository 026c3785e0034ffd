#!/usr/bin/env python3
"""Keeps an example's README true to the rewriter: its ```diff block must make the changes that turn the source
into the rewritten copy accelerate_target() wrote (less its #line directives).

  readme_diff.py --readme examples/cnn/README.md --source examples/cnn/train.cpp \
                 --rewritten build/examples/cnn.accelerate/cnn/train.cpp [--label examples/cnn/train.cpp] [--update]

The check compares the removed and added lines, in order (hunk boundaries may differ between diff tools). With
--update, the block is replaced by a fresh unified diff instead.
"""
import argparse
import difflib
import re
import sys

BLOCK = re.compile(r"```diff\n(.*?)```\n", re.S)


def changed_lines(diff_text):
    return [line for line in diff_text.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--rewritten", required=True)
    parser.add_argument("--label", help="the file name the diff shows (default: --source)")
    parser.add_argument("--update", action="store_true", help="rewrite the README's diff block")
    options = parser.parse_args()

    with open(options.source) as file:
        source = file.read().splitlines(keepends=True)
    try:
        with open(options.rewritten) as file:
            rewritten = [line for line in file.read().splitlines(keepends=True) if not line.startswith("#line ")]
    except FileNotFoundError:
        sys.exit(f"readme_diff: FAILED: {options.rewritten} does not exist; build the example first")
    label = options.label or options.source
    fresh = "".join(difflib.unified_diff(source, rewritten, label, label))
    with open(options.readme) as file:
        readme = file.read()
    blocks = BLOCK.findall(readme)
    if len(blocks) != 1:
        sys.exit(f"readme_diff: FAILED: {options.readme} has {len(blocks)} ```diff blocks; expected one")

    if options.update:
        readme = BLOCK.sub(lambda _: "```diff\n" + fresh + "```\n", readme, count=1)
        with open(options.readme, "w") as file:
            file.write(readme)
        print(f"readme_diff: updated {options.readme} ({len(changed_lines(fresh))} changed lines)")
        return 0

    shown, actual = changed_lines(blocks[0]), changed_lines(fresh)
    if shown != actual:
        report = "\n".join(difflib.unified_diff(shown, actual, "README", "rewrite", lineterm=""))
        print(f"readme_diff: FAILED: the diff in {options.readme} is not what the rewriter makes of {options.source} "
              f"now. Regenerate it with:\n  {' '.join(sys.argv)} --update\n{report}")
        return 1
    print(f"readme_diff: {options.readme} shows the current rewrite of {options.source} ({len(actual)} changed lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
