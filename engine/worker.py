"""One long-lived engine worker per process: every forward pass of every session runs on its single thread.

Why one thread (measured, see the commit that added this module): PyTorch on a CPU keeps one OpenMP team per
thread that runs torch work. A Streamlit server runs each script run on a fresh thread, and once several threads
have done torch work a decode step took ~62 ms instead of ~30 ms. A process would also keep torch on one thread,
but it would hold its own copy of every model and pickle every request and record across a pipe; a thread shares
the loaded models and returns plain records as they are.

- ``submit(fn, *args, key=..., session=...)`` queues a job and returns a ``Job`` at once. A second submit with the
  same (session, key) while the first is queued or running returns the first job (a double click does not queue
  a copy). A session holds at most ``MAX_QUEUED_PER_SESSION`` queued jobs: a newer one cancels the oldest.
- ``Job.result(timeout)`` waits; ``Job.cancel()`` asks the job to stop. Cancellation is cooperative: every forward
  pass in ``engine.loop`` calls ``check_cancelled()`` first, so a cancelled job raises ``Cancelled`` within one
  step. A job whose every waiter left (``Job.detach``) is cancelled after ``DETACH_GRACE_S`` unless a waiter comes
  back (a Streamlit rerun with the same inputs re-attaches to the running job instead of restarting it).
- Progress crosses threads as events: ``relay(tag)`` makes a callback for the engine code that records
  ``(tag, args)`` on the current job; the waiting thread drains them (``Job.events``) and draws them itself.

The engine never imports streamlit: ``ui/work.py`` is the Streamlit side (poll, stop, cancel).
"""
from __future__ import annotations

import collections
import contextvars
import itertools
import json
import os
import threading
import time
from typing import Any, Callable

MAX_QUEUED_PER_SESSION = 2
DETACH_GRACE_S = 1.0


class Cancelled(Exception):
    """The job was cancelled (its session left, or a newer click replaced it)."""


_current: contextvars.ContextVar["Job | None"] = contextvars.ContextVar("ile_current_job", default=None)


def current_job() -> "Job | None":
    return _current.get()


def check_cancelled() -> None:
    """Raise ``Cancelled`` if the job running on this thread should stop (no-op outside the worker)."""
    job = _current.get()
    if job is not None and job.should_stop():
        job._cancel_flag.set()
        raise Cancelled(f"job {job.key!r} cancelled")


def relay(tag: str) -> Callable[..., None]:
    """A callback for engine code that records ``(tag, args)`` on the job running it, for the waiter to draw.
    Outside a job it does nothing."""
    def cb(*args):
        job = _current.get()
        if job is not None:
            job._post(tag, args)
    return cb


class Job:
    _ids = itertools.count(1)

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, key: Any, session: Any):
        self.id = next(Job._ids)
        self.fn, self.args, self.kwargs, self.key, self.session = fn, args, kwargs, key, session
        self.state = "queued"  # queued | running | done | failed | cancelled
        self.submitted_at = time.monotonic()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._cancel_flag = threading.Event()
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._events: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._waiters = 1
        self._detached_at: float | None = None

    # -- the waiting side
    def result(self, timeout: float | None = None):
        if not self._done.wait(timeout):
            raise TimeoutError(f"job {self.key!r} still {self.state} after {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        self._cancel_flag.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel_flag.is_set()

    def events(self) -> list[tuple[str, tuple]]:
        """Progress events posted since the last call, oldest first."""
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

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

    def should_stop(self) -> bool:
        if self._cancel_flag.is_set():
            return True
        with self._lock:
            return self._waiters == 0 and self._detached_at is not None and \
                time.monotonic() - self._detached_at > DETACH_GRACE_S

    # -- the worker side
    def _post(self, tag: str, args: tuple) -> None:
        self._events.append((tag, args))

    def _finish(self, state: str, result=None, error: BaseException | None = None) -> None:
        self.state, self._result, self._error = state, result, error
        self.finished_at = time.monotonic()
        self._done.set()


class Worker:
    """The process's engine thread and its queue (first in, first out across sessions)."""

    def __init__(self, configure: Callable[[], None] | None = None, threads: int = 1, name: str = "ile-engine-worker",
                 publish: bool = True):
        self._publish_to_file = publish
        self._cv = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._running: list[Job] = []
        self._counts = collections.Counter()
        self._configure = configure
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}" if threads > 1 else name, daemon=True)
                         for i in range(max(1, int(threads)))]
        for t in self._threads:
            t.start()

    @property
    def thread(self) -> threading.Thread:
        return self._threads[0]

    def owns(self, thread: threading.Thread) -> bool:
        return thread in self._threads

    def submit(self, fn: Callable, *args, key: Any = None, session: Any = None, **kwargs) -> Job:
        with self._cv:
            if key is not None:
                for job in list(self._running) + list(self._queue):
                    if job.key == key and job.session == session and not job.should_stop():
                        job.attach()
                        self._counts["deduplicated"] += 1
                        return job
            if session is not None:
                mine = [j for j in self._queue if j.session == session and not j.cancelled]
                while len(mine) >= MAX_QUEUED_PER_SESSION:
                    old = mine.pop(0)
                    old.cancel()
                    self._counts["replaced"] += 1
            job = Job(fn, args, kwargs, key, session)
            self._queue.append(job)
            self._counts["submitted"] += 1
            self._cv.notify()
            return job

    def stats(self) -> dict:
        """What the worker is doing now (for tests and the health of a class session)."""
        with self._cv:
            run = self._running[0] if self._running else None
            return {
                "busy": run is not None,
                "running": None if run is None else {"key": repr(run.key)[:200], "session": repr(run.session)[:80],
                                                     "seconds": time.monotonic() - (run.started_at or 0)},
                "running_jobs": len(self._running),
                "queued": len(self._queue),
                **{k: int(v) for k, v in self._counts.items()},
            }

    def _publish(self) -> None:
        """With ILE_WORKER_STATS=path, write ``stats()`` there (atomically) whenever a job starts or ends: how a
        browser test sees the server's worker go idle after a tab closes."""
        path = os.environ.get("ILE_WORKER_STATS")
        if not path or not self._publish_to_file:
            return
        try:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.stats(), f)
            os.replace(tmp, path)
        except OSError:
            pass

    def idle(self) -> bool:
        with self._cv:
            return not self._running and not self._queue

    def _next(self) -> Job:
        with self._cv:
            while True:
                while self._queue:
                    job = self._queue.popleft()
                    if job.should_stop():
                        job._finish("cancelled", error=Cancelled(f"job {job.key!r} cancelled before it ran"))
                        self._counts["cancelled"] += 1
                        continue
                    self._running.append(job)
                    return job
                self._cv.wait()

    def _loop(self) -> None:
        if self._configure is not None:
            self._configure()
        while True:
            job = self._next()
            job.state, job.started_at = "running", time.monotonic()
            self._publish()
            token = _current.set(job)
            try:
                value = job.fn(*job.args, **job.kwargs)
            except Cancelled as exc:
                job._finish("cancelled", error=exc)
                self._counts["cancelled"] += 1
            except BaseException as exc:  # handed to the waiter, who shows it
                job._finish("failed", error=exc)
                self._counts["failed"] += 1
            else:
                job._finish("done", result=value)
                self._counts["done"] += 1
            finally:
                _current.reset(token)
                with self._cv:
                    self._running.remove(job)
                self._publish()


_WORKER: Worker | None = None
_WORKER_LOCK = threading.Lock()


def get_worker() -> Worker:
    """The process's one worker, started on first use with its thread count set once."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            from engine.timing import configure_worker_threads

            _WORKER = Worker(configure=configure_worker_threads)
        return _WORKER


def submit(fn: Callable, *args, key: Any = None, session: Any = None, **kwargs) -> Job:
    return get_worker().submit(fn, *args, key=key, session=session, **kwargs)


NET_THREADS = 8
_NET: Worker | None = None


def get_net_worker() -> Worker:
    """The process's worker for network jobs (the serving page's requests to a serving engine): the same jobs,
    waiters, detach-and-cancel and per-session queue as the engine worker, on ``NET_THREADS`` threads of their
    own, so a slow server never holds up a forward pass and one session's sweep never queues another's probe.
    No torch runs here (so no OpenMP team is made on these threads)."""
    global _NET
    with _WORKER_LOCK:
        if _NET is None:
            _NET = Worker(threads=NET_THREADS, name="ile-net-worker", publish=False)
        return _NET


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
    return JobCancel(_current.get())


def run(fn: Callable, *args, **kwargs):
    """Run ``fn`` on the worker and wait (for the command line and tests; no session, no key)."""
    w = get_worker()
    if w.owns(threading.current_thread()):
        return fn(*args, **kwargs)
    return w.submit(fn, *args, **kwargs).result()
