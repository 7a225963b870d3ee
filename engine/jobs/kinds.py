"""The worker's contract with the code it serves: a ``JobKind`` says what a kind of request is called, how one
request runs alone and, for a kind that batches, how a group of its requests is served together.

A kind is a plain frozen record defined by the module that owns the work (the class batcher's answers in
engine/jobs/classbatch.py, the prompts' analyses in engine/jobs/prompt_passes.py, the block walk in
engine/loop/inspect.py); a request is a frozen dataclass
of that module's (``AnswerRequest``, ``PromptRequest``, ...), submitted with ``Worker.ask(kind, request)``. The
worker looks at nothing else: no attribute on a function, no reading of positional arguments. A plain function
submitted with ``Worker.submit(fn, *args)`` is a job of its own kind (its name) that always runs alone.

Why a record passed at the call site and not a registry keyed by name: the caller already imports what it asks
for, so the contract is visible where a request is made and where its kind is defined, and nothing can register
late or twice.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Hashable, Protocol


class JobState(str, Enum):
    """Where a job is: queued, then running, then one of the three ends. A ``str`` too, so the class view's plain
    records and the server's log read the word itself ("done")."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class BatchHost(Protocol):
    """What a kind's ``together`` runner may ask of the worker that hands it a group (engine/jobs/worker.py)."""

    max_batch: int

    def admit(self, group: Hashable, room: int) -> list:
        """The queued jobs of ``group`` that may join now, in the fair order, at most ``room`` (they are running
        once returned: the runner must end each with ``complete``)."""

    def complete(self, job, state: JobState, result: Any = None, error: BaseException | None = None) -> None:
        """End one job: ``state`` is DONE, FAILED or CANCELLED."""

    def note_step(self, phase: str, start: float, end: float, rows: int) -> None:
        """One pass the runner made (monotonic times) and how many requests shared it, for the class view."""

    def pause(self) -> None:
        """Between two rounds, off the clock: let the host serve whoever is next in its fair order first (other
        kinds' requests, other batches, work that runs alone); it returns when this runner's turn comes again."""


def runs_alone(request: Any) -> None:
    """The group of a kind that never batches: none."""
    return None


@dataclass(frozen=True)
class JobKind:
    """What the worker serves: a name safe to show anyone (the class view, the queue line, the server's log; never
    a request's contents), how one request runs alone, and for a kind that batches, how a group is served.

    - ``alone(request)``: the result of one request run by itself (also what runs when batching is off, or when
      ``group`` says the request must run alone).
    - ``together(host, first)``: serves the job ``first`` and every job of its group the host admits, ending each
      with ``host.complete``; None: the kind never batches.
    - ``group(request)``: which requests may share a batch (equal groups batch; None: this one runs alone).
    - ``weight(request)``: what the request weighs in its client's share of a batch (engine/jobs/seats.py); None
      weighs 1."""

    name: str
    alone: Callable[[Any], Any]
    together: Callable[[BatchHost, Any], None] | None = None
    group: Callable[[Any], Hashable | None] = runs_alone
    weight: Callable[[Any], float] | None = None

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a job kind needs a name")
        if self.group is not runs_alone and self.together is None:
            raise ValueError(f"job kind {self.name!r} groups its requests but has no way to serve them together")

    def group_of(self, request: Any) -> Hashable | None:
        """The batch this request may join (None: it runs alone)."""
        return None if self.together is None else self.group(request)

    def weight_of(self, request: Any) -> float:
        """Its weight in a batch, at least 1 (an unusable request weighs 1 here and fails when it runs, with its
        own message)."""
        if self.weight is None:
            return 1.0
        try:
            return max(1.0, float(self.weight(request)))
        except Exception:
            return 1.0


def plain_kind_name(fn: Callable) -> str:
    """What a plain job is called where it is shown: its function's name (never its arguments)."""
    return getattr(fn, "__name__", None) or type(fn).__name__
