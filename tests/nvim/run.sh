#!/usr/bin/env bash
# Headless Neovim end to end against the real language server:
#   tests/nvim/run.sh                         # builds target/debug/tessera-lsp first
#   TESSERA_LSP=/path/to/tessera-lsp tests/nvim/run.sh
#   NVIM=/path/to/nvim tests/nvim/run.sh      # another Neovim (0.7.2 and later)
# Exits non-zero when a check fails (or nvim/the server is missing: exit 2).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
nvim="${NVIM:-nvim}"
if ! command -v "$nvim" >/dev/null 2>&1; then
  echo "error: $nvim not found (Debian: apt-get install -y neovim)" >&2
  exit 2
fi
if [ -z "${TESSERA_LSP:-}" ]; then
  cargo build --quiet --bin tessera-lsp
  target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  TESSERA_LSP="$target_dir/debug/tessera-lsp"
fi
if [ ! -x "$TESSERA_LSP" ]; then
  echo "error: language server not found: $TESSERA_LSP" >&2
  exit 2
fi
export TESSERA_LSP
"$nvim" --version | head -n1
timeout 300 "$nvim" --headless -u editors/nvim/test/minimal_init.lua \
  -c "luafile tests/nvim/e2e.lua" </dev/null
