#!/usr/bin/env bash
# lsp.nvim: accel-lsp, driven by a real editor, writes exactly what accel-rewrite writes.
#
# Headless Neovim opens a copy of examples/mlp/train.cpp, attaches accel-lsp, takes the code action
# "Distribute this training loop with accelerate" on the epoch loop, applies its WorkspaceEdit (UTF-16) and
# writes the buffer (nvim_e2e.lua). accel-rewrite rewrites a second copy with the same compile database. The
# two files must be equal byte for byte, and the rewrite must have changed something.
#
# The layout is a CMake project's: the compile database is <tmp>/build/compile_commands.json, which the server
# finds from <tmp>/train.cpp (the `build/` subdirectory of the file's directory) as clangd does, with no
# --compile-commands-dir; its flags are -std=c++17 and -isystem for each libtorch include directory, so the
# file is parsed with the real libtorch headers (20-60 s on a 2-core machine, twice).
#
#   nvim_e2e.sh --server ACCEL_LSP --rewrite ACCEL_REWRITE --source-root REPO [--keep] [-- TORCH_INCLUDE_DIR...]
#
# Without include directories it uses those of the libtorch scripts/bootstrap.sh installs
# (${ACCEL_CACHE_DIR:-~/.cache/accelerate-cpp}/venv-torch-*). Needs nvim (Debian's neovim, 0.7.2 or later) on
# PATH, or NVIM=/path/to/nvim; fails, never skips, without it. --keep leaves the temporary directory in place.
set -euo pipefail

say() { echo "nvim_e2e.sh: $*"; }
die() { echo "nvim_e2e.sh: FAIL: $*" >&2; exit 1; }

server="" rewrite="" source_root="" keep=0
torch_includes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server="$2"; shift 2 ;;
    --rewrite) rewrite="$2"; shift 2 ;;
    --source-root) source_root="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; torch_includes=("$@"); break ;;
    *) die "unknown argument '$1' (usage: $0 --server ACCEL_LSP --rewrite ACCEL_REWRITE --source-root REPO [--keep] [-- TORCH_INCLUDE_DIR...])" ;;
  esac
done
if [ -z "$server" ] || [ -z "$rewrite" ] || [ -z "$source_root" ]; then
  die "--server, --rewrite and --source-root are required"
fi

nvim="${NVIM:-nvim}"
command -v "$nvim" >/dev/null 2>&1 \
  || die "'$nvim' not found: install Neovim (scripts/bootstrap.sh does: apt-get install neovim) or set NVIM"
[ -x "$server" ] || die "accel-lsp not found or not executable: $server (build the accel-lsp target)"
[ -x "$rewrite" ] || die "accel-rewrite not found or not executable: $rewrite (build the accel-rewrite target)"
source_file="$source_root/examples/mlp/train.cpp"
script="$source_root/test/lsp/nvim_e2e.lua"
[ -f "$source_file" ] || die "no $source_file (is --source-root the repository?)"
[ -f "$script" ] || die "no $script"

if [ ${#torch_includes[@]} -eq 0 ]; then
  cache="${ACCEL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerate-cpp}"
  for dir in "$cache"/venv-torch-*/lib/python3*/site-packages/torch/include; do
    [ -d "$dir" ] && torch_includes=("$dir" "$dir/torch/csrc/api/include") && break
  done
  [ ${#torch_includes[@]} -gt 0 ] || die "no libtorch include directories given and none under $cache; pass them after --"
fi
for dir in "${torch_includes[@]}"; do
  [ -d "$dir" ] || die "no such include directory: $dir"
done

# Absolute paths: the database and Neovim get them from a different working directory.
abspath() { (cd "$(dirname "$1")" && echo "$(pwd -P)/$(basename "$1")"); }
server=$(abspath "$server")
rewrite=$(abspath "$rewrite")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-lsp-nvim.XXXXXX")
tmp=$(cd "$tmp" && pwd -P)
if [ "$keep" -eq 1 ]; then
  say "keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
mkdir -p "$tmp/build" "$tmp/reference" "$tmp/xdg"
cp "$source_file" "$tmp/train.cpp"            # the editor's copy
cp "$source_file" "$tmp/reference/train.cpp"  # accel-rewrite's copy

# One database with an entry for each copy, in JSON's "arguments" form.
json_string() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
entry() {
  local file="$1" args="" arg
  local argv=(c++ -std=c++17)
  for arg in "${torch_includes[@]}"; do argv+=(-isystem "$arg"); done
  argv+=(-c "$file")
  for arg in "${argv[@]}"; do args+="${args:+, }$(json_string "$arg")"; done
  printf '  {"directory": %s, "file": %s, "arguments": [%s]}' "$(json_string "$tmp/build")" "$(json_string "$file")" "$args"
}
{
  echo "["
  entry "$tmp/train.cpp"; echo ","
  entry "$tmp/reference/train.cpp"; echo
  echo "]"
} > "$tmp/build/compile_commands.json"

start=$SECONDS
say "accel-rewrite $tmp/reference/train.cpp -p $tmp/build -o $tmp/expected.cpp"
if ! "$rewrite" "$tmp/reference/train.cpp" -p "$tmp/build" -o "$tmp/expected.cpp" > "$tmp/rewrite.log" 2>&1; then
  cat "$tmp/rewrite.log" >&2
  die "accel-rewrite failed on examples/mlp/train.cpp; the reference is missing (database: $tmp/build/compile_commands.json)"
fi
say "accel-rewrite took $((SECONDS - start)) s"
cmp -s "$source_file" "$tmp/expected.cpp" && die "accel-rewrite left examples/mlp/train.cpp unchanged: nothing to compare"

# Neovim: --clean (no user config or plugins), -n (no swap file), its cache (lsp.log) inside $tmp; stdin
# closed so that it never waits for input; `timeout` in case the script itself hangs.
start=$SECONDS
say "nvim --headless --clean -n -S $script (server: $server)"
set +e
ACCEL_E2E_SERVER="$server" ACCEL_E2E_FILE="$tmp/train.cpp" ACCEL_E2E_ROOT="$tmp" \
  ACCEL_E2E_SERVER_STDERR="$tmp/server.stderr" \
  XDG_CACHE_HOME="$tmp/xdg/cache" XDG_STATE_HOME="$tmp/xdg/state" XDG_DATA_HOME="$tmp/xdg/data" \
  XDG_CONFIG_HOME="$tmp/xdg/config" \
  timeout -k 10 600 "$nvim" --headless --clean -n -S "$script" < /dev/null 2>&1
status=$?
set -e
say "Neovim took $((SECONDS - start)) s (exit status $status)"
if [ "$status" -ne 0 ]; then
  [ "$status" -eq 124 ] && say "Neovim was killed after 600 s"
  if [ -s "$tmp/server.stderr" ]; then
    say "the server's stderr (last 60 lines of $(wc -l < "$tmp/server.stderr")):"
    tail -n 60 "$tmp/server.stderr"
  else
    say "the server wrote nothing to stderr"
  fi
  if [ -s "$tmp/xdg/cache/nvim/lsp.log" ]; then
    say "Neovim's lsp.log (last 30 lines):"
    tail -n 30 "$tmp/xdg/cache/nvim/lsp.log"
  fi
  die "the editor did not apply the code action (see above)"
fi

if ! cmp "$tmp/expected.cpp" "$tmp/train.cpp"; then
  diff -u --label "accel-rewrite" --label "accel-lsp in Neovim" "$tmp/expected.cpp" "$tmp/train.cpp" || true
  die "the file Neovim wrote differs from accel-rewrite's"
fi
say "PASS: the file Neovim wrote is accel-rewrite's, byte for byte ($(wc -l < "$tmp/train.cpp") lines)"
