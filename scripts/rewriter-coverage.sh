#!/usr/bin/env bash
# Runs accel-rewrite over the public study set (shared/corpus-public.md) and prints the coverage table of
# docs/rewriter-coverage.md (all but its "trains like the original on 2 processes" column, measured by hand).
#
#   scripts/rewriter-coverage.sh CORPUS_DIR [ID...]
#
# CORPUS_DIR holds one folder per entry (E1, E2, ..., I1). An entry that is missing is extracted there from a
# local git mirror of its repository at the pinned commit (MIRRORS, default /work/.mirror, one bare or
# non-bare clone per repository, named owner+name/repo); the corpus code is never copied into this
# repository. For each file the script:
#   1. runs accel-rewrite FILE -o OUT/ID.cpp -- FLAGS (real libtorch headers, the stubs in
#      scripts/corpus/stubs for non-libtorch dependencies such as OpenCV and boost);
#   2. compiles the rewritten file on its own with clang++-19 -fsyntax-only, the same FLAGS and the runtime's
#      include directory: "compiles" in the table is this independent check, not accel-rewrite's own;
#   3. for the negative control E6, compares the output with the input byte for byte.
# Environment: TOOL (accel-rewrite; default build/bin/accel-rewrite), OUT (default CORPUS_DIR/out), CXX
# (default clang++-19), MIRRORS, PCH (a clang PCH of <torch/torch.h> built with the same flags, as
# scripts/bench-rewrite.sh builds one: passed with -include-pch to both tools, about 3x faster).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
corpus=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "rewriter-coverage: cannot create '$1'" >&2; exit 2; }
shift
TOOL=${TOOL:-$root/build/bin/accel-rewrite}
CXX=${CXX:-clang++-19}
OUT=${OUT:-$corpus/out}
MIRRORS=${MIRRORS:-/work/.mirror}
[[ -x "$TOOL" ]] || { echo "rewriter-coverage: no accel-rewrite at $TOOL; build it (ninja -C build accel-rewrite) or set TOOL" >&2; exit 2; }
command -v "$CXX" >/dev/null || { echo "rewriter-coverage: $CXX not found; install clang-19 or set CXX" >&2; exit 2; }
venv=$("$root/scripts/bootstrap.sh" --print-venv)
torch_include=$(ls -d "$venv"/lib/python3*/site-packages/torch/include 2>/dev/null | head -1)
[[ -d "$torch_include" ]] || { echo "rewriter-coverage: no torch headers under $venv; run scripts/bootstrap.sh" >&2; exit 2; }
mkdir -p "$OUT"

FLAGS=(-std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 -isystem "$torch_include" -isystem "$torch_include/torch/csrc/api/include"
  -isystem "$here/corpus/stubs")
if [[ -n "${PCH:-}" ]]; then
  [[ -f "$PCH" ]] || { echo "rewriter-coverage: no PCH file '$PCH'" >&2; exit 2; }
  FLAGS+=(-include-pch "$PCH")
fi

# id | repository | commit | file (in the repository) | folders to extract | extra flags (@ = the entry's folder)
ENTRIES='
E1|pytorch/examples|0c1654d6913f|cpp/mnist/mnist.cpp|cpp/mnist|
E2|pytorch/examples|a537659a5173|cpp/dcgan/dcgan.cpp|cpp/dcgan|
E3|pytorch/examples|71a9207d91e4|cpp/regression/regression.cpp|cpp/regression|
E4|pytorch/examples|b2832cc107c4|cpp/custom-dataset/custom-dataset.cpp|cpp/custom-dataset|
E5|pytorch/examples|7a86e715aa4f|cpp/transfer-learning/main.cpp|cpp/transfer-learning|-I@/cpp/transfer-learning
E6|pytorch/examples|ad775ace1b9d|cpp/autograd/autograd.cpp|cpp/autograd|
C1|prabhuomkar/pytorch-cpp|7a5d05726e62|tutorials/basics/linear_regression/main.cpp|tutorials/basics/linear_regression|
C2|prabhuomkar/pytorch-cpp|a336cfb90b5c|tutorials/intermediate/convolutional_neural_network/src/main.cpp|tutorials/intermediate/convolutional_neural_network|-I@/tutorials/intermediate/convolutional_neural_network/include
C4|prabhuomkar/pytorch-cpp|2eaf4c55ca3b|tutorials/intermediate/language_model/src/main.cpp|tutorials/intermediate/language_model|-I@/tutorials/intermediate/language_model/include
K1|krshrimali/Digit-Recognition-MNIST-SVHN-PyTorch-CPP|df64ca6ffa23|training.cpp|training.cpp|
K2|krshrimali/Feed-Forward-NN-Custom-Dataset-Libtorch|ada4745a415c|mnist-code.cpp|mnist-code.cpp main.h|-I@
J1|koba-jon/pytorch_cpp|7f9b8b078737|Multiclass_Classification/ResNet/src/train.cpp|Multiclass_Classification/ResNet utils|-I@/Multiclass_Classification/ResNet/src -I@/utils
J2|koba-jon/pytorch_cpp|7a7ebfe7ea3e|Generative_Modeling/DCGAN/src/train.cpp|Generative_Modeling/DCGAN utils|-I@/Generative_Modeling/DCGAN/src -I@/utils
A1|AllentDan/LibtorchSegmentation|8ad80397f23d|src/Segmentor.h|src|-x c++ -I@/src
L1h|laplaceliu/build-your-own-llm-using-cpp-and-libtorch|80878b52dc1a|chapters/chapterD_training_loop/include/training_D.h|chapters|-x c++ -include bpe_tokenizer.h -I@/chapters/chapterD_training_loop/include -I@/chapters/chapter02_text_data/include -I@/chapters/chapter03_attention/include -I@/chapters/chapter04_gpt/include -I@/chapters/chapter05_pretraining/include
L1m|laplaceliu/build-your-own-llm-using-cpp-and-libtorch|80878b52dc1a|chapters/chapterD_training_loop/src/main.cpp|chapters|-I@/chapters/chapterD_training_loop/include -I@/chapters/chapter02_text_data/include -I@/chapters/chapter03_attention/include -I@/chapters/chapter04_gpt/include -I@/chapters/chapter05_pretraining/include
Q1|Kriptics18/cpp-rl|c6f031baef00|src/day_4.cpp|src|-I@/src
D1|jiamny/Dive_into_deep_learning_with_libtorch|36b49d6324ed|src/17_Generative_adversarial_networks/GenerativeAdversarialNetwork.cpp|src/17_Generative_adversarial_networks src/utils.h src/utils.cpp|-I@/src
I1|Ipsedo/libtorch_samples|e94e03026600|src/main.cpp|src|-I@/src
'

# Extracts an entry's folders at its commit (HEAD, said so, when the mirror lacks the commit).
extract() { # id repo commit paths
  local id=$1 repo=$2 commit=$3 paths=$4 git
  [[ -d "$corpus/$id" ]] && return 0
  git="$MIRRORS/${repo/\//+}/repo"
  [[ -d "$git/.git" ]] && git="$git/.git"
  if [[ ! -d "$git" ]]; then
    echo "rewriter-coverage: $id: no mirror of $repo at $git; clone it there (or set MIRRORS), or put the files in $corpus/$id" >&2
    return 1
  fi
  if ! git --git-dir="$git" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "rewriter-coverage: $id: commit $commit is not in the mirror of $repo; using its HEAD $(git --git-dir="$git" rev-parse --short=12 HEAD)" >&2
    commit=HEAD
  fi
  mkdir -p "$corpus/$id.part"
  # shellcheck disable=SC2086
  git --git-dir="$git" archive --format=tar "$commit" -- $paths 2>>"$OUT/extract.log" | tar -x -C "$corpus/$id.part" &&
    mv "$corpus/$id.part" "$corpus/$id"
}

# The first warning or error accel-rewrite printed, without the path prefix.
first_reason() { # file [kind]
  grep -m1 -E ": (${2:-warning|error}): " "$1" | grep -v '#pragma once in main file' |
    sed -E 's/^[^ ]*: (warning|error): //' | cut -c1-240
}

echo "| id | file | rewritten | changes | not rewritten | compiles after rewrite | accel-rewrite s | note |"
echo "|---|---|---|---|---|---|---|---|"
while IFS='|' read -r id repo commit file paths extra; do
  [[ -z "$id" ]] && continue
  if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx "$id"; then continue; fi
  extract "$id" "$repo" "$commit" "$paths" || { echo "| $id | $file | - | - | - | - | - | not extracted |"; continue; }
  src="$corpus/$id/$file"
  read -r -a more <<<"${extra//@/$corpus/$id}"
  start=$(date +%s.%N)
  "$TOOL" "$src" -o "$OUT/$id.cpp" -- "${FLAGS[@]}" "${more[@]}" >"$OUT/$id.stdout" 2>"$OUT/$id.stderr"
  rc=$?
  seconds=$(echo "$(date +%s.%N) - $start" | bc | xargs printf '%.1f')
  summary=$(grep -E '^accel-rewrite: .*: [0-9]+ changes?, ' "$OUT/$id.stderr" | tail -1)
  changes=$(sed -nE 's/.*: ([0-9]+) changes?, .*/\1/p' <<<"$summary")
  missed=$(sed -nE 's/.*, ([0-9]+) not rewritten.*/\1/p' <<<"$summary")
  note=""
  if [[ $rc -ne 0 || ! -f "$OUT/$id.cpp" ]]; then
    rewritten=no compiles=- note="refused: $(first_reason "$OUT/$id.stderr" error)"
  else
    if cmp -s "$src" "$OUT/$id.cpp"; then rewritten="no (byte-identical)"; else rewritten=yes; fi
    # -iquote: the file's own "..." includes (`#include "../utils.h"`) still resolve from OUT.
    if "$CXX" -fsyntax-only "${FLAGS[@]}" "${more[@]}" -iquote "$(dirname "$src")" -I"$root/include" \
      "$OUT/$id.cpp" >"$OUT/$id.compile" 2>&1; then
      compiles=yes
    else
      compiles="NO: $(grep -m1 'error:' "$OUT/$id.compile" | cut -c1-200)"
    fi
    [[ "${missed:-0}" != 0 ]] && note="$(first_reason "$OUT/$id.stderr")"
  fi
  echo "| $id | $file | $rewritten | ${changes:-0} | ${missed:-0} | $compiles | $seconds | $note |"
done <<<"$ENTRIES"
