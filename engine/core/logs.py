"""The server's log, through the standard library's ``logging``: each module logs to ``logging.getLogger(__name__)``,
and one handler per package (``attach("engine")`` here, ``attach("ui")`` in ui/frame/boot.py) writes its lines to
stderr in the format the docs and tests read: ``[engine] worker: answer done session=... client=...``.

The channel in brackets is the record's ``channel`` (``extra={"channel": "boot"}``), ``engine`` by default. The
handler writes a line and its newline in one call (``logging.StreamHandler.emit``), under its lock: the app's script
threads and the engine worker share one stderr, and ``print()``'s two writes let another thread's line land between
them (two lines glued, then an empty one).
"""
from __future__ import annotations

import logging
import sys

DEFAULT_CHANNEL = "engine"


class LineFormatter(logging.Formatter):
    """``[channel] message``; a message keeps its own newlines (a traceback written with it)."""

    def format(self, record: logging.LogRecord) -> str:
        return f"[{getattr(record, 'channel', DEFAULT_CHANNEL)}] {record.getMessage()}"


class StderrHandler(logging.StreamHandler):
    """stderr as it is when a line is written, not when the handler was made (pytest and tests swap it)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(LineFormatter())

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets one: stderr is read at each line instead
        pass


def attach(package: str) -> logging.Logger:
    """Give ``package``'s loggers their one stderr handler, at INFO (once, however often it is called). They do not
    propagate to the root logger: a host that configures the root (Streamlit, pytest) would print each line twice."""
    logger = logging.getLogger(package)
    if not any(isinstance(h, StderrHandler) for h in logger.handlers):
        logger.addHandler(StderrHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger
