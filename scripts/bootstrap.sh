#!/usr/bin/env bash
# Installs everything accelerate-cpp needs to build and test: Debian packages and libtorch (PyPI torch).
# Idempotent and quiet when there is nothing to do. Prints the libtorch virtual environment path on success
# when called with --print-venv.
set -euo pipefail

TORCH_VERSION="${ACCEL_TORCH_VERSION:-2.11.0}"
CACHE_ROOT="${ACCEL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerate-cpp}"
VENV="$CACHE_ROOT/venv-torch-$TORCH_VERSION"
# The MLflow server the tracking tests start lives in a venv of its own, so the benchmark venv stays as measured.
MLFLOW_VERSION="${ACCEL_MLFLOW_VERSION:-3.17.2}"
MLFLOW_VENV="$CACHE_ROOT/venv-mlflow-$MLFLOW_VERSION"

DEBIAN_PACKAGES=(
  clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev llvm-19-tools clang-tidy-19 clang-format-19 libclang-rt-19-dev
  libyaml-cpp-dev libgtest-dev libgmock-dev ninja-build ccache nlohmann-json3-dev cmake make
  openmpi-bin iproute2 python3-venv
  libcurl4-openssl-dev # the MLflow tracker's HTTP client (runtime/tracking/mlflow.cpp)
  neovim # test/lsp: accel-lsp driven by headless Neovim
)

say() { echo "bootstrap: $*" >&2; }
fail() { echo "bootstrap: error: $*" >&2; exit 1; }

install_debian() {
  local missing=()
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null || fail "'apt-get update' failed; check the network and /etc/apt/sources.list"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "'apt-get install ${missing[*]}' failed; run it by hand to see which package"
}

python_for_venv() {
  # A Python the torch wheel supports (3.10-3.13); prefer the one on PATH.
  for py in python3 python3.12 python3.11 python3.13 python3.10 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys, venv; assert (3,10) <= sys.version_info[:2] <= (3,13)' 2>/dev/null; then
      command -v "$py"; return 0
    fi
  done
  fail "no Python 3.10-3.13 with the venv module found; install python3-venv"
}

# Python packages the tests use beside torch: Hugging Face Accelerate (launcher and config oracle),
# safetensors (checkpoint oracle), numpy and pyyaml; matplotlib draws the benchmark plots (bench/compare.py);
# tensorboard reads the event files the TensorBoard tracker writes (test/tracking). An existing venv missing one of
# EXTRA_PYTHON_DISTRIBUTIONS gets the list installed (install_extras).
EXTRA_PYTHON_PACKAGES=(numpy pyyaml accelerate==1.15.0 safetensors matplotlib tensorboard==2.21.0)
EXTRA_PYTHON_DISTRIBUTIONS="numpy pyyaml accelerate safetensors matplotlib tensorboard"

install_torch() {
  # Checked through pip's metadata: importing torch takes seconds.
  if [ -f "$VENV/.complete" ] && compgen -G "$VENV/lib/python3*/site-packages/torch-$TORCH_VERSION*.dist-info" >/dev/null; then
    install_extras
    return 0
  fi
  mkdir -p "$CACHE_ROOT"
  local avail_kb
  avail_kb=$(df -Pk "$CACHE_ROOT" | awk 'NR==2 {print $4}')
  if [ "$avail_kb" -lt $((7 * 1024 * 1024)) ]; then
    fail "libtorch (torch==$TORCH_VERSION with its NVIDIA libraries) needs about 7 GB in $CACHE_ROOT, only $((avail_kb / 1024 / 1024)) GB free; free space or set ACCEL_CACHE_DIR to a larger disk"
  fi
  say "installing torch==$TORCH_VERSION into $VENV (several GB, once per machine)"
  local py
  py=$(python_for_venv)
  # Built in place (venv scripts record their path); .complete marks a finished install.
  rm -rf "$VENV"
  "$py" -m venv "$VENV" || fail "'$py -m venv $VENV' failed"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" "${EXTRA_PYTHON_PACKAGES[@]}" \
    || fail "'pip install torch==$TORCH_VERSION ${EXTRA_PYTHON_PACKAGES[*]}' failed; see pip's message above"
  touch "$VENV/.complete"
}

install_extras() {
  local missing=0 module
  for module in $EXTRA_PYTHON_DISTRIBUTIONS; do
    compgen -G "$VENV/lib/python3*/site-packages/$module-*.dist-info" >/dev/null || missing=1
  done
  [ "$missing" -eq 0 ] && return 0
  say "installing ${EXTRA_PYTHON_PACKAGES[*]} into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${EXTRA_PYTHON_PACKAGES[@]}" \
    || fail "'pip install ${EXTRA_PYTHON_PACKAGES[*]}' into $VENV failed; see pip's message above"
}

install_mlflow() {
  # A real `mlflow server` and MLflow's Python client for test/tracking's MLflow test (sqlite backend, loopback).
  [ -f "$MLFLOW_VENV/.complete" ] && return 0
  mkdir -p "$CACHE_ROOT"
  say "installing mlflow==$MLFLOW_VERSION into $MLFLOW_VENV (once per machine)"
  local py
  py=$(python_for_venv)
  # Built in place (venv scripts record their path); .complete marks a finished install.
  rm -rf "$MLFLOW_VENV"
  "$py" -m venv "$MLFLOW_VENV" || fail "'$py -m venv $MLFLOW_VENV' failed"
  "$MLFLOW_VENV/bin/python" -m pip install -q --disable-pip-version-check "mlflow==$MLFLOW_VERSION" \
    || fail "'pip install mlflow==$MLFLOW_VERSION' into $MLFLOW_VENV failed; see pip's message above"
  touch "$MLFLOW_VENV/.complete"
}

case "${1:-}" in
  --print-venv) echo "$VENV"; exit 0 ;;
  --print-mlflow-venv) echo "$MLFLOW_VENV"; exit 0 ;;
  --debian) install_debian ;;
  --torch) install_torch ;;
  --mlflow) install_mlflow ;;
  "") install_debian; install_torch; install_mlflow ;;
  *) fail "unknown option '$1' (use --debian, --torch, --mlflow, --print-venv or --print-mlflow-venv)" ;;
esac
