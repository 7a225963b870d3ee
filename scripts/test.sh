#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (engine, figures, AppTest, real browser) in two phases:
#   1. every test that reads no clock against a bound, on one pytest worker per core (pytest-xdist): the unit,
#      model and AppTest tiers are single-threaded Python for most of their time;
#   2. the browser tier and the timing tests (marker `serial`), one at a time, as a person's machine runs the app:
#      their servers, Chromium and the CLI peers they compare with must not share the cores with other tests.
# Extra arguments go to both phases (e.g. -q, -x, a path, -k NAME). ILE_TEST_WORKERS=1 runs phase 1 serially too.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh  # PY: the project's own environment (.venv)
PYTHON=$PY bash scripts/install.sh --test
workers=${ILE_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}
[ "$workers" -ge 1 ] 2>/dev/null || workers=2
parallel=(-n "$workers" --dist load)
[ "$workers" -eq 1 ] && parallel=(-p no:xdist)
status=0
echo "[test] phase 1: unit, model and app tiers on $workers worker(s)"
"$PY" -m pytest "${parallel[@]}" -m "not browser and not serial" "$@" || status=$?
[ "$status" -eq 5 ] && status=0  # nothing collected (a path or -k that names only phase-2 tests)
echo "[test] phase 2: browser tier and timing tests, one at a time"
rc=0
"$PY" -m pytest -p no:xdist -m "browser or serial" "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0
[ "$status" -eq 0 ] && status=$rc
exit "$status"
