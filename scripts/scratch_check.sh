#!/usr/bin/env bash
# The test suite's scratch space: its temporary folders and Chromium's profiles peak at about 0.7 GiB in TMPDIR
# (docs/testing.md), and a full disk breaks pytest itself (its output capture writes temporary files). Run by
# scripts/test.sh before anything is installed, so a full disk gets one clear line instead of 50 errors.
set -euo pipefail
scratch=${TMPDIR:-/tmp}
free_kib=$(df -Pk "$scratch" 2>/dev/null | awk 'NR == 2 { print $4 }')
if [ -n "$free_kib" ] && [ "$free_kib" -lt 1572864 ]; then
  echo "[test] only $((free_kib / 1024)) MiB free in $scratch; the suite needs about 1.5 GiB of scratch space there:" \
    "free some, or point TMPDIR at a roomier folder" >&2
  exit 1
fi
