#!/usr/bin/env bash
# Runs the runnable training loops of the public study set as the original on 1 process and as accel-rewrite's
# output on 2 (docs/rewriter-coverage.md, "Trains like the original on 2 processes").
#
#   scripts/corpus-train.sh CORPUS_DIR [ID...]     after scripts/rewriter-coverage.sh CORPUS_DIR
#
# 1. installs the runtime of build/ into CORPUS_DIR/train/prefix (cmake --install);
# 2. copies each rewritten file CORPUS_DIR/out/ID.cpp to CORPUS_DIR/train/src/ID_accel.cpp, halving the batch
#    where the program has it as a constant (the batch becomes the per-process batch, docs/getting-started.md:
#    halving it keeps the original's global batch), and builds ID_plain (the corpus file, libtorch) and
#    ID_accel (the runtime) with scripts/corpus/train/CMakeLists.txt;
# 3. makes seeded synthetic data in the formats the programs read (MNIST IDX files, a text file);
# 4. for each ID and mode: the original with OMP_NUM_THREADS=1, then `accel launch --num_processes 2` with
#    ACCELERATE_DEBUG_MODE=true ACCELERATE_DEBUG_CHECKSUM_EVERY=1 (replicas compared at every step), each
#    stopped after the entry's seconds. Mode "seeded" preloads scripts/corpus/train/seed.cpp (at::manual_seed(7)
#    before main, in every process alike); "as-written" runs the program as it is.
#
# Logs: CORPUS_DIR/train/run/ID/.../{plain,accel}.MODE.log, each rank's output in logs.MODE/attempt_0/RANK/.
# Needs: numpy (make_mnist.py), libjsoncpp-dev (D1), cmake, ninja. Nothing of the corpus is copied into this
# repository.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
corpus=$(cd "$1" && pwd) || { echo "corpus-train: no folder '$1'; run scripts/rewriter-coverage.sh $1 first" >&2; exit 2; }
shift
train=$corpus/train
B=$train/build
accel=$root/build/bin/accel
[[ -x "$accel" ]] || { echo "corpus-train: no $accel; build the project first (make build)" >&2; exit 2; }
venv=$("$root/scripts/bootstrap.sh" --print-venv)

# id | seconds | modes | halve the batch (sed, on the rewritten file) | working folder below run/ID | data | args
ENTRIES='
E1|240|as-written|s/const int64_t kTrainBatchSize = 64;/const int64_t kTrainBatchSize = 32;/|.|mnist:data|
E2|200|as-written|s/const int64_t kBatchSize = 64;/const int64_t kBatchSize = 32;/|.|mnist:data|--epochs 1
E3|120|seeded as-written||.||
C1|120|seeded as-written||.||
C4|300|seeded||w/x/y/z|text:../../../../data/penntreebank|
K1|240|seeded|s/accelerate::DataLoaderOptions(64)/accelerate::DataLoaderOptions(32)/|w|mnist:../data|
D1|150|as-written|s/int64_t batch_size = 8;/int64_t batch_size = 4;/|.||
'

mkdir -p "$train/src" "$train/run" "$train/data"
cmake --install "$root/build" --prefix "$train/prefix" >/dev/null
[[ -f "$train/data/train-images-idx3-ubyte" ]] || "$venv/bin/python" "$here/corpus/train/make_mnist.py" "$train/data"
if [[ ! -f "$train/libseed.so" ]]; then
  torch_dir=$(find "$venv"/lib -maxdepth 3 -type d -path "*/site-packages/torch" | head -1)
  g++ -std=c++17 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 -I"$torch_dir/include" "$here/corpus/train/seed.cpp" \
    -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" -lc10 -ltorch_cpu -o "$train/libseed.so"
fi
# D1 reads its dataset class from the repository's src/utils.cpp, which scripts/rewriter-coverage.sh extracts.
[[ -f "$corpus/D1/src/utils.cpp" ]] || [[ $# -gt 0 && ! " $* " == *" D1 "* ]] ||
  { echo "corpus-train: no $corpus/D1/src/utils.cpp; extract D1 again (rm -r $corpus/D1; scripts/rewriter-coverage.sh $corpus D1)" >&2; exit 2; }

# Runs a command in a folder, its output and exit status in a log there.
run_logged() { # dir log command...
  local dir=$1 log=$2 rc=0
  shift 2
  (cd "$dir" && "$@") >"$dir/$log" 2>&1 || rc=$?
  echo "exit $rc" >>"$dir/$log"
}

wanted() { [[ $# -eq 0 ]] || printf '%s\n' "$@" | grep -qx "$id"; }
targets=()
while IFS='|' read -r id secs modes halve cwd data args; do
  [[ -z "$id" ]] && continue
  wanted "$@" || continue
  if [[ -n "$halve" ]]; then
    sed "$halve" "$corpus/out/$id.cpp" >"$train/src/${id}_accel.cpp"
    cmp -s "$corpus/out/$id.cpp" "$train/src/${id}_accel.cpp" &&
      { echo "corpus-train: $id: the batch constant was not found in out/$id.cpp" >&2; exit 1; }
  else
    cp "$corpus/out/$id.cpp" "$train/src/${id}_accel.cpp"
  fi
  targets+=("${id}_plain" "${id}_accel")
done <<<"$ENTRIES"
cmake -S "$here/corpus/train" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$train/prefix" \
  -DCORPUS="$corpus" -DSOURCES="$train/src" >/dev/null
ninja -C "$B" "${targets[@]}"

while IFS='|' read -r id secs modes halve cwd data args; do
  [[ -z "$id" ]] && continue
  wanted "$@" || continue
  dir=$train/run/$id/$cwd
  mkdir -p "$dir"
  case "$data" in
    mnist:*) ln -sfn "$train/data" "$dir/${data#mnist:}" ;;
    text:*) mkdir -p "$dir/${data#text:}" && (cd "$dir/${data#text:}" && python3 "$here/corpus/train/make_text.py") ;;
  esac
  for mode in $modes; do
    pre=()
    [[ $mode == seeded ]] && pre=(env LD_PRELOAD="$train/libseed.so")
    rm -rf "$dir/logs.$mode"
    # shellcheck disable=SC2086
    run_logged "$dir" "plain.$mode.log" /usr/bin/time -f "wall %e s" "${pre[@]}" env OMP_NUM_THREADS=1 \
      timeout "$secs" stdbuf -o0 "$B/${id}_plain" $args
    # shellcheck disable=SC2086
    run_logged "$dir" "accel.$mode.log" /usr/bin/time -f "wall %e s" "${pre[@]}" env ACCELERATE_DEBUG_MODE=true \
      ACCELERATE_DEBUG_CHECKSUM_EVERY=1 timeout "$secs" "$accel" launch --num_processes 2 --main_process_port 0 \
      --log_dir "logs.$mode" stdbuf -o0 "$B/${id}_accel" $args
    echo "$id $mode: $(tail -1 "$dir/plain.$mode.log") (original, 1 process), $(tail -1 "$dir/accel.$mode.log") (rewrite, 2 processes): $dir"
  done
done <<<"$ENTRIES"
