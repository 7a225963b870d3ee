"""One line of the server's log in one write.

The app's script threads and the engine worker all write to one stderr, and ``print()`` writes its text and its
newline as two calls: another thread's line can land between them, and the log shows two lines glued together and
then an empty one (likeliest when stderr is unbuffered, PYTHONUNBUFFERED=1, where each call is a system call; the
worker's process switches threads every 0.5 ms). One call for the line and its newline keeps every line whole.
"""
from __future__ import annotations

import sys


def say(line: str) -> None:
    """Write ``line`` and a newline to stderr in one call, and flush."""
    sys.stderr.write(line.rstrip("\n") + "\n")
    sys.stderr.flush()


def log(msg: str) -> None:
    """One line of the engine's own in the server's log: ``[engine] msg``."""
    say(f"[engine] {msg}")
