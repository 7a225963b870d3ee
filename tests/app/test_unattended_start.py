"""The README's start command needs no keypress and no terminal: on a fresh HOME (no Streamlit credentials, so
Streamlit would ask for an email) `bash scripts/start.sh </dev/null &` serves the app; a person at a desktop
still gets a browser tab. (Not AppTest: real processes, started the way a person or a CI job starts them.)"""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from engine.settings import cache_dir
from tests.browser.harness import ROOT, free_port


def _start(cmd, env, log: Path):
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # no controlling terminal


def _wait_healthy(proc, url: str, log: Path, timeout: float) -> None:
    deadline = time.time() + timeout
    while True:
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            assert time.time() < deadline, f"not serving after {timeout} s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)


def _stop(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def fresh_home(tmp_path, embedded_lm):  # embedded_lm: the model is converted, so the start does not convert again
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), ILE_CACHE_DIR=str(cache_dir()), PYTHONUNBUFFERED="1")
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_CACHE_HOME"):
        env.pop(var, None)
    return env


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``, with their state letter (Z: a zombie, ended and never reaped)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out[int(d.name)] = fields[0]
    return out


def test_start_script_serves_in_the_background_on_a_fresh_home(fresh_home, tmp_path):
    """... and prints a class-view link that opens (not "<this server's address>"), one line per line, and leaves
    no zombie: scripts/warm.py, started beside the server, once stayed a zombie child of it."""
    port = free_port()
    log = tmp_path / "start.log"
    proc = _start(["bash", "scripts/start.sh", "--server.port", str(port)], fresh_home, log)
    try:
        _wait_healthy(proc, f"http://127.0.0.1:{port}", log, timeout=240)
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).status == 200
        deadline = time.time() + 300  # scripts/warm.py runs the home page once in the server, in the background
        while "[warm]" not in log.read_text() and time.time() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)  # warm.py has said its last line: it is ending
        children = _children(proc.pid)  # proc is the server: start.sh execs it
        link = re.search(r"\[start\] Class view for the teacher \(keep this link to yourself\): (\S+)",
                         log.read_text())
        assert link, log.read_text()[-3000:]
        assert link.group(1).startswith(f"http://localhost:{port}/batching?teacher=")
        assert urllib.request.urlopen(link.group(1), timeout=10).status == 200
    finally:
        _stop(proc)
    text = log.read_text()
    assert "Email" not in text and "[install] done" in text, text[-3000:]
    assert "[warm] the home page ran" in text, text[-3000:]
    assert "worker: answer (warm-up) done" in text, "the server knows the warm-up's session (X-ILE-Warm-Up)"
    assert "Z" not in children.values(), f"a zombie child of the server: {children}"
    assert "this machine only" in text and "<this server" not in text
    glued = [ln for ln in text.splitlines() if re.search(r"\S\s*\[(start|warm|engine|install)\] ", ln)]
    assert not glued, glued


def test_a_person_at_a_desktop_still_gets_a_browser_tab(fresh_home, tmp_path):
    """With a display, Streamlit's own default (not headless) opens the app through xdg-open: a stand-in records
    the URL it was given."""
    bin_dir, opened = tmp_path / "bin", tmp_path / "opened.txt"
    bin_dir.mkdir()
    (bin_dir / "xdg-open").write_text(f'#!/bin/sh\necho "$@" >> {opened}\n')
    (bin_dir / "xdg-open").chmod(0o755)
    env = dict(fresh_home, DISPLAY=":0", PATH=f"{bin_dir}{os.pathsep}{fresh_home['PATH']}")
    port = free_port()
    log = tmp_path / "run.log"
    proc = _start([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)], env, log)
    try:
        _wait_healthy(proc, f"http://127.0.0.1:{port}", log, timeout=90)
        deadline = time.time() + 20
        while not opened.exists() and time.time() < deadline:
            time.sleep(0.25)
    finally:
        _stop(proc)
    assert opened.exists() and f":{port}" in opened.read_text(), log.read_text()[-2000:]
    assert "Email" not in log.read_text()
