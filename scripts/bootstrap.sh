#!/usr/bin/env bash
# Installs everything accelerate-cpp needs to build and test: Debian packages and libtorch (PyPI torch).
# Idempotent and quiet when there is nothing to do. Prints the libtorch virtual environment path on success
# when called with --print-venv.
set -euo pipefail

TORCH_VERSION="${ACCEL_TORCH_VERSION:-2.11.0}"
CACHE_ROOT="${ACCEL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerate-cpp}"
VENV="$CACHE_ROOT/venv-torch-$TORCH_VERSION"

DEBIAN_PACKAGES=(
  clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev llvm-19-tools clang-tidy-19 clang-format-19 libclang-rt-19-dev
  libyaml-cpp-dev libgtest-dev libgmock-dev ninja-build ccache nlohmann-json3-dev cmake make
  openmpi-bin iproute2 python3-venv
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

install_torch() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
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
  rm -rf "$VENV.tmp"
  "$py" -m venv "$VENV.tmp" || fail "'$py -m venv $VENV.tmp' failed"
  "$VENV.tmp/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" numpy pyyaml accelerate==1.15.0 \
    || fail "'pip install torch==$TORCH_VERSION' failed; see pip's message above"
  rm -rf "$VENV"
  mv "$VENV.tmp" "$VENV"
  # venv scripts record their path; the python binary itself works from the new location.
}

case "${1:-}" in
  --print-venv) echo "$VENV"; exit 0 ;;
  --debian) install_debian ;;
  --torch) install_torch ;;
  "") install_debian; install_torch ;;
  *) fail "unknown option '$1' (use --debian, --torch or --print-venv)" ;;
esac
