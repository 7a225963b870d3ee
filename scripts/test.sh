#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (engine, figures, AppTest, real browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
exec "${PYTHON:-python3}" -m pytest "$@"
