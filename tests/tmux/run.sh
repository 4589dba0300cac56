#!/usr/bin/env bash
# tessera-explore end to end: the real binary in a detached tmux session on
# examples/gemm.tsr, driven with send-keys and read with capture-pane.
#   tests/tmux/run.sh [PATH/TO/tessera-explore]
# The binary defaults to $TESSERA_EXPLORE, else $CARGO_TARGET_DIR (or target)/debug/.
# Builds nothing. Exit 0: every check passed (or tmux is missing and CI is unset);
# 1: a check failed (the screen is printed); 2: the binary or tmux is missing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

if ! command -v tmux >/dev/null 2>&1; then
  if [ -z "${CI:-}" ]; then
    echo "skipped: tmux is not installed (Debian: apt-get install -y tmux)"
    exit 0
  fi
  echo "error: tmux is not installed (Debian: apt-get install -y tmux)" >&2
  exit 2
fi
if ! command -v pgrep >/dev/null 2>&1; then
  echo "error: pgrep is not installed (Debian: apt-get install -y procps)" >&2
  exit 2
fi
bin="${1:-${TESSERA_EXPLORE:-${CARGO_TARGET_DIR:-$repo/target}/debug/tessera-explore}}"
if [ ! -x "$bin" ]; then
  echo "error: $bin not found: build it first (cargo build --bin tessera-explore)" >&2
  exit 2
fi

# A private tmux server, so the test never touches the user's sessions.
sock="tessera-explore-e2e-$$"
t() { tmux -L "$sock" "$@"; }
cleanup() { t kill-server >/dev/null 2>&1 || true; }
trap cleanup EXIT

capture() { t capture-pane -p -t e2e; }
fail() {
  echo "FAIL: $1" >&2
  echo "----- screen -----" >&2
  capture >&2 || true
  echo "------------------" >&2
  exit 1
}
# wait_for PATTERN [SECONDS]: until the screen shows PATTERN (a grep -E regex).
wait_for() {
  local pattern="$1" seconds="${2:-20}" i
  for ((i = 0; i < seconds * 10; i++)); do
    if capture | grep -qE -- "$pattern"; then
      return 0
    fi
    sleep 0.1
  done
  fail "'$pattern' did not appear within ${seconds}s"
}
send() { t send-keys -t e2e "$@"; }
check() { echo "ok: $1"; }

# A plain shell in a 120x40 pane; the explorer is started from it so that what the
# terminal looks like after `q` can be inspected in the same pane.
t new-session -d -s e2e -x 120 -y 40 "env -i PATH=\"$PATH\" TERM=xterm-256color HOME=\"$HOME\" bash --norc --noprofile"
t set-option -t e2e remain-on-exit on >/dev/null
sleep 0.3
send "PS1='$ '; clear" Enter
send "'$bin' examples/gemm.tsr; echo EXPLORE-EXIT=\$?" Enter

wait_for "tessera-explore .* 1 Explore" 30
wait_for "Graph IR"
[ "$(t display-message -p -t e2e '#{alternate_on}')" = 1 ] || fail "the explorer is not on the alternate screen"
check "starts on the alternate screen with Graph IR"
capture | grep -q "sched.param" || fail "Graph IR shows sched.param"

send "]"
wait_for "Schedule IR"
capture | grep -qE "64x32xbf16" || fail "Schedule IR specializes BM x BK = 64x32"
send "]"
wait_for "Tile IR"
send "d"
wait_for "diff vs Schedule: \+[0-9]+ −[0-9]+"
send "d"
send "]"
wait_for "Target IR"
check "stepped Graph → Schedule → Tile (diff) → Target"

send "4"
wait_for "Schedule sm_90"
send "l"
wait_for "BM=128"
check "schedule edit re-lowered with BM=128"
send "Bspace"
wait_for "BM=64"

send "5" "r"
# The results row: device, median, min, the check against the reference interpreter.
wait_for "interpreter +[0-9.]+ m?s +[0-9.]+ m?s +ok " 120
capture | grep -qE "ran in [0-9.]+ m?s" || fail "the status line reports the run's time"
check "a run on the interpreter shows its time"

send "?"
wait_for "Keys"
send Escape
send "q"
wait_for "EXPLORE-EXIT=0" 10
[ "$(t display-message -p -t e2e '#{alternate_on}')" = 0 ] || fail "q left the alternate screen on"
[ "$(t display-message -p -t e2e '#{mouse_any_flag}')" = 0 ] || fail "q left mouse reporting on"
capture | grep -q "1 Explore" && fail "the explorer's screen is still visible after q"
send "stty -a | tr ' ' '\n' | grep -xE -- '-?icanon|-?echo' | tr '\n' ' '; echo" Enter
wait_for "^icanon echo|^echo icanon|icanon.*echo" 5
capture | grep -qE -- "-icanon|-echo " && fail "the terminal is still in raw mode after q"
check "q restores the terminal (main screen, no mouse reporting, canonical mode with echo)"

# Every other way out restores the terminal too: an uncaught panic, an allocation
# failure (abort), std::process::exit, SIGTERM and SIGINT. The faults are injected by
# the debug-only TESSERA_EXPLORE_FAULT (the key `!` triggers them).
# start ROUTE [ENV...]: clear the pane and run the explorer there.
start() {
  local route="$1"
  shift
  send "clear" Enter
  sleep 0.2
  # In a subshell: an interactive bash whose child dies of SIGINT abandons the rest
  # of the line (it takes it for Ctrl-C), so the status would never be printed.
  send "(env $* '$bin' examples/gemm.tsr; echo EXIT-$route=\$?)" Enter
  wait_for "tessera-explore .* 1 Explore" 30
  wait_for "Graph IR"
  [ "$(t display-message -p -t e2e '#{alternate_on}')" = 1 ] || fail "$route: not on the alternate screen"
}
# restored ROUTE STATUS: the explorer exited with STATUS and the terminal is back:
# main screen, cursor shown, no mouse reporting, canonical mode with echo.
restored() {
  local route="$1" status="$2"
  wait_for "EXIT-$route=$status" 20
  [ "$(t display-message -p -t e2e '#{alternate_on}')" = 0 ] || fail "$route left the alternate screen on"
  [ "$(t display-message -p -t e2e '#{cursor_flag}')" = 1 ] || fail "$route left the cursor hidden"
  [ "$(t display-message -p -t e2e '#{mouse_any_flag}')" = 0 ] || fail "$route left mouse reporting on"
  capture | grep -q "1 Explore" && fail "$route: the explorer's screen is still visible"
  send "stty -a | tr ' ' '\n' | grep -xE -- '-?icanon|-?echo' | tr '\n' ' '; echo STTY-$route" Enter
  wait_for "STTY-$route\$" 5
  capture | grep -qE -- "-icanon|-echo " && fail "$route: the terminal is still in raw mode"
  check "$route restores the terminal (exit status $status)"
}
# The explorer's process: the child of the subshell the pane's shell started.
explorer_pid() { pgrep -P "$(pgrep -P "$(t display-message -p -t e2e '#{pane_pid}')" | head -n 1)" | head -n 1; }

start panic TESSERA_EXPLORE_FAULT=panic
send "!"
restored panic 101
capture | grep -q "injected panic" || fail "the panic message is not on the main screen"

start alloc TESSERA_EXPLORE_FAULT=alloc
send "!"
restored alloc 134
capture | grep -q "tessera-explore: aborted; the terminal was restored" || fail "the abort is not reported"

start exit TESSERA_EXPLORE_FAULT=exit
send "!"
restored exit 3

start sigterm
kill -TERM "$(explorer_pid)"
restored sigterm 143

start sigint
kill -INT "$(explorer_pid)"
restored sigint 130
echo "tmux e2e: all checks passed"
