"""The background preparation's child process ends when the app that started it dies, even by SIGKILL (once,
after `kill -9` of the server, the Gemma conversion ran on alone as an orphan)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from engine.models import background
from tests.browser.harness import ROOT

PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1].replace("PARENT", str(os.getpid()))])
    print(child.pid, flush=True)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _orphan_after_kill(child_code: str) -> tuple[bool, float]:
    """Start a parent that starts a child running ``child_code`` (PARENT in it: the parent's pid); SIGKILL the
    parent; (child still alive after a few seconds, seconds it took to end)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, child_code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    child = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "running"  # the child's own line (it shares the parent's stdout)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    t0 = time.monotonic()
    while _alive(child) and time.monotonic() - t0 < 3 * background.PARENT_POLL_S + 2:
        time.sleep(0.05)
    took, alive = time.monotonic() - t0, _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    return alive, took


def test_the_child_ends_when_its_parent_is_killed():
    watched = ("import os, time; from engine.models.background import exit_with_parent; "
               "exit_with_parent(PARENT); print('running', flush=True); time.sleep(60)")
    alive, took = _orphan_after_kill(watched)
    assert not alive and took <= 2 * background.PARENT_POLL_S + 1, f"still running {took:.1f} s after the kill"
    unwatched = "import time; print('running', flush=True); time.sleep(60)"
    assert _orphan_after_kill(unwatched)[0], "without the watcher the child outlives its parent (the check can fail)"


def test_the_preparation_is_started_with_the_apps_pid_and_the_cli_watches_it(monkeypatch):
    import engine.__main__ as cli
    from engine.models import catalog, packaged

    cmd = background.prepare_command(catalog.GEMMA)
    assert cmd[cmd.index("--parent") + 1] == str(os.getpid()) and cmd[cmd.index("--model") + 1] == catalog.GEMMA
    watched = []
    monkeypatch.setattr(background, "exit_with_parent", lambda pid: watched.append(pid))
    monkeypatch.setattr(packaged, "is_converted", lambda r: True)
    assert cli.main(["prepare", "--model", "embedded", "--parent", "4242"]) == 0
    assert watched == [4242]
