#!/usr/bin/env bash
# The cache key of what this project compiles with -march=native (the llama-cpp-python wheel, llama-server):
# a hash of this CPU's instruction-set flags, the machine type and the Python version, so that a build made on
# another CPU is never used here. Printed on stdout (12 hex digits).
set -euo pipefail
PY=${PYTHON:-python3}
(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null; uname -m; $PY -c 'import sys; print(sys.version_info[:2])') \
  | sha256sum | cut -c1-12
