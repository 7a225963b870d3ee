#!/usr/bin/env bash
# Install, then start the app on the embedded model (http://localhost:8501, bound to this machine only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec "${PYTHON:-python3}" -m streamlit run app.py --server.address 127.0.0.1 "$@"
