#!/usr/bin/env bash
# pre-commit end to end, both hook styles, on a scratch git repository holding one clean
# and one broken .tsr file (and then only the clean one):
#   - `language: system`: a `repo: local` config running the `tessera` binary on PATH
#     ($TESSERA, else $CARGO_TARGET_DIR (or target)/debug/tessera);
#   - `language: rust`: `pre-commit try-repo` on this repository's
#     .pre-commit-hooks.yaml, which `cargo install`s the package as a user's pre-commit
#     would. LLVM is made unfindable (LLVM_SYS_140_PREFIX points nowhere), so the test
#     fails if the hook's build needs it. The build uses $CARGO_TARGET_DIR/precommit and
#     an unoptimized release profile so that CI's reruns reuse it.
# Set TESSERA_PRECOMMIT_SKIP_RUST=1 to run only the `language: system` half.
# Exit 0: every check passed (or pre-commit is missing and CI is unset); 1: a check
# failed; 2: pre-commit or the binary is missing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"

if ! command -v pre-commit >/dev/null 2>&1; then
  if [ -z "${CI:-}" ]; then
    echo "skipped: pre-commit is not installed (pip install pre-commit)"
    exit 0
  fi
  echo "error: pre-commit is not installed (pip install pre-commit)" >&2
  exit 2
fi
tessera="${TESSERA:-$target_dir/debug/tessera}"
if [ ! -x "$tessera" ]; then
  echo "error: $tessera not found: build it first (cargo build --bin tessera)" >&2
  exit 2
fi
echo "$(pre-commit --version), $("$tessera" --version)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PRE_COMMIT_HOME="$work/pre-commit-home"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The scratch project: a formatted clean kernel and a kernel with an undefined name.
project="$work/project"
mkdir -p "$project/kernels"
cp "$repo/examples/saxpy.tsr" "$project/kernels/clean.tsr"
cat >"$project/kernels/broken.tsr" <<'EOF'
from tessera import *


@kernel
def scale(x: Tensor["N", f32], out: Tensor["N", f32]):
    ctx = tile.context()
    for i in tile.parallel(0, N, 256):
        v = tile.load(x[i : i + 256])
        tile.store(out[i : i + 256], v * factor)
EOF
printf 'def  badly_spaced( ):\n    return  1\n' >"$project/kernels/unformatted.tsr"
git -C "$project" init -q
git -C "$project" -c user.email=t@example.com -c user.name=t add -A
git -C "$project" -c user.email=t@example.com -c user.name=t commit -qm "kernels"

# run NAME EXPECTED_STATUS MUST_CONTAIN MUST_NOT_CONTAIN -- COMMAND...
run() {
  local name="$1" want="$2" needle="$3" absent="$4"
  shift 5
  local out status=0
  out="$(cd "$project" && "$@" 2>&1)" || status=$?
  if [ "$status" != "$want" ]; then
    fail "$name: exit $status, expected $want"
    echo "$out" | tail -n 40 >&2
    return
  fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" <<<"$out"; then
    fail "$name: output lacks '$needle'"
    echo "$out" | tail -n 40 >&2
    return
  fi
  if [ -n "$absent" ] && grep -qF -- "$absent" <<<"$out"; then
    fail "$name: output has '$absent'"
    echo "$out" | tail -n 40 >&2
    return
  fi
  echo "ok: $name"
}

# --- language: system, through a `repo: local` config ----------------------------------
cat >"$project/.pre-commit-config.yaml" <<'EOF'
repos:
  - repo: local
    hooks:
      - id: tessera-check
        name: tessera check
        entry: tessera check --format concise
        language: system
        files: \.tsr$
        require_serial: true
      - id: tessera-fmt
        name: tessera fmt
        entry: tessera fmt --check
        language: system
        files: \.tsr$
        require_serial: true
EOF
bindir="$work/bin"
mkdir -p "$bindir"
ln -s "$tessera" "$bindir/tessera"
export PATH="$bindir:$PATH"
run "system: tessera-check reports the broken file" 1 "kernels/broken.tsr" "kernels/clean.tsr" -- \
  pre-commit run tessera-check --all-files
run "system: the diagnostic names the undefined name" 1 "E0200" "" -- \
  pre-commit run tessera-check --all-files
run "system: tessera-fmt names the unformatted file" 1 "would reformat kernels/unformatted.tsr" "kernels/clean.tsr" -- \
  pre-commit run tessera-fmt --all-files
run "system: only the clean file passes both" 0 "Passed" "Failed" -- \
  pre-commit run --files kernels/clean.tsr

# --- language: rust, this repository's .pre-commit-hooks.yaml ---------------------------
if [ -n "${TESSERA_PRECOMMIT_SKIP_RUST:-}" ]; then
  echo "skipped: language: rust (TESSERA_PRECOMMIT_SKIP_RUST is set)"
else
  rm "$project/.pre-commit-config.yaml"
  # Neither the tessera on PATH nor LLVM may be used by the hooks' own install.
  export PATH="${PATH#"$bindir:"}"
  export LLVM_SYS_140_PREFIX="$work/no-llvm-here"
  export CARGO_TARGET_DIR="$target_dir/precommit"
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=false
  # try-repo builds from a clone of this repository (uncommitted changes included).
  run "rust: tessera-check (cargo install without LLVM) reports the broken file" 1 "kernels/broken.tsr" "kernels/clean.tsr" -- \
    pre-commit try-repo "$repo" tessera-check --all-files
  run "rust: tessera-fmt names the unformatted file" 1 "would reformat kernels/unformatted.tsr" "" -- \
    pre-commit try-repo "$repo" tessera-fmt --all-files
  # (try-repo without a hook id would also run the -system hooks, which need tessera on
  # PATH.)
  for hook in tessera-check tessera-fmt; do
    run "rust: $hook passes the clean file" 0 "Passed" "Failed" -- \
      pre-commit try-repo "$repo" "$hook" --files kernels/clean.tsr
  done
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures pre-commit check(s) failed" >&2
  exit 1
fi
echo "pre-commit: all checks passed"
