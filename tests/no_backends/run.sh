#!/usr/bin/env bash
# The `tessera` package without LLVM and without CUDA (`--no-default-features`): it must
# lint clean (clippy), build, and check, format and explain itself, because that is what
# editors and pre-commit install. LLVM is made unfindable (LLVM_SYS_140_PREFIX points
# nowhere), so the build fails if anything still needs it. Builds into
# $CARGO_TARGET_DIR (or target)/no-backends, away from the full build's binaries.
# Exit 0: every check passed; 1: a check failed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
target_dir="${CARGO_TARGET_DIR:-$repo/target}/no-backends"
export LLVM_SYS_140_PREFIX="$(mktemp -d)/no-llvm-here"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

cargo clippy --quiet -p tessera --no-default-features --lib --bins --target-dir "$target_dir" -- -D warnings ||
  fail "cargo clippy -p tessera --no-default-features"
cargo build --quiet -p tessera --no-default-features --bins --target-dir "$target_dir" ||
  { echo "FAIL: cargo build -p tessera --no-default-features" >&2; exit 1; }
bin="$target_dir/debug"

# expect NAME STATUS NEEDLE -- COMMAND...
expect() {
  local name="$1" want="$2" needle="$3"
  shift 4
  local out status=0
  out="$("$@" 2>&1)" || status=$?
  if [ "$status" != "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    fail "$name: exit $status (expected $want), output:"
    echo "$out" | tail -n 20 >&2
  else
    echo "ok: $name"
  fi
}
expect "check passes the valid corpus" 0 "" -- "$bin/tessera" check --no-cache tests/corpus/valid
expect "check reports the invalid corpus" 1 "error[E" -- "$bin/tessera" check --no-cache --format concise tests/corpus/invalid
expect "fmt --check on the examples" 0 "" -- "$bin/tessera" fmt --check examples
expect "lower to PTX needs no backend" 0 ".entry" -- \
  "$bin/tessera" lower examples/vector_add.tsr --kernel vector_add --stage target
expect "a CPU run says how to get the CPU backend" 2 "--features llvm" -- \
  "$bin/tessera" run examples/vector_add.tsr --kernel vector_add --device cpu --dims N=4096
expect "the language server starts" 0 "tessera-lsp" -- "$bin/tessera-lsp" --version

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed without LLVM and CUDA" >&2
  exit 1
fi
echo "without LLVM and CUDA: all checks passed"
