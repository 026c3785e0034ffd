#!/usr/bin/env bash
# Rewrite time: accel-rewrite (parse, rewrite, re-parse of its output) against clang++-19 -fsyntax-only on the
# same file with the same flags, without and with a precompiled <torch/torch.h>.
#
#   scripts/bench-rewrite.sh CORPUS_DIR [ID...]
#
# The files are the public study set's (extracted into CORPUS_DIR by scripts/rewriter-coverage.sh, whose
# table of entries and flags this script reads) and this repository's test/fixtures (ids fx:<name>); with IDs
# only those run. Each command runs RUNS times (default 3); the table gives the median CPU seconds (user +
# sys, which another load on the machine changes less than wall time) and the median wall seconds. The
# clang PCH of <torch/torch.h> is built once (and kept for later runs), with the same flags, into
# OUT/torch.pch, and passed to both tools with -include-pch; the outputs of accel-rewrite with and without it
# are compared byte for byte.
# Environment: TOOL (default build/bin/accel-rewrite), CXX (default clang++-19), RUNS, OUT (default
# CORPUS_DIR/bench), PCH (0 to skip the PCH columns).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
corpus=$(cd "$1" && pwd) || { echo "bench-rewrite: no corpus folder '$1'; run scripts/rewriter-coverage.sh $1 first" >&2; exit 2; }
shift
TOOL=${TOOL:-$root/build/bin/accel-rewrite}
CXX=${CXX:-clang++-19}
RUNS=${RUNS:-3}
OUT=${OUT:-$corpus/bench}
PCH=${PCH:-1}
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
    /usr/bin/time -f "%U %S %e" -o "$OUT/$label.t" "$@" >"$OUT/$label.stdout" 2>"$OUT/$label.stderr" || return 1
    tail -1 "$OUT/$label.t" >>"$OUT/$label.times"
  done
  echo "$(awk '{ print $1 + $2 }' "$OUT/$label.times" | median) $(awk '{ print $3 }' "$OUT/$label.times" | median)"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

pch_flags=()
if [[ "$PCH" != 0 && -f "$OUT/torch.pch" ]]; then
  # Reused: clang refuses a PCH whose headers changed since it was built, so a stale one fails loudly.
  pch_flags=(-include-pch "$OUT/torch.pch")
elif [[ "$PCH" != 0 ]]; then
  # The PCH is built once, with the flags every file uses.
  start=$(date +%s.%N)
  if ! "$CXX" -x c++-header "${FLAGS[@]}" "$torch_include/torch/csrc/api/include/torch/torch.h" \
    -o "$OUT/torch.pch" 2>"$OUT/pch.stderr"; then
    echo "bench-rewrite: building the PCH failed (see $OUT/pch.stderr)" >&2
    exit 1
  fi
  echo "PCH of <torch/torch.h> built in $(echo "$(date +%s.%N) - $start" | bc | xargs printf '%.1f') s (wall): $OUT/torch.pch" >&2
  pch_flags=(-include-pch "$OUT/torch.pch")
fi

echo "| file | clang -fsyntax-only CPU s | accel-rewrite CPU s | ratio | with PCH: clang CPU s | with PCH: accel-rewrite CPU s | ratio | wall s (clang / accel-rewrite / clang PCH / accel-rewrite PCH) | same output with PCH |"
echo "|---|---|---|---|---|---|---|---|---|"
while IFS='|' read -r id repo commit file paths extra; do
  [[ -z "$id" ]] && continue
  if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx "$id"; then continue; fi
  if [[ "$id" == fx:* ]]; then src=$file; else src="$corpus/$id/$file"; fi
  [[ -f "$src" ]] || { echo "| $id | missing: $src (run scripts/rewriter-coverage.sh first) |"; continue; }
  read -r -a more <<<"${extra//@/$corpus/$id}"
  tag=${id/:/_}
  clang=$(time_runs "$tag.clang" "$CXX" -fsyntax-only "${FLAGS[@]}" "${more[@]}" "$src") || clang="failed failed"
  rewrite=$(time_runs "$tag.rewrite" "$TOOL" "$src" -o "$OUT/$tag.out" -- "${FLAGS[@]}" "${more[@]}") ||
    rewrite="failed failed"
  read -r clang_cpu clang_wall <<<"$clang"
  read -r rewrite_cpu rewrite_wall <<<"$rewrite"
  pch_cols="- | - | -"
  walls="$clang_wall / $rewrite_wall"
  same="-"
  if [[ "$PCH" != 0 ]]; then
    clang_pch=$(time_runs "$tag.clang-pch" "$CXX" -fsyntax-only "${FLAGS[@]}" "${pch_flags[@]}" "${more[@]}" "$src") ||
      clang_pch="failed failed"
    rewrite_pch=$(time_runs "$tag.rewrite-pch" "$TOOL" "$src" -o "$OUT/$tag.pch.out" -- "${FLAGS[@]}" \
      "${pch_flags[@]}" "${more[@]}") || rewrite_pch="failed failed"
    read -r clang_pch_cpu clang_pch_wall <<<"$clang_pch"
    read -r rewrite_pch_cpu rewrite_pch_wall <<<"$rewrite_pch"
    pch_cols="$clang_pch_cpu | $rewrite_pch_cpu | $(ratio "$rewrite_pch_cpu" "$clang_pch_cpu")"
    walls+=" / $clang_pch_wall / $rewrite_pch_wall"
    if cmp -s "$OUT/$tag.out" "$OUT/$tag.pch.out"; then same=yes; else same=NO; fi
  fi
  echo "| $id | $clang_cpu | $rewrite_cpu | $(ratio "$rewrite_cpu" "$clang_cpu") | $pch_cols | $walls | $same |"
done <<<"$entries"
