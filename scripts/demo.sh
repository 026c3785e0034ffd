#!/usr/bin/env bash
# `make demo`: show what accel-rewrite did to examples/mlp/train.cpp, then train the result on 2 processes.
set -euo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
rewritten="$build/examples/mlp.accelerate/mlp/train.cpp"

echo "== accel-rewrite examples/mlp/train.cpp  (applied by accelerate_target() at build time)"
diff -u --label examples/mlp/train.cpp --label "rewritten" examples/mlp/train.cpp <(grep -v '^#line ' "$rewritten") || true
echo
echo "== accel launch --num_processes 2 $build/bin/mlp"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
OMP_NUM_THREADS=1 "$build/bin/accel" launch --num_processes 2 --main_process_port 0 "$build/bin/mlp" 64 3 | tee "$log"
awk '/^(\[rank0\]: )?step [0-9]+ loss/ { if (first == "") first = $NF; last = $NF; step = $(NF-2) }
     END { if (first == "") { print "demo: no loss printed"; exit 1 }
           printf "\n== 2 processes trained %d steps: loss %.4f -> %.4f (%.0f%% lower)\n", step, first, last, 100 * (1 - last / first) }' "$log"
