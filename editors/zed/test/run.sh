#!/usr/bin/env bash
# Tests of the Zed extension in editors/zed. Usage: editors/zed/test/run.sh
#   1. test/check_extension.py (python3 >= 3.11, for tomllib): extension.toml and
#      languages/tessera/config.toml parse and have the keys Zed needs; the grammar `rev` is a
#      commit holding the working tree's grammar; every query capture is one Zed documents
#      (test/zed-captures.txt); with the tree-sitter CLI, every query compiles against
#      grammars/tree-sitter-tessera and each capture matches test/sample.tsr.
#   2. cargo fmt --check, cargo clippy and cargo test (the server-command logic) on the host.
#   3. cargo build --target wasm32-wasip2 (the target Zed builds extensions for), and the
#      output is a WebAssembly component.
# Builds go to ${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/zed-extension} or editors/zed/target, never
# the workspace's target directory. Under CI=true a missing tree-sitter CLI or wasm target is a
# failure (the wasm target is installed with rustup when missing); elsewhere it is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
ci=0
case "${CI:-}" in true|1|yes) ci=1 ;; esac
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/zed-extension"
else
  export CARGO_TARGET_DIR="$here/target"
fi
wasm_target=wasm32-wasip2
status=0

python="${PYTHON:-python3}"
if ! "$python" -c 'import tomllib' 2>/dev/null; then
  for p in python3.13 python3.12 python3.11; do
    if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
  done
fi
check_args=()
[ "$ci" -eq 1 ] && check_args+=(--ci --require-tree-sitter)
echo "== check_extension.py"
"$python" test/check_extension.py "${check_args[@]}" || status=1

echo "== cargo fmt, clippy, test (host)"
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --check || status=1
else
  echo "skip: rustfmt not installed"
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --quiet --locked --all-targets -- -D warnings || status=1
else
  echo "skip: clippy not installed"
fi
cargo test --quiet --locked || status=1

echo "== cargo build --target $wasm_target"
have_target=0
if rustc --print sysroot >/dev/null 2>&1 \
  && [ -d "$(rustc --print sysroot)/lib/rustlib/$wasm_target" ]; then
  have_target=1
elif command -v rustup >/dev/null 2>&1; then
  echo "installing the $wasm_target target: rustup target add $wasm_target"
  if rustup target add "$wasm_target"; then have_target=1; fi
fi
if [ "$have_target" -eq 1 ]; then
  if cargo build --quiet --locked --target "$wasm_target"; then
    wasm="$CARGO_TARGET_DIR/$wasm_target/debug/zed_tessera.wasm"
    # A component (what Zed loads) starts with "\0asm" and the component layer 0d 00 01 00.
    header="$(head -c 8 "$wasm" | od -An -tx1 | tr -d ' \n')"
    if [ "$header" = "0061736d0d000100" ]; then
      echo "ok: $wasm is a WebAssembly component ($(wc -c <"$wasm") bytes)"
    else
      echo "FAIL: $wasm is not a WebAssembly component (header $header)" >&2
      status=1
    fi
  else
    status=1
  fi
elif [ "$ci" -eq 1 ]; then
  echo "FAIL: the $wasm_target target is not installed and rustup could not add it" >&2
  status=1
else
  echo "skip: the $wasm_target target is not installed (rustup target add $wasm_target)"
fi

[ "$status" -eq 0 ] && echo "zed extension: all checks passed" || echo "zed extension: FAILED" >&2
exit $status
