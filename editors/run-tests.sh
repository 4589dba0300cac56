#!/usr/bin/env bash
# Tests of the editor integrations. Usage: editors/run-tests.sh [--vscode] [--nvim]
#   --vscode  npm ci, npm test, npm run test:real-client, npm run package in editors/vscode
#             (needs Node 20 and npm; the real-client test also needs Chromium, make, a C++
#             compiler and the built `tessera` and `tessera-lsp`: it is skipped without them,
#             except under CI=true)
#   --nvim    the headless Neovim suites in editors/nvim/test (needs nvim; node for the LSP one)
# No flag: both. A missing tool is an error, not a skip, when its suite was asked for by name.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
want_vscode=0 want_nvim=0
for a in "$@"; do
  case "$a" in
    --vscode) want_vscode=1 ;;
    --nvim) want_nvim=1 ;;
    *) echo "usage: $0 [--vscode] [--nvim]" >&2; exit 2 ;;
  esac
done
explicit=$((want_vscode + want_nvim))
if [ "$explicit" -eq 0 ]; then want_vscode=1 want_nvim=1; fi

status=0
if [ "$want_vscode" -eq 1 ]; then
  if command -v npm >/dev/null 2>&1; then
    (cd "$here/vscode" && npm ci --no-audit --no-fund && npm test && npm run test:real-client && npm run package) ||
      status=1
  elif [ "$explicit" -gt 0 ]; then
    echo "error: npm not found" >&2; status=1
  else
    echo "skipped: VS Code extension (npm not found)"
  fi
fi
if [ "$want_nvim" -eq 1 ]; then
  if command -v "${NVIM:-nvim}" >/dev/null 2>&1; then
    "$here/nvim/test/run.sh" || status=1
  elif [ "$explicit" -gt 0 ]; then
    echo "error: nvim not found (apt-get install neovim)" >&2; status=1
  else
    echo "skipped: Neovim plugin (nvim not found)"
  fi
fi
exit $status
