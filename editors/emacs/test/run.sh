#!/usr/bin/env bash
# Batch-mode tests of editors/emacs (tessera-mode). Usage: editors/emacs/test/run.sh
#   EMACS=/path/to/emacs          the Emacs to test (default: emacs on PATH; 27.1 and later)
#   TESSERA_LSP=/path/to/server   the language server (default: cargo builds
#                                 ${CARGO_TARGET_DIR:-target}/debug/tessera-lsp)
#   TESSERA_ELPA_DIRS=dir:dir     more directories of installed ELPA packages (Debian's
#                                 /usr/share/emacs/site-lisp/elpa is always searched)
# Three suites, each in a fresh `emacs --batch -Q`:
#   tessera-mode-test     byte-compilation (warnings are errors), checkdoc, package headers,
#                         font lock, syntax, indentation, comments, imenu, navigation, and the
#                         tree-sitter queries of tessera-ts-mode compiled by the tree-sitter CLI
#   tessera-eglot-test    Eglot (elpa-eglot, or Emacs 29's) against the real server
#   tessera-lsp-mode-test lsp-mode (elpa-lsp-mode) against the real server
# A missing Eglot, lsp-mode, server or tree-sitter CLI skips the tests that need it; under
# CI=true it fails them. A missing Emacs is an error (exit 2).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cd "$repo"
emacs="${EMACS:-emacs}"
ci=0
case "${CI:-}" in true|1|yes) ci=1 ;; esac

if ! command -v "$emacs" >/dev/null 2>&1; then
  echo "error: $emacs not found (Debian: apt-get install -y emacs-nox elpa-eglot elpa-lsp-mode)" >&2
  exit 2
fi
"$emacs" --version | head -n1

if [ -z "${TESSERA_LSP:-}" ]; then
  if command -v cargo >/dev/null 2>&1; then
    if cargo build --quiet --bin tessera-lsp; then
      target_dir="${CARGO_TARGET_DIR:-$repo/target}"
      export TESSERA_LSP="$target_dir/debug/tessera-lsp"
    elif [ "$ci" -eq 1 ]; then
      echo "error: cargo build --bin tessera-lsp failed" >&2
      exit 1
    else
      echo "note: could not build tessera-lsp; the language-server tests will be skipped"
    fi
  elif [ "$ci" -eq 1 ]; then
    echo "error: cargo not found and TESSERA_LSP unset" >&2
    exit 1
  fi
fi
if [ -n "${TESSERA_LSP:-}" ] && [ ! -x "$TESSERA_LSP" ]; then
  if [ "$ci" -eq 1 ]; then
    echo "error: language server not found: $TESSERA_LSP" >&2
    exit 1
  fi
  echo "note: language server not found: $TESSERA_LSP; the language-server tests will be skipped"
fi

status=0
for suite in tessera-mode-test tessera-eglot-test tessera-lsp-mode-test; do
  echo "== $suite"
  # `timeout` guards against a hang waiting on the server.
  if ! timeout 600 "$emacs" --batch -Q -L editors/emacs -L editors/emacs/test \
      -l "$suite" -f ert-run-tests-batch-and-exit </dev/null; then
    echo "FAILED: $suite" >&2
    status=1
  fi
done
exit $status
