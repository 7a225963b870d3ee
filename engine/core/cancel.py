"""Cooperative cancellation: which job is running on this thread, and the check every forward pass makes first.

The engine worker (engine/jobs/worker.py) runs each job inside ``running(job)``; the one door to the model
(engine.core.loop) calls ``check_cancelled()`` before every pass, so a job whose session went away stops within one
step. Outside a job (the command line, a test calling the loop directly) there is no current job and the check does
nothing. The job is anything with ``should_stop()``, ``cancel()`` and a ``key`` (the worker's ``Job``).

``pause_point()`` marks a place between two steps of a job's work, off its clock, where the worker may serve
someone else first (a job that takes turns; see engine/jobs/worker.py). Outside a job, or for a job that does not
take turns, it does nothing.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Protocol


class Cancelled(Exception):
    """The job was cancelled (its session left, or a newer click replaced it)."""


class Stoppable(Protocol):
    key: Any

    def should_stop(self) -> bool: ...

    def cancel(self) -> None: ...

    def pause(self) -> None: ...


_current: contextvars.ContextVar[Stoppable | None] = contextvars.ContextVar("ile_current_job", default=None)


@contextlib.contextmanager
def running(job: Stoppable) -> Iterator[None]:
    """``job`` is the job running on this thread for the block."""
    token = _current.set(job)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> Stoppable | None:
    """The job running on this thread, or None outside the worker."""
    return _current.get()


def check_cancelled() -> None:
    """Raise ``Cancelled`` if the job running on this thread should stop (no-op outside the worker)."""
    job = _current.get()
    if job is not None and job.should_stop():
        job.cancel()
        raise Cancelled(f"job {job.key!r} cancelled")


def pause_point() -> None:
    """Between two steps, off the clock: the job running on this thread may give the engine to someone else here.
    Call it only where no timer is running and no ``torch.inference_mode`` block is open."""
    job = _current.get()
    if job is not None:
        job.pause()
