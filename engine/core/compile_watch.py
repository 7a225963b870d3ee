"""What compiled mode's warm-up is doing while it runs, and how long the last one took.

The compile is one blocking call (``decode_step``'s first compiled pass), minutes on a 2-core CPU. torch says what
it is doing at each step of it through its own loggers (dynamo: "torchdynamo start tracing", "calling compiler
function inductor"; inductor: "torchinductor compiling FORWARDS graph 0", "... done compiling ..."): ``watched``
listens there, on the compiling thread only, and passes each step on as a phrase, with the graphs compiled so far.
The seconds of each finished warm-up are kept on disk (``remember``), per model, precision, device and cache
length, so the next one can be shown against the last: a restart keeps torch's compile cache, and so this record.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from engine.settings import cache_dir

RECORD = "compile_warmups.json"  # in the app's cache folder, beside torch's compiled kernels
LOGGERS = ("torch._dynamo", "torch._inductor")

# torch's step messages (their start) -> what a person reads; "{graph}" is the graph's number in this warm-up
PHASES = (
    ("torchdynamo start tracing", "tracing the decode step into a graph (dynamo)"),
    ("torchdynamo done tracing", "graph traced; handing it to the compiler"),
    ("calling compiler function", "the compiler takes the graph (AOT autograd, then inductor)"),
    ("torchinductor compiling", "inductor writes and builds the graph's C++/Triton kernels"),
    ("torchinductor done compiling", "kernels built"),  # not said when torch's cache on disk has the graph
    ("done compiler function", "graph compiled; the first compiled step runs"),
)
GRAPH_DONE = PHASES[-1][1]


def phrase(message: str) -> str | None:
    """torch's step message (e.g. "Step 3: torchinductor compiling FORWARDS graph 0") as a phrase, or None."""
    text = message.split(": ", 1)[1] if message.startswith("Step ") and ": " in message else message
    return next((words for start, words in PHASES if text.startswith(start)), None)


class _Relay(logging.Handler):
    """Passes on the compiling thread's step messages (another thread's compile is not this warm-up's)."""

    def __init__(self, say: Callable[[str], None]):
        super().__init__(logging.INFO)
        self.say, self.thread, self.graphs_done = say, threading.get_ident(), 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread:
            return
        try:
            words = phrase(record.getMessage())
        except Exception:  # noqa: BLE001 - a message torch formats oddly is simply not shown
            return
        if words is None:
            return
        if words == GRAPH_DONE:
            self.graphs_done += 1
        self.say(f"{words} (graphs compiled: {self.graphs_done})")


@contextmanager
def watched(say: Callable[[str], None] | None) -> Iterator[None]:
    """Within it, torch's compile steps on this thread reach ``say``. torch's own handlers keep printing only
    what they printed before (their levels are raised for the while, then put back)."""
    if say is None:
        yield
        return
    relay = _Relay(say)
    kept = []
    for name in LOGGERS:
        log = logging.getLogger(name)
        kept.append((log, log.level, [(h, h.level) for h in log.handlers]))
        for h in log.handlers:
            h.setLevel(max(h.level, log.getEffectiveLevel()))
        log.addHandler(relay)
        log.setLevel(min(log.getEffectiveLevel(), logging.INFO))
    try:
        yield
    finally:
        for log, level, handlers in kept:
            log.removeHandler(relay)
            log.setLevel(level)
            for h, h_level in handlers:
                h.setLevel(h_level)


def record_key(label: str, device: str, length: int) -> str:
    return f"{label} | {device} | decode step, static cache of {int(length)} positions"


def last_seconds(key: str) -> float | None:
    """The seconds the last warm-up of ``key`` took (``record_key``), or None when none was kept."""
    try:
        value = json.loads((cache_dir() / RECORD).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def remember(key: str, seconds: float) -> None:
    """Keep ``seconds`` as the last warm-up time of ``key`` (written whole, then renamed: never half a file)."""
    path = cache_dir() / RECORD
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
        data = data if isinstance(data, dict) else {}
        data[key] = round(float(seconds), 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{RECORD}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # a read-only cache folder: the next warm-up is shown without a last time


def compile_warm_up(lm, tokens: int, progress: Callable[[str], None] | None = None) -> None:
    """``loop.warm_up`` for compiled mode, with torch's compile steps passed to ``progress`` as they happen."""
    from engine.core.compiled import cache_length, graph_of
    from engine.core.loop import warm_up

    graph = graph_of(lm)
    length = None if graph is None else cache_length(tokens, graph.max_positions)
    had = graph is not None and length in graph.compile_s
    with watched(progress):
        warm_up(lm, tokens, progress=progress)
    if graph is not None and not had and length in graph.compile_s:
        remember(record_key(lm.ref.label(), str(lm.device), length), graph.compile_s[length])
