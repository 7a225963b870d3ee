#!/usr/bin/env bash
# Sourced by install.sh, start.sh and test.sh: sets PY to the Python of the project's own environment, making it
# first if needed. Why an environment of its own: a stock Debian/Ubuntu Python refuses `pip install` into the
# system (PEP 668, "externally-managed-environment"), and a shared one would mix this project's pins with others'.
#
#   .venv/ in the checkout (ignored by git)   the default; made with `python3 -m venv`
#   ILE_VENV=/some/dir                        another place for it
#   PYTHON=/path/to/python                    use that interpreter as it is, make nothing (a conda env, a CI image)
#
# Unattended: no prompt, no sudo password (`sudo -n`), a clear line and exit 1 when it cannot proceed.
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
  return 0 2>/dev/null || exit 0
fi
_ile_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_ile_venv=${ILE_VENV:-$_ile_root/.venv}
_ile_base=${ILE_BASE_PYTHON:-}
if [ -z "$_ile_base" ]; then
  # torch 2.13.0 has wheels for 3.10-3.13; take the newest python3.x on PATH in that range, else python3.
  for v in 3.11 3.12 3.13 3.10; do
    command -v "python$v" >/dev/null 2>&1 && { _ile_base="python$v"; break; }
  done
  _ile_base=${_ile_base:-python3}
fi
if ! "$_ile_venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  command -v "$_ile_base" >/dev/null 2>&1 || { echo "[install] no $_ile_base on PATH: install Python 3.10-3.13 first" >&2; exit 1; }
  echo "[install] making the project's Python environment in $_ile_venv (from $("$_ile_base" -V 2>&1))"
  rm -rf "$_ile_venv"
  if ! "$_ile_base" -m venv "$_ile_venv" >/dev/null 2>&1; then
    # Debian/Ubuntu ship venv's pip bootstrap in a separate package (python3.X-venv).
    rm -rf "$_ile_venv"
    _ile_pkg="python$("$_ile_base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
    echo "[install] $_ile_base cannot make a virtual environment; installing Debian's $_ile_pkg"
    _ile_sudo=""; [ "$(id -u)" -ne 0 ] && _ile_sudo="sudo -n"
    { $_ile_sudo apt-get update -qq && $_ile_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$_ile_pkg" >/dev/null \
      && "$_ile_base" -m venv "$_ile_venv"; } || {
      echo "[install] could not make $_ile_venv: install $_ile_pkg (or python3-venv) and run this again" >&2
      exit 1; }
  fi
fi
PY=$_ile_venv/bin/python
unset _ile_root _ile_venv _ile_base _ile_pkg _ile_sudo
