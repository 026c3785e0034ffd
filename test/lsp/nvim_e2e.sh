#!/usr/bin/env bash
# lsp.nvim: accel-lsp, driven by a real editor on the user's own file of an accelerate_target() project,
# writes exactly what the build's rewrite wrote; the clang-tidy module, on the same file, offers the rewrite.
#
# Headless Neovim opens examples/mlp/train.cpp itself (built by accelerate_target(mlp ...) in the build
# directory), attaches accel-lsp, takes the code action "Distribute this training loop with accelerate" on the
# epoch loop, applies its WorkspaceEdit (UTF-16) and writes the buffer to a temporary file (nvim_e2e.lua); the
# source tree is never written. The server finds the build's compile_commands.json as clangd does (the build/
# folder of a parent of the file; --compile-commands-dir when the build directory is elsewhere) and must find
# the file's own command there (accelerate_target()'s <target>_editor_sources), never a neighbour's. The
# written file must be byte for byte the build's rewrite of the file (build/examples/mlp.accelerate/mlp/train.cpp
# less its #line directives). accel-clang-tidy -p <build dir> on the same file must warn with the fix. The
# server and clang-tidy each parse the real libtorch headers (20-60 s on a 2-core machine).
#
#   nvim_e2e.sh --server ACCEL_LSP --tidy ACCEL_CLANG_TIDY --source-root REPO --build-dir BUILD [--keep]
#
# Needs nvim (Debian's neovim, 0.7.2 or later) on PATH, or NVIM=/path/to/nvim; fails, never skips, without it.
# --keep leaves the temporary directory in place.
set -euo pipefail

say() { echo "nvim_e2e.sh: $*"; }
die() { echo "nvim_e2e.sh: FAIL: $*" >&2; exit 1; }

server="" tidy="" source_root="" build_dir="" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server="$2"; shift 2 ;;
    --tidy) tidy="$2"; shift 2 ;;
    --source-root) source_root="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) die "unknown argument '$1' (usage: $0 --server ACCEL_LSP --tidy ACCEL_CLANG_TIDY --source-root REPO --build-dir BUILD [--keep])" ;;
  esac
done
if [ -z "$server" ] || [ -z "$tidy" ] || [ -z "$source_root" ] || [ -z "$build_dir" ]; then
  die "--server, --tidy, --source-root and --build-dir are required"
fi
nvim="${NVIM:-nvim}"
command -v "$nvim" >/dev/null 2>&1 \
  || die "'$nvim' not found: install Neovim (scripts/bootstrap.sh does: apt-get install neovim) or set NVIM"
[ -x "$server" ] || die "accel-lsp not found or not executable: $server (build the accel-lsp target)"
[ -x "$tidy" ] || die "accel-clang-tidy not found or not executable: $tidy (build the accel-clang-tidy target)"

# Absolute paths: the database and Neovim get them from a different working directory.
abspath() { (cd "$(dirname "$1")" && echo "$(pwd -P)/$(basename "$1")"); }
server=$(abspath "$server")
tidy=$(abspath "$tidy")
source_root=$(cd "$source_root" && pwd -P)
build_dir=$(cd "$build_dir" && pwd -P)
source_file="$source_root/examples/mlp/train.cpp"
rewritten="$build_dir/examples/mlp.accelerate/mlp/train.cpp"
script="$source_root/test/lsp/nvim_e2e.lua"
[ -f "$source_file" ] || die "no $source_file (is --source-root the repository?)"
[ -f "$script" ] || die "no $script"
[ -f "$rewritten" ] || die "no $rewritten: build the mlp target (examples/CMakeLists.txt) first"
grep -qF "\"file\": \"$source_file\"" "$build_dir/compile_commands.json" 2>/dev/null \
  || die "$build_dir/compile_commands.json has no entry for $source_file: accelerate_target() lists the original sources (mlp_editor_sources)"
before=$(sha256sum < "$source_file")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-lsp-nvim.XXXXXX")
tmp=$(cd "$tmp" && pwd -P)
if [ "$keep" -eq 1 ]; then
  say "keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
mkdir -p "$tmp/xdg"
sed '/^#line /d' "$rewritten" > "$tmp/expected.cpp"
cmp -s "$source_file" "$tmp/expected.cpp" && die "the build's rewrite left examples/mlp/train.cpp unchanged: nothing to compare"
server_args=""
if [ "$build_dir" != "$source_root/build" ]; then
  server_args="--compile-commands-dir=$build_dir" # else found as clangd finds it, with no argument
fi

# Neovim: --clean (no user config or plugins), -n (no swap file), its cache (lsp.log) inside $tmp; stdin
# closed so that it never waits for input; `timeout` in case the script itself hangs.
start=$SECONDS
say "nvim --headless --clean -n -S $script (server: $server)"
set +e
ACCEL_E2E_SERVER="$server" ACCEL_E2E_SERVER_ARGS="$server_args" ACCEL_E2E_FILE="$source_file" \
  ACCEL_E2E_WRITE_TO="$tmp/train.cpp" ACCEL_E2E_ROOT="$source_root" \
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

[ "$(sha256sum < "$source_file")" = "$before" ] || die "$source_file was changed: the test must never write it"
if ! cmp "$tmp/expected.cpp" "$tmp/train.cpp"; then
  diff -u --label "the build's rewrite" --label "accel-lsp in Neovim" "$tmp/expected.cpp" "$tmp/train.cpp" || true
  die "the file Neovim wrote differs from the build's rewrite"
fi
say "PASS: the file Neovim wrote is the build's rewrite, byte for byte ($(wc -l < "$tmp/train.cpp") lines)"

# The clang-tidy module on the same file, with the build's database (no --fix: the source tree stays as it is).
start=$SECONDS
say "$tidy -p $build_dir -checks=-*,accelerate-* $source_file"
set +e
"$tidy" -p "$build_dir" '-checks=-*,accelerate-*' "$source_file" > "$tmp/tidy.log" 2>&1
status=$?
set -e
say "clang-tidy took $((SECONDS - start)) s (exit status $status)"
if ! grep -q "distribute it with accelerate" "$tmp/tidy.log" || grep -qE "Skipping|Error while|error:" "$tmp/tidy.log"; then
  cat "$tmp/tidy.log" >&2
  die "the clang-tidy module did not offer the rewrite on $source_file with the build's compile command"
fi
say "PASS: the clang-tidy module offers the rewrite on the user's own file"
