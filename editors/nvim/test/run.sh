#!/usr/bin/env bash
# Headless Neovim tests of the Tessera plugin. Usage: editors/nvim/test/run.sh
#   NVIM=/path/to/nvim   the Neovim to test (default: nvim on PATH; 0.7.2 and later)
#   TESSERA_LSP=/path/to/tessera-lsp   the server for the :checkhealth test (default:
#                        ${CARGO_TARGET_DIR:-target}/debug/tessera-lsp when built, else the fake)
# Needs node for the LSP test (a fake server, editors/test/fake-lsp.js), and a C compiler to
# test the real tree-sitter grammar (Neovim 0.10+; else a stand-in parser is used).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
nvim="${NVIM:-nvim}"
if ! command -v "$nvim" >/dev/null 2>&1; then
  echo "error: $nvim not found (Debian: apt-get install neovim)" >&2
  exit 2
fi
"$nvim" --version | head -n1

run() {
  # Each suite prints "ok"/"FAILED" lines and "<suite>: N passed, N failed"; exits non-zero on
  # a failure. `timeout` guards against a hang in the event loop.
  timeout 300 "$nvim" --headless -u test/minimal_init.lua -c "luafile $1" </dev/null
}

status=0
run test/smoke.lua || status=1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '@kernel\ndef k(x: Tensor["n", f32]):\n    pass\n' > "$tmp/arg.tsr"
TESSERA_AUTOSETUP=1 timeout 300 "$nvim" --headless -u test/minimal_init.lua "$tmp/arg.tsr" \
  -c "luafile test/autosetup_test.lua" </dev/null || status=1

grammar="$here/../../grammars/tree-sitter-tessera/src"
export TESSERA_TS_PARSER=""
if [ -f "$grammar/parser.c" ] && command -v cc >/dev/null 2>&1; then
  srcs=("$grammar/parser.c")
  [ -f "$grammar/scanner.c" ] && srcs+=("$grammar/scanner.c")
  if cc -O1 -shared -fPIC -I"$grammar" "${srcs[@]}" -o "$tmp/tessera.so" 2>"$tmp/cc.log"; then
    export TESSERA_TS_PARSER="$tmp/tessera.so"
  else
    echo "note: could not compile the tree-sitter grammar; using a stand-in parser"
  fi
fi

# :checkhealth tessera against the real server when one is built (it is not built here).
repo="$(cd "$here/../.." && pwd)"
if [ -n "${TESSERA_LSP:-}" ]; then
  TESSERA_HEALTH_SERVER="$TESSERA_LSP"
  if [ ! -x "$TESSERA_HEALTH_SERVER" ]; then
    echo "error: TESSERA_LSP=$TESSERA_LSP is not an executable file" >&2
    status=1
  fi
else
  target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  case "$target_dir" in /*) ;; *) target_dir="$repo/$target_dir" ;; esac
  TESSERA_HEALTH_SERVER="$target_dir/debug/tessera-lsp"
  if [ ! -x "$TESSERA_HEALTH_SERVER" ]; then
    echo "note: $TESSERA_HEALTH_SERVER is not built; the health test uses the fake server"
    TESSERA_HEALTH_SERVER=""
  fi
fi
TESSERA_HEALTH_SERVER="$TESSERA_HEALTH_SERVER" run test/health_test.lua || status=1

if command -v node >/dev/null 2>&1; then
  run test/lsp_test.lua || status=1
else
  echo "skipped: test/lsp_test.lua (node not found)"
fi

run test/treesitter_test.lua || status=1

exit $status
