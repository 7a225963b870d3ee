"""Preparing a packaged model marked ``background`` in engine.models.catalog (Gemma 3 270M) off the request path: in
a child process, once per machine.

Why a child process: the conversion builds a tokenizer from the GGUF and dequantizes 268 M
parameters to float32 (peak about 2.6 GB of memory); in a process of its own that memory is returned to the
system when it ends, and nothing of it runs on a Streamlit script thread or on the engine worker that serves the
first page's forward passes. The app starts it when its first page is drawn (``start``), so a teacher's first
click on Gemma finds it ready; a page that asks for Gemma before then waits on the same process (``wait``).

Several processes (an install script, two app servers) converting at once are serialised by the file lock of
``engine.models.packaged.prepare``: the second finds the copy ready and returns.

The child is told the app's process id (``prepare_command``) and ends itself when the app is gone
(``exit_with_parent``): an app killed with SIGKILL cannot stop it, and the conversion went on alone for minutes,
with its 2.6 GB. Its unfinished temporary folder is removed by the next conversion.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import engine.settings as settings
from engine.models import catalog, packaged

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Preparation:
    """One background preparation: the watching thread, the child's log, and how it ended."""

    thread: threading.Thread
    log: Path
    state: str = "checking"  # checking | converting | ready | failed | not installed
    message: str = ""
    started: float = 0.0

    def last_line(self) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.startswith("[engine]")]
        except OSError:
            return ""
        return lines[-1][len("[engine] "):] if lines else ""


_LOCK = threading.Lock()
_CURRENT: dict[str, Preparation] = {}


def disabled(environ=None) -> bool:
    """``ILE_PREPARE_GEMMA=off``: never start the background conversion (a page that needs Gemma still can)."""
    return not settings.PREPARE_GEMMA.get(environ)


def _run(prep: Preparation, name: str) -> None:
    r = catalog.row(name)
    try:
        if not packaged.installed(r):
            prep.state, prep.message = "not installed", f"{r.sentence} is not installed. Run: {r.install}"
            return
        if packaged.is_converted(r):  # hashes the 1.07 GB copy once per process (a few seconds), here
            prep.state = "ready"
            return
        prep.state = "converting"
        prep.log.parent.mkdir(parents=True, exist_ok=True)
        with open(prep.log, "w") as out:
            code = subprocess.call(prepare_command(name), cwd=str(ROOT), stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if code == 0 and packaged.is_converted(r):
            prep.state = "ready"
        else:
            prep.state = "failed"
            prep.message = prep.last_line() or f"the conversion process ended with code {code}"
    except Exception as exc:  # noqa: BLE001 - reported to whoever waits on it, never raised in a thread
        prep.state, prep.message = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        logger.info(f"background preparation of {name}: {prep.state} {prep.message}".rstrip())


def prepare_command(name: str) -> list[str]:
    """The child's command line: convert ``name``, and end when this process is gone."""
    return [sys.executable, "-m", "engine", "prepare", "--model", name, "--parent", str(os.getpid())]


PARENT_POLL_S = 1.0


def exit_with_parent(parent: int) -> None:
    """In the child: end this process (exit code 3) within PARENT_POLL_S once ``parent`` is no longer its parent
    (the app that started it died, even by SIGKILL, and the child was handed to another process). A daemon
    thread: it asks the kernel who the parent is, so it works wherever Python runs, and a reused process id
    cannot fool it."""
    if os.getppid() != parent:
        os._exit(3)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def start(name: str) -> Preparation:
    """Start (once per process, again after a failure) the background preparation of the packaged model ``name``;
    returns it."""
    with _LOCK:
        prep = _CURRENT.get(name)
        if prep is not None and (prep.thread.is_alive() or prep.state == "ready"):
            return prep
        log = settings.cache_dir() / f"{packaged.copy_dir(catalog.row(name)).name}.prepare.log"
        prep = Preparation(threading.Thread(target=lambda: _run(prep, name), name=f"prepare-{name}", daemon=True), log,
                           started=time.time())
        _CURRENT[name] = prep
        prep.thread.start()
        return prep


def current(name: str) -> Preparation | None:
    return _CURRENT.get(name)
