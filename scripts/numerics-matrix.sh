#!/usr/bin/env bash
# The numerics matrix (docs/development.md, "Before you push"): reruns the tests that compare floating-point
# results under the settings that change results across real CPUs — ATen's CPU capability, MKL's instruction
# cap and reproducibility mode, oneDNN's ISA cap, 1 and 2 intra-op threads — and prints each test's worst
# measured spread per setting. Needs a built tree (make build); about 20 minutes on 2 cores.
#
#   scripts/numerics-matrix.sh [--build-dir DIR] [--settings a,b] [--tests REGEX] [--exclude REGEX]
#                              [--update-doc docs/development.md] [--list-settings]
#
# Exit status: 0 every test passed under every setting, 1 one failed (or none ran), 2 bad usage.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$("$REPO/scripts/bootstrap.sh" --print-venv)"
PYTHON="$VENV/bin/python"
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" "$REPO/scripts/numerics_matrix.py" --python "$PYTHON" "$@"
