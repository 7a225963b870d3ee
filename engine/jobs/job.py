"""One piece of engine work and how its waiters see it: ``Job`` (queued, running, then one ``JobState`` end; its
result or error in a ``concurrent.futures.Future``), ``Task`` (started work: a greenlet on the worker's thread),
and the callbacks engine code uses from inside a job.

- ``Job.result(timeout)`` waits; ``Job.cancel()`` asks the job to stop. Cancellation is cooperative (a Future's own
  ``cancel`` cannot stop work that has started): every forward pass in ``engine.core.loop`` calls
  ``engine.core.cancel.check_cancelled()`` first, so a cancelled job raises ``Cancelled`` within one step. A job
  whose every waiter left (``Job.detach``) is cancelled after ``DETACH_GRACE_S`` unless a waiter comes back (a
  Streamlit rerun with the same inputs re-attaches to the running job instead of restarting it).
- Progress crosses threads as events: ``relay(tag)`` makes a callback for the engine code that records
  ``(tag, args)`` on the current job; the waiting thread drains them (``Job.events``) and draws them itself.
- ``cancel_event()``: a ``threading.Event`` for code that takes one (engine.serving), set once the job should stop.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import threading
import time
from typing import Any, Callable

import greenlet

from engine.core import cancel
from engine.jobs import seats
from engine.jobs.kinds import JobKind, JobState, plain_kind_name

DETACH_GRACE_S = 1.0


def session_tag(session: Any) -> str:
    """A short stable tag for a session (the class view and the log show this, never the session id)."""
    return "-" if session is None else hashlib.sha1(str(session).encode()).hexdigest()[:6]


def relay(tag: str) -> Callable[..., None]:
    """A callback for engine code that records ``(tag, args)`` on the job running it, for the waiter to draw.
    Outside a job it does nothing."""
    def cb(*args):
        job = cancel.current()
        if job is not None:
            job.post(tag, args)
    return cb


class Job:
    """One queued or running piece of work. A plain job runs ``fn(*args, **kwargs)``; an asked one (``spec``: its
    ``JobKind``) carries its typed ``request``, which a batch runner reads (``job.request.prompt``, ...)."""

    _ids = itertools.count(1)

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, key: Any, session: Any, batch: Any = None,
                 client: Any = None, weight: float = 1.0, warmup: bool = False, spec: JobKind | None = None,
                 request: Any = None):
        self.id = next(Job._ids)
        self.fn, self.args, self.kwargs, self.key, self.session = fn, args, kwargs, key, session
        self.spec, self.request = spec, request  # spec None: a plain function, which always runs alone
        # no address given (the command line, tests): each session is its own client
        self.client = client if client is not None else ("session", session)
        self.weight = float(weight)
        self.warmup = bool(warmup)  # the start's warm-up run: alone, joinable by anyone, not a student's answer
        self.batch = None if self.warmup else batch  # the group it may be batched with, or None: it runs alone
        self.kind = spec.name if spec is not None else plain_kind_name(fn)  # what the class view and log call it
        self.state = JobState.QUEUED
        self.future: concurrent.futures.Future = concurrent.futures.Future()  # its result or error, for every waiter
        self.submitted_at = time.monotonic()
        self.started_at: float | None = None
        self.first_token_at: float | None = None  # batched jobs: when its first token was chosen
        self.finished_at: float | None = None
        self.rows = 1  # the most requests in one pass while it ran (1: alone)
        self.tokens = 0  # batched jobs: tokens it was given
        self._cancel_flag = threading.Event()
        self._events: list = []  # every waiter reads them all (``events(since)``): a job can have several
        self._lock = threading.Lock()
        self._waiters = 1
        self._detached_at: float | None = None
        self.pause_hook: Callable[[], None] | None = None  # set by the worker when the job takes turns

    # -- the waiting side
    def result(self, timeout: float | None = None):
        try:
            return self.future.result(timeout)
        except concurrent.futures.TimeoutError:  # its own class before Python 3.11: one word for the waiter
            raise TimeoutError(f"job {self.key!r} still {self.state} after {timeout} s") from None

    def wait(self, timeout: float) -> bool:
        """Has it ended, waiting at most ``timeout`` seconds?"""
        return not concurrent.futures.wait([self.future], timeout).not_done

    @property
    def done(self) -> bool:
        return self.future.done()

    @property
    def waited_s(self) -> float:
        """Seconds between its submit and its start (so far, while still queued)."""
        return (self.started_at or time.monotonic()) - self.submitted_at

    def cancel(self) -> None:
        self._cancel_flag.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel_flag.is_set()

    def events(self, since: int = 0) -> list[tuple[str, tuple]]:
        """Progress events from the ``since``-th on, oldest first (a waiter passes how many it has drawn: a job
        joined by a second session posts each event once for both)."""
        return self._events[since:]

    def attach(self) -> None:
        with self._lock:
            self._waiters += 1
            self._detached_at = None

    def detach(self) -> None:
        """The waiter left (script run stopped). With no waiter left the job is cancelled after a short grace."""
        with self._lock:
            self._waiters = max(0, self._waiters - 1)
            if self._waiters == 0:
                self._detached_at = time.monotonic()

    def pause(self) -> None:
        """Between two steps of this job's work, off its clock (``engine.core.cancel.pause_point``): let the
        worker serve whoever is next in the fair order first. No-op for a job that does not take turns."""
        if self.pause_hook is not None:
            self.pause_hook()

    def should_stop(self) -> bool:
        if self._cancel_flag.is_set():
            return True
        with self._lock:
            return self._waiters == 0 and self._detached_at is not None and \
                time.monotonic() - self._detached_at > DETACH_GRACE_S

    # -- the worker side
    def post(self, tag: str, args: tuple) -> None:
        """A progress event for the waiters (``relay`` posts them from the engine code; the class batcher posts
        each request's step records to its own job)."""
        self._events.append((tag, args))

    def _finish(self, state: JobState, result=None, error: BaseException | None = None) -> None:
        self.state = JobState(state)
        self.finished_at = time.monotonic()
        if self.future.done():  # ended once already (a batch runner's failure after it ended its own): kept
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


class Task:
    """Work started on an engine thread, in a greenlet of its own: one job run alone, or a kind's ``together``
    runner serving a group. The thread's hub switches to it; it runs until it ends or pauses (``Worker.pause``).
    Greenlets, not threads: every task runs on the worker's one OS thread, so torch keeps one OpenMP team (see the
    module docstring), and a task stops only where its own code says it may (between two steps, off the clock)."""

    def __init__(self, job: Job, hub: greenlet.greenlet, run: Callable[[], None], group: Any, preemptible: bool):
        self.job = job  # the job it started with (a batch's first request)
        self.group = group  # the batch group it serves, or None: one job alone
        self.hub = hub
        self.glet = greenlet.greenlet(run, parent=hub)
        self.preemptible = preemptible  # False: it runs to its end once started (a timed experiment)
        self.last_ran = 0.0  # when its latest turn ended (0: never ran)


def batchable(job: Job) -> bool:
    """Is it of a kind that can be served in a batch (whether or not this one was)?"""
    return job.spec is not None and job.spec.together is not None


def seat(job: Job) -> seats.Seat:
    # a job with no session (the command line) is a tab of its own
    return seats.Seat(job.client, job.session if job.session is not None else ("job", job.id), job.weight)


class JobCancel(threading.Event):
    """An Event that is also set once ``job`` should stop (its waiters left, or it was cancelled): how code that
    takes a plain ``threading.Event`` (engine.serving) learns that its tab closed. Polled: ``is_set`` asks the job."""

    def __init__(self, job: "Job | None"):
        super().__init__()
        self._job = job

    def is_set(self) -> bool:
        if not super().is_set() and self._job is not None and self._job.should_stop():
            self.set()
        return super().is_set()


def cancel_event() -> threading.Event:
    """A cancel Event for the job running on this thread (a plain Event outside the worker)."""
    return JobCancel(cancel.current())
