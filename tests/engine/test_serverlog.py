"""Every line of the server's log is whole: the script threads and the engine worker write to one stderr, and
print() (text, then newline: two writes) let one thread's line land inside another's (two lines glued, then an
empty one; with print() this test fails every time)."""
from __future__ import annotations

import io
import re
import sys
import threading

from engine.core import serverlog


def test_lines_from_two_threads_stay_whole(tmp_path, monkeypatch):
    out = tmp_path / "log.txt"
    with open(out, "wb") as raw:
        # unbuffered, as under PYTHONUNBUFFERED=1 (the browser tests' servers, many containers): each write() is a
        # system call, and print()'s two let the other thread in between (with print(): 1 failed run of 1, 3 times)
        monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, line_buffering=True, write_through=True))
        before = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)  # the engine worker's process switches threads this often
        try:
            def write(say, tag):
                for i in range(20_000):
                    say(f"[{tag}] line {i} " + "x" * 40)

            threads = [threading.Thread(target=write, args=(serverlog.say, "worker")),
                       threading.Thread(target=write, args=(lambda s: serverlog.log(s), "page"))]
            [t.start() for t in threads]
            [t.join() for t in threads]
        finally:
            sys.setswitchinterval(before)
            sys.stderr.flush()
    lines = out.read_text().splitlines()
    assert len(lines) == 40_000
    assert all(re.fullmatch(r"(\[engine\] )?\[(worker|page)\] line \d+ x{40}", ln) for ln in lines)
