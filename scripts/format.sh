#!/usr/bin/env bash
# The one list of sources clang-format-19 owns, and the two things done with it:
#   scripts/format.sh           reformat them in place (`make format`)
#   scripts/format.sh --check   fail, naming each file and line, when one differs from .clang-format (ctest format)
# Left out: the lit inputs (test/passes/, test/tidy/: their CHECK lines name line numbers) and what accel-rewrite generates
# (bench/generated/ and test/fixtures/generated/: byte-for-byte the rewriter's output, kept current by ctest
# bench.generated_up_to_date and fixtures.generated_up_to_date.*).
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-19}
if ! command -v "$CLANG_FORMAT" > /dev/null; then
  echo "format.sh: $CLANG_FORMAT is not installed (Debian: clang-format-19; scripts/bootstrap.sh installs it)" >&2
  exit 1
fi
if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  echo "format.sh: $(pwd) is not a git work tree; the list of sources is git's (git ls-files: tracked, and new files git does not ignore)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' '*.hpp' '*.cu' ':!:test/passes/**' ':!:test/tidy/**' ':!:bench/generated/**' ':!:test/fixtures/generated/**')
if [ "${1:-}" = "--check" ]; then
  if ! "$CLANG_FORMAT" --dry-run -Werror "${files[@]}"; then
    echo "format.sh: the files above differ from .clang-format; run \`make format\` (scripts/format.sh) and commit" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted as .clang-format says"
else
  "$CLANG_FORMAT" -i "${files[@]}"
fi
