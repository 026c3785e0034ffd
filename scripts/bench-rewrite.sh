#!/usr/bin/env bash
# Rewrite time: accel-rewrite (the parse over the file's precompiled preamble, the passes, the compile check of
# its output over the same preamble) against clang++-19 -fsyntax-only on the same file with the same flags
# and a precompiled <torch/torch.h>.
#
#   scripts/bench-rewrite.sh CORPUS_DIR [ID...]
#
# The files are the public study set's (extracted into CORPUS_DIR by scripts/rewriter-coverage.sh, whose
# table of entries and flags this script reads) and this repository's test/fixtures (ids fx:<name>); with IDs
# only those run. Each command runs RUNS times (default 3); the table gives the median CPU seconds (user +
# sys, which another load on the machine changes less than wall time) and the median wall seconds. The
# clang PCH of <torch/torch.h> is built once (and kept for later runs), with the same flags, into
# OUT/torch.pch, and given to clang with -include-pch. accel-rewrite runs with --preamble-cache: "cold" with
# an empty cache each time (the first file of a cold build: the preamble is built and kept), "warm" with the
# preamble the cold runs kept (a rebuild); "cold, given the PCH" with an empty cache and the baseline's
# -include-pch (the first file of a cold build whose compile commands give a clang PCH: the preamble extends
# it). The baselines: clang with the PCH, and clang without it (a cold build with no PCH). With WHOLE=1 (the
# default) accel-rewrite also runs once with --no-preamble (two whole parses, as before the preamble); the
# outputs of all the accel-rewrite runs are compared byte for byte.
# Environment: TOOL (default build/bin/accel-rewrite), CXX (default clang++-19), RUNS, COLD_RUNS (default
# RUNS), OUT (default CORPUS_DIR/bench), WHOLE (0 to skip the --no-preamble run).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
corpus=$(cd "$1" && pwd) || { echo "bench-rewrite: no corpus folder '$1'; run scripts/rewriter-coverage.sh $1 first" >&2; exit 2; }
shift
TOOL=${TOOL:-$root/build/bin/accel-rewrite}
CXX=${CXX:-clang++-19}
RUNS=${RUNS:-3}
OUT=${OUT:-$corpus/bench}
WHOLE=${WHOLE:-1}
COLD_RUNS=${COLD_RUNS:-$RUNS}
[[ -x "$TOOL" ]] || { echo "bench-rewrite: no accel-rewrite at $TOOL; build it or set TOOL" >&2; exit 2; }
command -v "$CXX" >/dev/null || { echo "bench-rewrite: $CXX not found; install clang-19 or set CXX" >&2; exit 2; }
venv=$("$root/scripts/bootstrap.sh" --print-venv)
torch_include=$(ls -d "$venv"/lib/python3*/site-packages/torch/include 2>/dev/null | head -1)
[[ -d "$torch_include" ]] || { echo "bench-rewrite: no torch headers under $venv; run scripts/bootstrap.sh" >&2; exit 2; }
mkdir -p "$OUT"

FLAGS=(-std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 -isystem "$torch_include" -isystem "$torch_include/torch/csrc/api/include"
  -isystem "$here/corpus/stubs")

# The entries (id|repo|commit|file|folders|flags) of scripts/rewriter-coverage.sh, then the fixtures.
entries=$(sed -n "/^ENTRIES='/,/^'/p" "$here/rewriter-coverage.sh" | sed '1d;$d')
for fixture in "$root"/test/fixtures/*.cpp; do
  name=$(basename "$fixture" .cpp)
  entries+=$'\n'"fx:$name|||$fixture||-I$root/test/fixtures"
done

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# time_runs LABEL command...: prints "cpu wall" medians of RUNS runs; fails if any run fails.
time_runs() {
  local label=$1 i
  shift
  : >"$OUT/$label.times"
  for ((i = 0; i < RUNS; i++)); do
    /usr/bin/time -f "%U %S %e" -o "$OUT/$label.t" "$@" </dev/null >"$OUT/$label.stdout" 2>"$OUT/$label.stderr" || return 1
    tail -1 "$OUT/$label.t" >>"$OUT/$label.times"
  done
  echo "$(awk '{ print $1 + $2 }' "$OUT/$label.times" | median) $(awk '{ print $3 }' "$OUT/$label.times" | median)"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

if [[ -f "$OUT/torch.pch" ]]; then
  # Reused: clang refuses a PCH whose headers changed since it was built, so a stale one fails loudly.
  :
else
  # The PCH is built once, with the flags every file uses.
  start=$(date +%s.%N)
  if ! "$CXX" -x c++-header "${FLAGS[@]}" "$torch_include/torch/csrc/api/include/torch/torch.h" \
    -o "$OUT/torch.pch" 2>"$OUT/pch.stderr"; then
    echo "bench-rewrite: building the PCH failed (see $OUT/pch.stderr)" >&2
    exit 1
  fi
  echo "PCH of <torch/torch.h> built in $(echo "$(date +%s.%N) - $start" | bc | xargs printf '%.1f') s (wall): $OUT/torch.pch" >&2
fi
pch_flags=(-include-pch "$OUT/torch.pch")

echo "| file | clang + PCH CPU s | accel-rewrite warm CPU s | **warm ratio** | accel-rewrite cold, given the PCH, CPU s | **cold ratio, same PCH** | accel-rewrite cold CPU s | cold ratio | clang, no PCH, CPU s | cold / no PCH | --no-preamble CPU s | wall s (clang + PCH / warm / cold, given the PCH / cold / clang / --no-preamble) | same output |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
while IFS='|' read -r id repo commit file paths extra; do
  [[ -z "$id" ]] && continue
  if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx "$id"; then continue; fi
  if [[ "$id" == fx:* ]]; then src=$file; else src="$corpus/$id/$file"; fi
  [[ -f "$src" ]] || { echo "| $id | missing: $src (run scripts/rewriter-coverage.sh first) |"; continue; }
  read -r -a more <<<"${extra//@/$corpus/$id}"
  tag=${id/:/_}
  cache="$OUT/$tag.preambles"
  clang_pch=$(time_runs "$tag.clang-pch" "$CXX" -fsyntax-only "${FLAGS[@]}" "${pch_flags[@]}" "${more[@]}" "$src") ||
    clang_pch="failed failed"
  cold=$(RUNS=$COLD_RUNS time_runs "$tag.cold" bash -c 'rm -rf "$1" && shift && exec "$@"' cold "$cache" \
    "$TOOL" --preamble-cache="$cache" "$src" -o "$OUT/$tag.cold.out" -- "${FLAGS[@]}" "${more[@]}") || cold="failed failed"
  cold_pch=$(RUNS=$COLD_RUNS time_runs "$tag.cold-pch" bash -c 'rm -rf "$1" && shift && exec "$@"' cold "$cache.pch" \
    "$TOOL" --preamble-cache="$cache.pch" "$src" -o "$OUT/$tag.cold-pch.out" -- "${FLAGS[@]}" "${pch_flags[@]}" \
    "${more[@]}") || cold_pch="failed failed"
  warm=$(time_runs "$tag.warm" "$TOOL" --preamble-cache="$cache" "$src" -o "$OUT/$tag.warm.out" -- "${FLAGS[@]}" \
    "${more[@]}") || warm="failed failed"
  clang=$(RUNS=1 time_runs "$tag.clang" "$CXX" -fsyntax-only "${FLAGS[@]}" "${more[@]}" "$src") || clang="failed failed"
  read -r clang_pch_cpu clang_pch_wall <<<"$clang_pch"
  read -r cold_cpu cold_wall <<<"$cold"
  read -r cold_pch_cpu cold_pch_wall <<<"$cold_pch"
  read -r warm_cpu warm_wall <<<"$warm"
  read -r clang_cpu clang_wall <<<"$clang"
  whole_cpu="-" whole_wall="-"
  same=$(cmp -s "$OUT/$tag.cold.out" "$OUT/$tag.warm.out" && cmp -s "$OUT/$tag.cold.out" "$OUT/$tag.cold-pch.out" &&
    echo yes || echo NO)
  if [[ "$WHOLE" != 0 ]]; then
    whole=$(RUNS=1 time_runs "$tag.whole" "$TOOL" --no-preamble "$src" -o "$OUT/$tag.whole.out" -- "${FLAGS[@]}" \
      "${more[@]}") || whole="failed failed"
    read -r whole_cpu whole_wall <<<"$whole"
    cmp -s "$OUT/$tag.cold.out" "$OUT/$tag.whole.out" || same=NO
  fi
  echo "| $id | $clang_pch_cpu | $warm_cpu | $(ratio "$warm_cpu" "$clang_pch_cpu") | $cold_pch_cpu |" \
    "$(ratio "$cold_pch_cpu" "$clang_pch_cpu") | $cold_cpu | $(ratio "$cold_cpu" "$clang_pch_cpu") | $clang_cpu |" \
    "$(ratio "$cold_cpu" "$clang_cpu") | $whole_cpu |" \
    "$clang_pch_wall / $warm_wall / $cold_pch_wall / $cold_wall / $clang_wall / $whole_wall | $same |"
done <<<"$entries"
