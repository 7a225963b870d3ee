"""What compiled mode's warm-up is doing while it runs, and how long the last one took.

The compile is one blocking call (``decode_step``'s first compiled pass), minutes on a 2-core CPU. torch says what
it is doing at each step of it through its own loggers (dynamo: "torchdynamo start tracing", "calling compiler
function inductor"; inductor: "torchinductor compiling FORWARDS graph 0", "... done compiling ..."): ``watched``
listens there, on the compiling thread only, and passes each step on as a phrase, with the torch graphs this compile made so far.
The seconds of each finished warm-up are kept on disk by the warm-up itself, per model, precision, device and graph
(``engine.core.compile_record.last_compile_s``), so the next one can be shown against the last.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


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
        self.say(f"{words} (torch graphs in this compile: {self.graphs_done})")


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


def compile_warm_up(lm, tokens: int, progress: Callable[[str], None] | None = None) -> None:
    """``loop.warm_up`` for compiled mode, with torch's compile steps passed to ``progress`` as they happen."""
    from engine.core.loop import warm_up

    with watched(progress):
        warm_up(lm, tokens, progress=progress)  # it keeps the graph's time (engine.core.compile_record.last_compile_s)


def compile_prefill(lm, n: int, tokens: int, progress: Callable[[str], None] | None = None) -> None:
    """``loop.warm_prefill`` (a prompt of ``n`` tokens' bucket, on the static cache of a run of ``tokens``) as a
    background compile job, torch's compile steps passed to ``progress`` as they happen."""
    from engine.core.loop import warm_prefill

    with watched(progress):
        warm_prefill(lm, n, tokens, progress=progress)
