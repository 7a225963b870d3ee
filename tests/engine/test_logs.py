"""The server's log through stdlib logging (engine/core/logs.py): every line keeps the format the docs and the log
readers use (``[engine] worker: ... client=...``), and every line is whole: the script threads and the engine worker
write to one stderr, and print() (text, then newline: two writes) let one thread's line land inside another's (two
lines glued, then an empty one; with print() the threads test fails every time)."""
from __future__ import annotations

import io
import logging
import re
import sys
import threading

import engine  # noqa: F401  attaches the engine's handler
import ui  # noqa: F401  attaches the UI's handler
from engine.core import logs


def test_a_line_reads_channel_then_message(capsys):
    logging.getLogger("engine.jobs.worker").info("worker: answer done session=ab submitted_at=1.000 client=cd")
    logging.getLogger("ui.frame.boot").info("x not preloaded: y", extra={"channel": "boot"})
    logging.getLogger("ui.frame.models").info("100% loaded")  # no %-formatting without arguments
    logging.getLogger("engine.models.convert").debug("below the level: not written")
    assert capsys.readouterr().err.splitlines() == [
        "[engine] worker: answer done session=ab submitted_at=1.000 client=cd", "[boot] x not preloaded: y",
        "[engine] 100% loaded"]


def test_attaching_twice_keeps_one_handler():
    logs.attach("engine")
    logs.attach("engine")
    assert sum(isinstance(h, logs.StderrHandler) for h in logging.getLogger("engine").handlers) == 1
    assert not logging.getLogger("engine").propagate


def test_lines_from_two_threads_stay_whole(tmp_path, monkeypatch):
    out = tmp_path / "log.txt"
    with open(out, "wb") as raw:
        # unbuffered, as under PYTHONUNBUFFERED=1 (the browser tests' servers, many containers): each write() is a
        # system call, and print()'s two let the other thread in between (with print(): 1 failed run of 1, 3 times)
        monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, line_buffering=True, write_through=True))
        before = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)  # the engine worker's process switches threads this often
        try:
            def write(logger, tag):
                for i in range(20_000):
                    logger.info(f"[{tag}] line {i} " + "x" * 40)

            threads = [threading.Thread(target=write, args=(logging.getLogger("engine.jobs.worker"), "worker")),
                       threading.Thread(target=write, args=(logging.getLogger("ui.frame.models"), "page"))]
            [t.start() for t in threads]
            [t.join() for t in threads]
        finally:
            sys.setswitchinterval(before)
            sys.stderr.flush()
    lines = out.read_text().splitlines()
    assert len(lines) == 40_000
    assert all(re.fullmatch(r"\[engine\] \[(worker|page)\] line \d+ x{40}", ln) for ln in lines)
