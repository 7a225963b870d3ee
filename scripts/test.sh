#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (engine, figures, AppTest, real browser) in two phases that
# overlap:
#   1. every test that reads no clock against a bound, on one pytest worker per core (pytest-xdist), at idle priority
#      (nice 19 and Linux's SCHED_IDLE): the kernel gives it a core only when phase 2 leaves one unused;
#   2. at the same time, the browser tier and the timing tests (marker `serial`), one at a time, at normal priority,
#      as a person's machine runs the app: phase 2 waits on its server and Chromium a third of its time, and phase 1
#      fills those gaps. The tests marked `alone` (they read the machine's load, or compare the app's timings with a
#      peer run) come last and wait until phase 1 has ended (tests/conftest.py).
# Phase 1's report is printed when phase 2 ends. Extra arguments go to both phases (e.g. -q, -x, a path, -k NAME).
# ILE_TEST_WORKERS=1 runs phase 1 on one worker.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/scratch_check.sh  # before anything is installed: a full disk gets one clear line
. scripts/venv.sh  # PY: the project's own environment (.venv)
install_log=$(mktemp "${TMPDIR:-/tmp}/ile-install.XXXXXX")
PYTHON=$PY bash scripts/install.sh --test 2>&1 | tee "$install_log"
installed=$SECONDS
# The run's last line says how long the install and the suite took, and whether llama.cpp was built (a first run)
# or came from the cache: a CI's printed tail then measures the first run on its own machine (docs/testing.md).
llama=$(grep -o "llama.cpp built in [0-9]* s" "$install_log" || echo "llama.cpp from the cache")
rm -f "$install_log"
workers=${ILE_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}
[ "$workers" -ge 1 ] 2>/dev/null || workers=2
parallel=(-n "$workers" --dist load)
[ "$workers" -eq 1 ] && parallel=(-p no:xdist)
low=(nice -n 19)
command -v chrt >/dev/null 2>&1 && chrt --idle 0 true 2>/dev/null && low+=(chrt --idle 0)
report=$(mktemp "${TMPDIR:-/tmp}/ile-phase1.XXXXXX")
echo "[test] phase 1: unit, model and app tiers on $workers worker(s) at idle priority, reported when phase 2 ends"
"${low[@]}" "$PY" -m pytest "${parallel[@]}" -m "not browser and not serial" "$@" >"$report" 2>&1 </dev/null &
phase1=$!
trap 'kill "$phase1" 2>/dev/null || true; rm -f "$report"' EXIT
echo "[test] phase 2: browser tier and timing tests, one at a time (the tests marked alone after phase 1)"
rc=0
ILE_TEST_BESIDE_PID=$phase1 "$PY" -m pytest -p no:xdist -m "browser or serial" "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0  # nothing collected (a path or -k that names only phase-1 tests)
status=0
wait "$phase1" || status=$?
echo "[test] phase 1's report:"
cat "$report"
[ "$status" -eq 5 ] && status=0
[ "$status" -eq 0 ] && status=$rc
echo "[test] install $((installed - started)) s ($llama), suite $((SECONDS - installed)) s: $((SECONDS - started)) s in all"
exit "$status"
