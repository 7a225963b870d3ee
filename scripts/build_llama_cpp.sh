#!/usr/bin/env bash
# llama.cpp for the serving tests, compiled ONCE from the llama.cpp that llama-cpp-python $LLAMA_CPP_VERSION vendors
# (its sdist on PyPI holds the whole tree): one CMake tree builds the `llama-server` target and, on the way, the
# shared libraries it links (libllama, libggml*, libmtmd). The llama-cpp-python wheel is then made without compiling
# llama.cpp again and carries those same libraries. Kept in
#   ${ILE_WHEEL_CACHE:-~/.cache/ile-wheels}/llama.cpp-<version>-<key>/{bin/llama-server, bin/lib*.so*, *.whl}
#
# Portable, not -march=native: on a CPU with AMX, GGML_NATIVE=ON compiles ggml's AMX kernels, and with GCC 12 they
# fault. GCC 12's _tile_loadconfig (amxtileintrin.h) declares its memory operand as 8 bytes, so at -O2 the stores of
# the 64-byte tile configuration's rows and columns are dropped as dead, `ldtilecfg` reads stack garbage and the CPU
# raises a general protection fault (SIGSEGV): llama-server at "llama threadpool init", llama-cpp-python in its
# concurrency sweep (seen in gdb; docs/testing.md). The kernel grants AMX (arch_prctl) and a correct config runs.
# The instruction set is named below instead (AVX2, FMA, F16C, BMI2: x86-64 CPUs since 2013-2015), AVX-512 and AMX
# off, so the build no longer depends on the CPU it was made on. <key> hashes that flag list, the version, the machine
# type, the compiler and scripts/llama_cpp_build.cmake: changing a flag never reuses an older build, and the native
# builds kept under the older CPU-keyed folders are never read.
#
# The compile is shortened where nothing is computed: ggml and ggml-cpu (every kernel) keep Release's -O3, while the
# server, HTTP, chat/JSON, model-loading and multimodal code compile at -O1 and libmtmd's model graphs and common's
# chat parsers compile as a few unity files (llama_cpp_build.cmake): 372-389 CPU-seconds instead of 673, 10-12
# minutes instead of 20 on 2 busy cores, and the embedded GGUF decodes as fast as before (docs/testing.md).
#
#   bash scripts/build_llama_cpp.sh            build both unless they are there (prints where they are)
#   bash scripts/build_llama_cpp.sh --path     print where llama-server is (or would be), build nothing
#   bash scripts/build_llama_cpp.sh --wheel    print where the wheel is (or would be), build nothing
#   bash scripts/build_llama_cpp.sh --key      print the build key
#
# A failed build leaves build-failed.txt (the reason and the log's tail) in the folder; the next run tries again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-0.3.36}
# The instruction set, chosen explicitly (ggml's option names); everything newer is off.
ISA="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
NEEDS="avx2 fma f16c bmi2"  # /proc/cpuinfo names of what ISA turns on
# Shared libraries beside the binary, found through $ORIGIN wherever the folder is; no curl/OpenSSL, no web UI.
FLAGS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
-DCMAKE_INSTALL_RPATH=\$ORIGIN $ISA -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF"
# What is compiled at which -O, and which files compile together: llama_cpp_build.cmake (why, there).
TUNE="$(pwd)/scripts/llama_cpp_build.cmake"
key=$( (echo "$LLAMA_CPP_VERSION $FLAGS"; cat "$TUNE"; uname -m; c++ --version 2>/dev/null | head -n1) | sha256sum \
  | cut -c1-12)
dir="${ILE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ile-wheels}/llama.cpp-$LLAMA_CPP_VERSION-$key"
bin="$dir/bin/llama-server"
wheel="$dir/llama_cpp_python-$LLAMA_CPP_VERSION-py3-none-linux_x86_64.whl"
case "${1:-}" in
  --path) echo "$bin"; exit 0 ;;
  --wheel) echo "$wheel"; exit 0 ;;
  --key) echo "$key"; exit 0 ;;
esac
if [ -x "$bin" ] && [ -f "$wheel" ] && "$bin" --version >/dev/null 2>&1; then
  echo "[install] llama.cpp (from llama-cpp-python $LLAMA_CPP_VERSION) already built: $dir"
  exit 0
fi
mkdir -p "$dir"
rm -f "$dir/build-failed.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  { echo "$1"; [ -f "$work/build.log" ] && tail -n 30 "$work/build.log"; } > "$dir/build-failed.txt"
  echo "[install] WARNING: llama.cpp was not built ($1); the tests that need it skip, saying so (fail under CI)." >&2
  exit 0  # the rest of the install (and the other tests) go on
}
for f in $NEEDS; do
  grep -qw "$f" /proc/cpuinfo 2>/dev/null || fail "this CPU lacks $f, which the portable build uses ($NEEDS)"
done
if ! command -v g++ >/dev/null 2>&1 || ! command -v cmake >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq build-essential cmake \
    >/dev/null || fail "no C++ compiler or cmake, and they could not be installed"
fi
echo "[install] building llama.cpp from llama-cpp-python $LLAMA_CPP_VERSION once, for llama-server and the Python"
echo "          package (about 10 min on 2 busy cores, once per machine; kept in $dir)"
t0=$(date +%s)
$PY -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$work" >"$work/build.log" 2>&1 || fail "the sdist could not be downloaded"
tar xzf "$work"/llama_cpp_python-"$LLAMA_CPP_VERSION".tar.gz -C "$work" || fail "the sdist could not be unpacked"
pkg="$work/llama_cpp_python-$LLAMA_CPP_VERSION"
gen=""; command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S "$pkg/vendor/llama.cpp" -B "$work/build" $gen $FLAGS -DCMAKE_PROJECT_INCLUDE="$TUNE" >>"$work/build.log" 2>&1 \
  || fail "cmake could not configure llama.cpp"
# nice 19: the build shares the cores with whatever else runs; llama-server's target pulls in every library.
nice -n 19 cmake --build "$work/build" --target llama-server -j "$(nproc)" >>"$work/build.log" 2>&1 \
  || fail "the compile failed"
t1=$(date +%s)
rm -rf "$dir/bin.tmp" && mkdir -p "$dir/bin.tmp"
cp -a "$work/build/bin/llama-server" "$work/build/bin/"lib*.so* "$dir/bin.tmp/" || fail "the build made no llama-server"
"$dir/bin.tmp/llama-server" --version >>"$work/build.log" 2>&1 || fail "the built llama-server does not run"
# The Python package with the same libraries: LLAMA_BUILD=OFF (llama-cpp-python's own switch) skips its compile of
# llama.cpp, and a CMake file included into its project installs the libraries just built into llama_cpp/lib, where
# the package loads them by default (no LLAMA_CPP_LIB_PATH to carry into every process). install(FILES) copies
# through the symlinks: a wheel holds none.
echo "$key" > "$work/build/bin/ile-build.txt"  # which build is installed: scripts/install.sh compares it
cat > "$work/ship.cmake" <<'CMAKE'
file(GLOB PREBUILT_LIBS "${PREBUILT_LLAMA_LIBS}/lib*.so*" "${PREBUILT_LLAMA_LIBS}/ile-build.txt")
install(FILES ${PREBUILT_LIBS} DESTINATION ${SKBUILD_PLATLIB_DIR}/llama_cpp/lib)
CMAKE
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE=$work/ship.cmake -DPREBUILT_LLAMA_LIBS=$work/build/bin" \
  $PY -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/wheel" "$pkg" >>"$work/build.log" 2>&1 \
  || fail "the llama-cpp-python wheel could not be made"
made=$(ls "$work/wheel"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl 2>/dev/null | head -n1)
[ -n "$made" ] || fail "pip made no llama-cpp-python wheel"
rm -rf "$dir/bin" && mv "$dir/bin.tmp" "$dir/bin"
cp "$made" "$wheel.tmp" && mv "$wheel.tmp" "$wheel"
t2=$(date +%s)
echo "$(( t1 - t0 )) $(( t2 - t1 ))" > "$dir/build-seconds.txt"  # download and compile; the wheel
echo "[install] llama.cpp built in $(( t1 - t0 )) s, the wheel in $(( t2 - t1 )) s: $dir"
