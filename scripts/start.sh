#!/usr/bin/env bash
# Install, then start the app on the embedded model (http://localhost:8501, bound to this machine only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# The teacher's live class view (/batching?teacher=<token>, README "Serving a class on a LAN"): a fresh token for
# each start unless ILE_TEACHER_TOKEN is set. Only whoever has this link sees the class view.
export ILE_TEACHER_TOKEN="${ILE_TEACHER_TOKEN:-$("${PYTHON:-python3}" -c 'import secrets; print(secrets.token_urlsafe(9))')}"
echo "Class view for the teacher (keep this link to yourself): <this server's address>/batching?teacher=${ILE_TEACHER_TOKEN}"
# Warm the home page in the background once the server answers, so the first visitor finds the model loaded and
# the default run done (scripts/warm.py; ILE_WARM=off skips it).
"${PYTHON:-python3}" scripts/warm.py --streamlit-args "$@" &
exec "${PYTHON:-python3}" -m streamlit run app.py --server.address 127.0.0.1 "$@"
