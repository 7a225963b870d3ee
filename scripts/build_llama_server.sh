#!/usr/bin/env bash
# llama.cpp's own HTTP server (`llama-server`), built from the llama.cpp source that llama-cpp-python
# $LLAMA_CPP_VERSION vendors (its sdist on PyPI holds the whole tree, tools/server included), so the serving tests
# measure the same llama.cpp the wheel runs. Built once per machine and kept beside the wheel:
#   ${ILE_WHEEL_CACHE:-~/.cache/ile-wheels}/<cpu>/llama-server-<version>/llama-server
# (<cpu>: scripts/cpu_key.sh; compiled with -march=native, so a binary built on another CPU is never used here).
#
#   bash scripts/build_llama_server.sh          build it unless it is there (prints where it is)
#   bash scripts/build_llama_server.sh --path   print where it is (or would be), build nothing
#
# A failed build leaves build-failed.txt (the reason and the log's tail) beside it: the tests skip with that
# reason instead of failing, and the next run tries again. Only the server target is compiled (Release,
# static libraries, no curl/OpenSSL, no web UI download).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-0.3.36}
cpu=$(bash scripts/cpu_key.sh)
dir="${ILE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ile-wheels}/$cpu/llama-server-$LLAMA_CPP_VERSION"
bin="$dir/llama-server"
if [ "${1:-}" = "--path" ]; then
  echo "$bin"
  exit 0
fi
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "[install] llama-server (llama.cpp from llama-cpp-python $LLAMA_CPP_VERSION) already built: $bin"
  exit 0
fi
mkdir -p "$dir"
rm -f "$dir/build-failed.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  { echo "$1"; [ -f "$work/build.log" ] && tail -n 30 "$work/build.log"; } > "$dir/build-failed.txt"
  echo "[install] WARNING: llama-server was not built ($1); the tests that need it will skip, saying so." >&2
  exit 0  # the rest of the install (and the other tests) go on
}
if ! command -v g++ >/dev/null 2>&1 || ! command -v cmake >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq build-essential cmake \
    >/dev/null || fail "no C++ compiler or cmake, and they could not be installed"
fi
echo "[install] building llama-server from llama-cpp-python $LLAMA_CPP_VERSION's llama.cpp (the server target only;"
echo "          about 20 min on 2 busy cores, once per machine; kept in $dir)"
t0=$(date +%s)
$PY -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$work" >"$work/build.log" 2>&1 || fail "the sdist could not be downloaded"
tar xzf "$work"/llama_cpp_python-"$LLAMA_CPP_VERSION".tar.gz -C "$work" || fail "the sdist could not be unpacked"
src="$work/llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
gen=""; command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S "$src" -B "$work/build" $gen -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  >>"$work/build.log" 2>&1 || fail "cmake could not configure llama.cpp"
cmake --build "$work/build" --target llama-server -j "$(nproc)" >>"$work/build.log" 2>&1 || fail "the compile failed"
cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
"$bin" --version >/dev/null 2>&1 || fail "the built llama-server does not run"
secs=$(( $(date +%s) - t0 ))
echo "$secs" > "$dir/build-seconds.txt"
echo "[install] llama-server built in $secs s: $bin"
