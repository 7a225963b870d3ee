#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (engine, figures, AppTest, real browser) in two phases:
#   1. every test that reads no clock against a bound, on one pytest worker per core (pytest-xdist), a module per
#      worker at a time, the browser modules handed out first: a browser test waits on its server and Chromium for
#      about 40% of its time, which the other worker fills;
#   2. the tests marked `serial` (a clock against a bound, the page against the CLI, a busy process, a class of
#      tabs against a memory bound), one at a time, as a person's machine runs the app.
# Extra arguments go to both phases (e.g. -q, -x, a path, -k NAME). ILE_TEST_WORKERS=1 runs phase 1 serially too.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh  # PY: the project's own environment (.venv)
PYTHON=$PY bash scripts/install.sh --test
workers=${ILE_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}
[ "$workers" -ge 1 ] 2>/dev/null || workers=2
# a module's tests on one worker (its module fixtures built once), modules in the order tests/conftest.py gives
# them (browser first) rather than xdist's own (most tests first, which left a browser module running alone at the end)
parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
[ "$workers" -eq 1 ] && parallel=(-p no:xdist)
status=0
echo "[test] phase 1: every test that reads no clock against a bound, on $workers worker(s)"
"$PY" -m pytest "${parallel[@]}" -m "not serial" "$@" || status=$?
[ "$status" -eq 5 ] && status=0  # nothing collected (a path or -k that names only phase-2 tests)
echo "[test] phase 2: the timing tests (marker serial), one at a time"
rc=0
"$PY" -m pytest -p no:xdist -m "serial" "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0
[ "$status" -eq 0 ] && status=$rc
exit "$status"
