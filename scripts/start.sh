#!/usr/bin/env bash
# Install, then start the app on the embedded model (http://localhost:8501, bound to this machine only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# Warm the home page in the background once the server answers, so the first visitor finds the model loaded and
# the default run done (scripts/warm.py; ILE_WARM=off skips it).
"${PYTHON:-python3}" scripts/warm.py --streamlit-args "$@" &
exec "${PYTHON:-python3}" -m streamlit run app.py --server.address 127.0.0.1 "$@"
