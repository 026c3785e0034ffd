#!/usr/bin/env bash
# An accelerate_target() rebuild after one source changed, against a plain target's rebuild of the same source.
#
#   scripts/bench-rebuild.sh [BUILD_DIR] [FIXTURE...]
#
# For each fixture of test/fixtures (default: scheduler gan_two_optimizers mlp_sequential) the build has two
# targets over the same source: fixture_<name>, built by accelerate_target() (the rewrite, over the preamble
# accel-rewrite keeps in BUILD_DIR/accelerate-preambles, then the compile of the rewritten copy and the link),
# and fixture_<name>_plain, the plain target (the compile of the source and the link); both share the
# project's precompiled <torch/torch.h>. The script touches the source and builds one target, then the other,
# RUNS times (default 3), after one warm-up build of each, and prints the median CPU seconds (user + sys of
# the build and its children) and wall seconds of each, and their ratio.
# Environment: RUNS.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=${1:-$root/build}
[[ $# -gt 0 ]] && shift
[[ -f "$build/build.ninja" ]] || { echo "bench-rebuild: no Ninja build in '$build'; configure one (make build) first" >&2; exit 2; }
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(scheduler gan_two_optimizers mlp_sequential)
RUNS=${RUNS:-3}
# A touched source has the same text: a compiler cache would answer the compile from the last build.
export CCACHE_DISABLE=1
times=$(mktemp -d)
trap 'rm -rf "$times"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

# rebuild SOURCE TARGET: touches SOURCE, builds TARGET, appends "cpu wall" to $times/TARGET.
rebuild() {
  touch "$1"
  /usr/bin/time -f "%U %S %e" -o "$times/t" ninja -C "$build" "$2" >"$times/log" 2>&1 ||
    { echo "bench-rebuild: building $2 failed:" >&2; tail -20 "$times/log" >&2; exit 1; }
  awk '{ print $1 + $2, $3 }' "$times/t" >>"$times/$2"
}

echo "| source | plain target CPU s | accelerate_target() CPU s | **ratio** | wall s (plain / accelerate_target) | wall ratio |"
echo "|---|---|---|---|---|---|"
for name in "${names[@]}"; do
  source="$root/test/fixtures/$name.cpp"
  [[ -f "$source" ]] || { echo "bench-rebuild: no fixture $source" >&2; exit 2; }
  plain=fixture_${name}_plain accel=fixture_${name}
  rebuild "$source" "$plain"
  rebuild "$source" "$accel"
  : >"$times/$plain"
  : >"$times/$accel"
  for ((i = 0; i < RUNS; i++)); do
    rebuild "$source" "$plain"
    rebuild "$source" "$accel"
  done
  p_cpu=$(awk '{ print $1 }' "$times/$plain" | median) p_wall=$(awk '{ print $2 }' "$times/$plain" | median)
  a_cpu=$(awk '{ print $1 }' "$times/$accel" | median) a_wall=$(awk '{ print $2 }' "$times/$accel" | median)
  echo "| test/fixtures/$name.cpp | $p_cpu | $a_cpu | $(ratio "$a_cpu" "$p_cpu") | $p_wall / $a_wall | $(ratio "$a_wall" "$p_wall") |"
done
