#!/usr/bin/env bash
# Install, then start the app on the embedded model: http://localhost:8501, bound to this machine only; for a class,
# `bash scripts/start.sh --server.address 0.0.0.0` (README, "A class in five steps"). Stop it with Ctrl+C.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh  # PY: the project's own environment (.venv), made on first use
PYTHON=$PY bash scripts/install.sh
# The teacher's live class view (/batching?teacher=<token>): a fresh token for each start unless ILE_TEACHER_TOKEN
# is set. Only whoever has this link sees the class view.
export ILE_TEACHER_TOKEN="${ILE_TEACHER_TOKEN:-$("$PY" -c 'import secrets; print(secrets.token_urlsafe(9))')}"
# The warm-up below proves itself to the server with a secret of this start's (docs/class.md, "What the server
# trusts"): a header anyone can send would let a script's work run outside the class's seats.
export ILE_WARM_SECRET="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(18))')"
# X-Forwarded-For names the student's computer only when it comes from a proxy the teacher names
# (ILE_TRUSTED_PROXIES); uvicorn would otherwise trust it from this machine's own address.
export FORWARDED_ALLOW_IPS="${ILE_TRUSTED_PROXIES:-none}"
# (No file watcher: .streamlit/config.toml says why, for this start and a plain `streamlit run app.py` alike.)
args=(--server.address 127.0.0.1 "$@")  # a later option given wins, as streamlit reads them
# Once the server answers, scripts/warm.py prints the app's and the class view's links and warms the home page, so
# the first visitor finds the model loaded and the default run done (ILE_WARM=off skips the warming). Started from
# a subshell that exits at once, so it is not the server's child: it would stay a zombie of it after it ends, as
# the server never waits for children it did not start. $$ is this script, i.e. the server after the exec below.
( "$PY" scripts/warm.py --server-pid $$ --streamlit-args "${args[@]}" & )
exec "$PY" -m streamlit run app.py "${args[@]}"
