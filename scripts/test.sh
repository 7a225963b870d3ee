#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (engine, figures, AppTest, real browser).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh  # PY: the project's own environment (.venv)
PYTHON=$PY bash scripts/install.sh --test
exec "$PY" -m pytest "$@"
