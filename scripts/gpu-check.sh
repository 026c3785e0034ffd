#!/usr/bin/env bash
# GPU check of accelerate-cpp (shared/DESIGN.md §5): builds the runtime against this machine's own torch (no
# rewriter, no LLVM, no tests' GoogleTest, no network) and runs the side-by-side benchmark against Hugging Face
# Accelerate and the mixed-precision GPU checks and benchmarks, writing each result to OUT_DIR as soon as it has it.
# First, the fixtures' committed rewrites (test/fixtures/generated/) against their plain originals on the GPU.
#
#   scripts/gpu-check.sh [--quick] [--only STAGE,...] [--build-dir DIR] [--jobs N] [--python PY] OUT_DIR
#
# OUT_DIR receives, in this order: environment.txt, configure.log, build.log, then one file per stage
# (fixtures.txt, side-by-side.txt/.md/.json/.png, checks.txt, cuda-graph.txt, gpt-small-losses.txt, gpt-86m.txt,
# fp8-linear.txt, data-loader.txt, fsdp-offload.txt), and summary.txt, one line per step, appended as each
# finishes. --quick keeps fixtures within 1 minute, side-by-side within 4 and the other stages within 6 (the build is
# timed separately); --only side-by-side runs just that stage. Without a GPU: the build, then fixtures and side-by-side smoke runs on the CPU.
# Exit status: 0 all passed, 1 a check failed, 2 bad usage or the build failed, 3 no CUDA device.
set -uo pipefail

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=""
BUILD_DIR="$REPO/build-gpu"
JOBS="$(nproc 2>/dev/null || echo 4)"
PYTHON="${ACCEL_PYTHON:-}"
OUT=""
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK="--quick" ;;
    --only) [ $# -ge 2 ] || usage; ONLY=",$2,"; shift ;;
    --build-dir) [ $# -ge 2 ] || usage; BUILD_DIR="$2"; shift ;;
    --jobs) [ $# -ge 2 ] || usage; JOBS="$2"; shift ;;
    --python) [ $# -ge 2 ] || usage; PYTHON="$2"; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu-check: unknown option '$1'" >&2; usage ;;
    *) [ -z "$OUT" ] || { echo "gpu-check: one OUT_DIR only (got '$OUT' and '$1')" >&2; usage; }; OUT="$1" ;;
  esac
  shift
done
[ -n "$OUT" ] || { echo "gpu-check: give the folder to write results to, e.g. scripts/gpu-check.sh --quick out/" >&2; usage; }
mkdir -p "$OUT" || { echo "gpu-check: cannot create '$OUT'" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
: > "$OUT/summary.txt"

note() { echo "gpu-check: $*" | tee -a "$OUT/summary.txt" >&2; }
now() { date +%s; }

# ---- Which torch: the machine's own (ACCEL_PYTHON, --python, then python3/python on PATH) -------------------
if [ -z "$PYTHON" ]; then
  for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch' >/dev/null 2>&1; then
      PYTHON="$(command -v "$candidate")"
      break
    fi
  done
fi
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import torch' >/dev/null 2>&1; then
  note "no Python with torch found; pass --python /path/to/python (torch 2.11) or set ACCEL_PYTHON"
  exit 2
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(hostname)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "python: $PYTHON"
  "$PYTHON" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "available:", torch.cuda.is_available()); print("gpu:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "")' 2>&1
  command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
  [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1 && /usr/local/cuda/bin/nvcc --version | tail -n 2
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cmake: $(cmake --version | head -n 1)"
} > "$OUT/environment.txt" 2>&1
note "environment recorded in environment.txt"

# ---- Build: the runtime and the precision benchmark only ----------------------------------------------------
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
[ -f "$BUILD_DIR/CMakeCache.txt" ] && GENERATOR=() # keep whatever generator the folder was made with
start=$(now)
if ! cmake -S "$REPO" -B "$BUILD_DIR" ${GENERATOR[@]+"${GENERATOR[@]}"} -DCMAKE_BUILD_TYPE=Release \
  -DACCEL_BUILD_REWRITER=OFF -DACCEL_BUILD_EXAMPLES=OFF -DACCEL_BUILD_TESTS=OFF \
  -DACCEL_PYTHON="$PYTHON" > "$OUT/configure.log" 2>&1; then
  note "configure failed after $(($(now) - start)) s: see configure.log"
  tail -n 20 "$OUT/configure.log" >&2
  exit 2
fi
grep -E "accelerate-cpp: (Torch|NCCL|CUDA kernels)" "$OUT/configure.log" | sed 's/^-- /  /' | tee -a "$OUT/summary.txt" >&2
# bench_train_accel compiles bench/generated/train_ref.cpp, the committed output of accel-rewrite (no LLVM here);
# the fixtures' committed rewrites come from test/fixtures/generated/, next to their plain originals.
FIXTURE_PROGRAMS=(trains_like_original trainer_main unmovable_batch member_optimizers reach)
FIXTURE_TARGETS=()
for name in "${FIXTURE_PROGRAMS[@]}"; do FIXTURE_TARGETS+=("fixture_$name" "fixture_${name}_plain"); done
if ! cmake --build "$BUILD_DIR" --target bench_precision bench_train_plain bench_train_accel bench_data_loader \
  bench_fsdp_offload accel \
  "${FIXTURE_TARGETS[@]}" -j "$JOBS" > "$OUT/build.log" 2>&1; then
  note "build failed after $(($(now) - start)) s: see build.log"
  grep -E "error|Error" "$OUT/build.log" | head -n 20 >&2
  exit 2
fi
note "build: $(($(now) - start)) s (configure + runtime + bench_precision + bench_train_{plain,accel} + bench_data_loader + bench_fsdp_offload + fixtures, $JOBS jobs)"
BENCH="$BUILD_DIR/bin/bench_precision"
HAVE_ACCELERATE=1
if ! "$PYTHON" -c 'import accelerate' >/dev/null 2>&1; then
  HAVE_ACCELERATE=0
  note "Hugging Face Accelerate is not installed for $PYTHON: side-by-side will not run (pip install accelerate)"
fi

# ---- The fixtures' committed rewrites against their plain originals -----------------------------------------
# Shapes of loops that a rewrite once made train differently (test/fixtures/CMakeLists.txt), each run as the
# plain original and as its committed rewrite on NPROC processes in debug mode (replicas compared after every
# step), at the same global batch, compared by test/fixtures/compare_fixture.py (float64, rtol 1e-6). On a GPU
# this is what a CPU cannot show: a device move the rewrite dropped from a tensor the loop makes leaves it on the
# CPU, and the step fails. "sharded": the rewrite shards the loader, so each process takes 64/NPROC examples a
# step; "whole": the loader is left whole (each process reads every example). reach's device_global: a device held
# by a global variable, which the rewrite sets to the process's device (as written, every process would use GPU 0).
SHAPES="created_tensor,created_on_device,output_side_effect,output_update,loader_in_template,loader_by_reference"
SHAPES+=",log_file,epoch_metrics,typed_optimizer"
FIXTURES=("trains_like_original sharded $SHAPES" "trainer_main sharded callback,template"
  "unmovable_batch whole struct_target,tuple_with_struct"
  "member_optimizers sharded unique_ptr_in_constructor,unique_ptr_initializer,raw_new_gan,default_member_initializer,by_value,shared_ptr_reset"
  "reach sharded two_declarators,optimizer_vector,optimizer_map,device_global,null_pointer_member,null_member_in_constructor,printed_by_flow,helper_writes,template_module,module_callback,decltype_template")
[ -n "$QUICK" ] && FIXTURES=("trains_like_original sharded created_tensor,created_on_device,loader_by_reference,epoch_metrics"
  "trainer_main sharded callback" "unmovable_batch whole struct_target,tuple_with_struct"
  "reach sharded device_global")
run_fixtures() { # run_fixtures NPROC SECONDS: one line per shape, "ok ..." or "FAIL ..." with the run's output
  local nproc=$1 deadline=$(($(now) + $2)) failed=0 entry name kind shapes shape batch left log
  log="$(mktemp)"
  for entry in "${FIXTURES[@]}"; do
    read -r name kind shapes <<< "$entry"
    for shape in ${shapes//,/ }; do
      left=$((deadline - $(now)))
      if [ "$left" -lt 5 ]; then
        echo "SKIP $name $shape: the stage's time is spent"
        failed=1
        continue
      fi
      batch=64
      [ "$kind" = sharded ] && batch=$((64 / nproc))
      if (cd "$REPO" && timeout --kill-after=5 "$left" "$PYTHON" test/fixtures/compare_fixture.py \
        --plain "$BUILD_DIR/bin/fixture_${name}_plain" --distributed "$BUILD_DIR/bin/fixture_$name" \
        --accel "$BUILD_DIR/bin/accel" --nproc "$nproc" --rtol 1e-6 --debug-every-step \
        "--plain-args=64 $shape" "--distributed-args=$batch $shape") > "$log" 2>&1; then
        echo "ok $name $shape: $(grep -E '^compare_fixture: ' "$log" | tail -n 1 | sed 's/^compare_fixture: //')"
      else
        echo "FAIL $name $shape ($nproc processes): the run's output follows"
        sed 's/^/    /' "$log"
        failed=1
      fi
    done
  done
  rm -f "$log"
  return $failed
}

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  # Not the GPU check either: the committed rewrites build and train like their originals on 2 CPU processes.
  if OMP_NUM_THREADS=1 run_fixtures 2 120 > "$OUT/fixtures-cpu.txt" 2>&1; then
    note "fixtures on the CPU (2 processes): ok -> fixtures-cpu.txt"
  else
    note "fixtures on the CPU (2 processes): FAILED -> fixtures-cpu.txt"
    grep -E "^(FAIL|SKIP)" "$OUT/fixtures-cpu.txt" | sed 's/^/  /' | tee -a "$OUT/summary.txt" >&2
  fi
  if [ "$HAVE_ACCELERATE" = 1 ]; then
    # Not a measurement: shows the four forms build and run here, (b) from the committed rewrite.
    if OMP_NUM_THREADS=1 timeout 120 "$PYTHON" "$REPO/bench/compare.py" run --workloads mlp-mnist --procs 1 --reps 1 \
      --steps 3 --warmup 1 --bin-dir "$BUILD_DIR/bin" > "$OUT/side-by-side-cpu-smoke.txt" 2>&1; then
      note "side-by-side on the CPU (smoke run, 3 steps): ok -> side-by-side-cpu-smoke.txt"
    else
      note "side-by-side on the CPU (smoke run): FAILED -> side-by-side-cpu-smoke.txt"
    fi
  fi
  note "no CUDA device visible to torch: the build works, but there is nothing to run here (the CPU versions of these checks are ctest -R 'runtime\\.(Autocast|GradScaler|MlpMnist|Linear|Fp8|GraphedStep)')"
  exit 3
fi

# ---- Stages, each written as soon as it ends; --quick fits them in 5 minutes ---------------------------------
# name, seconds allowed
STAGES=("fixtures 60" "side-by-side 240" "checks 80" "cuda-graph 45" "gpt-small-losses 45" "gpt-86m 120"
  "fp8-linear 50" "data-loader 30" "fsdp-offload 60")
[ -n "$QUICK" ] || STAGES=("fixtures 180" "side-by-side 900" "checks 150" "cuda-graph 150" "gpt-small-losses 90"
  "gpt-86m 300" "fp8-linear 150" "data-loader 90" "fsdp-offload 150")
# --quick's budget stays what it was before fsdp-offload: a stage that finds it spent is not run (and says so).
BUDGET=675
[ -n "$QUICK" ] || BUDGET=2220
# One process per GPU (NCCL refuses two processes on one device), two at most.
GPUS="$("$PYTHON" -c 'import torch; print(min(2, torch.cuda.device_count()))' 2>/dev/null || echo 1)"
# The side-by-side benchmark of bench/compare.py: (a) plain C++, (b) the rewritten C++ through the runtime,
# (c) Python + Hugging Face Accelerate, (d) plain Python torch; 1 process, fp32 and bf16 ((a) and (d) fp32 only),
# alternated repetitions, medians; one line per workload and precision as soon as it is measured.
SIDE_BY_SIDE=(run --workloads gpt-86m,gpt-small,mlp-mnist --procs 1 --precisions fp32,bf16 --reps 5 --steps 20
  --warmup 5 --bin-dir "$BUILD_DIR/bin" --markdown "$OUT/side-by-side.md" --json "$OUT/side-by-side.json"
  --plot "$OUT/side-by-side.png")
[ -n "$QUICK" ] && SIDE_BY_SIDE+=(--workloads gpt-86m,gpt-small --reps 3)
run_start=$(now)
status=0
for entry in "${STAGES[@]}"; do
  read -r stage limit <<< "$entry"
  if [ -n "$ONLY" ] && [[ "$ONLY" != *",$stage,"* ]]; then
    continue
  fi
  if [ "$stage" = side-by-side ] && [ "$HAVE_ACCELERATE" = 0 ]; then
    note "side-by-side: not run, no Hugging Face Accelerate"
    status=1
    continue
  fi
  left=$((BUDGET - ($(now) - run_start)))
  if [ "$left" -lt 10 ]; then
    note "$stage: not run, the ${BUDGET} s budget is spent"
    status=1
    continue
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  stage_start=$(now)
  if [ "$stage" = fixtures ]; then
    run_fixtures "$GPUS" "$limit" > "$OUT/$stage.txt" 2>&1
  elif [ "$stage" = side-by-side ]; then
    timeout --kill-after=10 "$limit" "$PYTHON" "$REPO/bench/compare.py" "${SIDE_BY_SIDE[@]}" > "$OUT/$stage.txt" 2>&1
  elif [ "$stage" = fsdp-offload ]; then
    # FULL_SHARD with and without fsdp_offload_params and fsdp_activation_checkpointing_offload, and ZeRO-2 with
    # and without ZeRO-Offload (offload_optimizer_device cpu, stages 2 and 1), one process per GPU (one process:
    # each unit one share, ZeRO's model one share): the parameters within fp32's 1e-5 of their base's, and the
    # device memory peaks side by side.
    timeout --kill-after=10 "$limit" "$BUILD_DIR/bin/accel" launch --num_processes "$GPUS" \
      "$BUILD_DIR/bin/bench_fsdp_offload" --width 2048 --layers 8 --batch 16 \
      --steps "$([ -n "$QUICK" ] && echo 4 || echo 10)" > "$OUT/$stage.txt" 2>&1
  elif [ "$stage" = data-loader ]; then
    # Pinned batches from 2 workers copied with non_blocking equal the CPU's; the rate with pin_memory off and on.
    timeout --kill-after=10 "$limit" "$BUILD_DIR/bin/bench_data_loader" --cuda --batches 32 --batch-size 64 \
      --reps "$([ -n "$QUICK" ] && echo 3 || echo 7)" > "$OUT/$stage.txt" 2>&1
  else
    (cd "$REPO" && timeout --kill-after=10 "$limit" "$BENCH" --stage "$stage" $QUICK --data "$REPO/test/data") \
      > "$OUT/$stage.txt" 2>&1
  fi
  rc=$?
  elapsed=$(($(now) - stage_start))
  case $rc in
    0) note "$stage: ok (${elapsed} s) -> $stage.txt" ;;
    124|137) note "$stage: TIMED OUT after ${limit} s -> $stage.txt (partial)"; status=1 ;;
    *) note "$stage: FAILED (exit $rc, ${elapsed} s) -> $stage.txt"; status=1 ;;
  esac
  grep -E "^(FAIL|SKIP)" "$OUT/$stage.txt" | sed 's/^/  /' | tee -a "$OUT/summary.txt" >&2
done
note "stages: $(($(now) - run_start)) s; $([ $status -eq 0 ] && echo 'all passed' || echo 'something failed, see above')"
exit $status
