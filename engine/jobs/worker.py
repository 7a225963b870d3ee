"""One long-lived engine worker per process: every forward pass of every session runs on its single thread.

Why one thread (measured, see the commit that added this module): PyTorch on a CPU keeps one OpenMP team per
thread that runs torch work. A Streamlit server runs each script run on a fresh thread, and once several threads
have done torch work a decode step took ~62 ms instead of ~30 ms. A process would also keep torch on one thread,
but it would hold its own copy of every model and pickle every request and record across a pipe; a thread shares
the loaded models and returns plain records as they are.

- ``submit(fn, *args, key=..., session=...)`` queues a plain job (``fn(*args, **kwargs)``, run alone) and returns
  a ``Job`` at once; ``ask(kind, request, key=..., session=...)`` queues a typed request of a ``JobKind``
  (engine/jobs/kinds.py: its name, how it runs alone, how a group of it is served together). A second submit with
  the same (session, key) while the first is queued or running returns the first job (a double click does not
  queue a copy). A session holds at most ``MAX_QUEUED_PER_SESSION`` queued jobs: a newer one cancels the oldest.
- The warm-up (``submit(..., warmup=True)``: scripts/warm.py's session after a start) is nobody's request: it runs
  alone, never in a batch, the class view does not count it, and anyone asking for the same key joins it (the
  first visitor's page is what it was for; batched with it, a lone teacher's first answer read "measured in a
  batch of 2").
- ``Job``, its Future, cancellation and progress events: engine/jobs/job.py; the worker's reports: report.py.

Serving a class: the worker is also a small server that takes turns.

- Each job knows its client (the address it came from: every tab of one machine is one client) besides its
  session, and its weight (``kind.weight(request)`` where its kind has one: a generation weighs more for a long
  prompt or many new tokens; 1 otherwise).
- Turns and fair order (docs/architecture.md, "The engine worker"): started work runs as tasks, greenlets on the
  worker's one thread; a task that takes turns (every asked request) calls ``pause()`` between two of its steps,
  off its clock, and the engine goes to the least-charged client (engine seconds charged per client: its virtual
  time), then the work that has waited longest. A plain function (``submit``: a timed experiment) never pauses.
- Batching: a request asked of a kind that batches, whose ``kind.group(request)`` is not None, is handed to
  ``kind.together`` (engine/jobs/classbatch.py) with the other queued requests of that group (same model object,
  so the same precision): continuous batching, requests join and leave between decode steps, each within the
  share of the batch its client and session may hold (engine/jobs/seats.py: seats kept for short questions, long
  rows per client, a fair share while others wait; ``place`` says why a request waits). A request that runs
  alone takes turns within the same seats (a client's long answers alone count as its long rows).
- Recent jobs and batch steps (no prompt text) feed the class view; each job's end goes to the server's log.
- ``ILE_BATCHING=off`` serves batchable jobs one at a time, each to its end (the serial worker, for comparison).
"""
from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from typing import Any, Callable

import greenlet

from engine.core import cancel
from engine.jobs import seats
from engine.jobs.job import Job, Task, seat
from engine.jobs.kinds import JobKind, JobState
from engine.jobs.report import Reporting
from engine.core.cancel import Cancelled
import engine.settings as settings

logger = logging.getLogger(__name__)

MAX_QUEUED_PER_SESSION = 2
HISTORY = 4000  # finished jobs and batch steps kept for the class view


class Worker(Reporting):
    """The process's engine thread and its queue (fair across clients; see the module docstring)."""

    def __init__(self, configure: Callable[[], None] | None = None, batching: bool | None = None,
                 max_batch: int | None = None, threads: int = 1, name: str = "ile-engine-worker",
                 publish: bool = True):
        self._publish_to_file = publish  # also: one line per finished job in the server's log
        self._cv = threading.Condition()
        self._queue: list[Job] = []
        self._running: list[Job] = []
        self._tasks: list[Task] = []  # started and not ended (running now or paused)
        self._task_of: dict[greenlet.greenlet, Task] = {}
        self._served: dict[Any, float] = {}  # session -> when its latest job started
        self._served_client: dict[Any, float] = {}  # client -> when its latest job started
        self._vt: dict[Any, float] = {}  # active client -> engine seconds charged to it (its virtual time)
        self._counts = collections.Counter()
        self._history: collections.deque = collections.deque(maxlen=HISTORY)  # finished jobs (plain dicts)
        self._steps: collections.deque = collections.deque(maxlen=HISTORY)  # (start, end, rows, phase)
        self._configure = configure
        self._native_ids: list[int] = []
        self._torch_threads: int | None = None
        self.batching = settings.BATCHING.get() if batching is None else bool(batching)
        self.max_batch = max(1, int(max_batch or settings.MAX_BATCH.get()))
        self.wall_offset = time.time() - time.monotonic()  # monotonic + this = wall clock (the log's times)
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}" if threads > 1 else name, daemon=True)
                         for i in range(max(1, int(threads)))]
        for t in self._threads:
            t.start()

    @property
    def thread(self) -> threading.Thread:
        return self._threads[0]

    def owns(self, thread: threading.Thread) -> bool:
        return thread in self._threads

    def close(self, timeout: float = 120.0) -> None:
        """End this worker's threads and wait for them; call it once its jobs have ended. A program that makes a
        worker of its own (a benchmark) closes it before it exits: a daemon thread still freeing a batch's tensors
        when Python shuts down is stopped inside torch's C++ code, and the process aborts ("terminate called
        without an active exception", exit status 134)."""
        for i in range(len(self._threads)):  # a session each: a session queues at most MAX_QUEUED_PER_SESSION
            self.submit(_end_thread, session=("close", id(self), i))
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)

    def submit(self, fn: Callable, *args, key: Any = None, session: Any = None, client: Any = None,
               warmup: bool = False, **kwargs) -> Job:
        """Queue ``fn(*args, **kwargs)``: a plain job, of its own kind (its name), that runs alone and to its end
        once started (its timings are its own)."""
        return self._queue_job(Job(fn, args, kwargs, key, session, None, client, 1.0, warmup))

    def ask(self, kind: JobKind, request: Any, *, key: Any = None, session: Any = None, client: Any = None,
            warmup: bool = False) -> Job:
        """Queue a typed ``request`` of ``kind``: served with the queued requests of its group when the kind
        batches (``kind.group(request)`` not None), else ``kind.alone(request)``, taking turns with other work
        between its steps."""
        batch = kind.group_of(request)
        weight = kind.weight_of(request)  # outside the lock: it may tokenize
        return self._queue_job(Job(kind.alone, (request,), {}, key, session, batch, client, weight, warmup,
                                   spec=kind, request=request))

    def _queue_job(self, job: Job) -> Job:
        """Queue ``job``, or return the live job of the same (session, key) that it would repeat."""
        key, session, warmup = job.key, job.session, job.warmup
        with self._cv:
            if key is not None:
                for live in self._running + self._queue:
                    if live.key == key and (live.session == session or live.warmup or warmup) and \
                            not live.should_stop():
                        live.attach()
                        self._counts["deduplicated"] += 1
                        return live
            if session is not None:
                mine = [j for j in self._queue if j.session == session and not j.cancelled]
                while len(mine) >= MAX_QUEUED_PER_SESSION:
                    old = mine.pop(0)
                    old.cancel()
                    self._counts["replaced"] += 1
            if job.client not in self._vt:  # a client that was idle starts level with the least-served active one
                self._vt[job.client] = min(self._vt.values(), default=0.0)
            self._queue.append(job)
            self._counts["submitted"] += 1
            self._cv.notify()
            return job

    # -- the fair order
    def _job_key(self, job: Job) -> tuple:
        """A queued job's place in the fair order: its client's charged engine time, then (never ran: 0) its
        client's and its session's latest starts (a script's new sessions do not go ahead of a student served
        once), its submit time."""
        return (self._vt.get(job.client, 0.0), 0.0, self._served_client.get(job.client, 0.0),
                self._served.get(job.session, 0.0), job.submitted_at, job.id)

    def _ordered(self) -> list[Job]:
        """The queue in fair order (``_job_key``)."""
        return sorted(self._queue, key=self._job_key)

    def _members(self, task: Task) -> list[Job]:
        """The running jobs a task serves (a batch: every row of its group)."""
        if task.group is None:
            return [task.job] if task.job in self._running else []
        return [j for j in self._running if j.batch == task.group]

    def _task_key(self, task: Task) -> tuple:
        """A started task's place in the fair order: the least-charged client among those it serves or would
        admit now (a batch serves many; a queued request of its group waits for its turn), then the longest
        idle. A task whose job should stop goes first: its next step ends it."""
        if task.group is None and task.job.should_stop():
            return (-1.0, 0.0, 0.0, 0.0, 0.0, task.job.id)
        clients = {j.client for j in self._members(task)}
        if task.group is not None:
            held = [seat(j) for j in self._members(task)]
            clients |= {j.client for j in self._queue if j.batch == task.group and self._refusal(j, held) is None}
        vt = min((self._vt.get(c, 0.0) for c in clients), default=0.0)
        return (vt, task.last_ran, 0.0, 0.0, task.job.submitted_at, task.job.id)

    def _alone_held(self) -> list[seats.Seat]:
        """The seats of the asked jobs running alone and taking turns (they count against their client's seats
        as a batch's rows do)."""
        return [seat(t.job) for t in self._tasks if t.group is None and t.preemptible]

    def _alone_refusal(self, job: Job) -> dict | None:
        """Why an asked job that runs alone may not start now (None: it may): the same seats as a batch's."""
        waiting = {j.client for j in self._queue if j.batch is None and j.spec is not None and j is not job}
        return seats.refusal(seat(job), self._alone_held(), waiting, self.max_batch)

    def _preemptible(self, job: Job) -> bool:
        """Does it take turns between its steps? Asked requests do (answers, analyses, block walks); a plain
        function runs to its end once started, so a timed experiment's clock never holds someone else's work.
        With batching off (the serial worker, for comparison) everything runs one at a time."""
        return job.spec is not None and self.batching and not job.warmup

    def _choose(self, hub: greenlet.greenlet) -> "Task | None":
        """The next turn on this thread, under the lock: the first in the fair order among its started tasks and
        the queued jobs that may start now (a job of a group whose batch is live joins that batch instead)."""
        live = {t.group for t in self._tasks if t.group is not None}
        best, best_key = None, None
        for t in self._tasks:
            if t.hub is hub:
                k = self._task_key(t)
                if best_key is None or k < best_key:
                    best, best_key = t, k
        for j in self._queue:
            grouped = j.batch is not None and self.batching
            if grouped and j.batch in live:
                continue
            if not grouped and self._preemptible(j) and self._alone_refusal(j) is not None:
                continue
            k = self._job_key(j)
            if best_key is None or k < best_key:
                best, best_key = j, k
        if best is None or isinstance(best, Task):
            return best
        return self._begin(best, hub)

    def _begin(self, job: Job, hub: greenlet.greenlet) -> Task:
        """Start ``job`` as a task of this thread (under the lock)."""
        self._start(job)
        if job.batch is not None and self.batching:  # asked of a kind that batches, and grouped: served together
            task = Task(job, hub, lambda: self._serve_group(job), job.batch, True)
        else:
            task = Task(job, hub, lambda: self._serve_alone(job), None, self._preemptible(job))
            if task.preemptible:
                job.pause_hook = self.pause
        self._tasks.append(task)
        self._task_of[task.glet] = task
        return task

    def _serve_group(self, job: Job) -> None:
        try:
            job.spec.together(self, job)
        except BaseException as exc:  # the runner ends its own jobs; any of its group it left fail here
            with self._cv:
                left = [j for j in self._running if j.batch == job.batch]
            for j in left:
                self.complete(j, JobState.FAILED, error=exc)

    def _serve_alone(self, job: Job) -> None:
        try:
            with cancel.running(job):
                value = job.fn(*job.args, **job.kwargs)
        except Cancelled as exc:
            self.complete(job, JobState.CANCELLED, error=exc)
        except BaseException as exc:  # handed to the waiter, who shows it
            self.complete(job, JobState.FAILED, error=exc)
        else:
            self.complete(job, JobState.DONE, result=value)

    def pause(self) -> None:
        """Called by a task between two steps of its work, off its clock: give the engine to the next in the fair
        order if that is someone else (the hub charges this turn's time first). No-op outside a task that takes
        turns, and inside ``torch.inference_mode`` (its state is the thread's, not the task's)."""
        task = self._task_of.get(greenlet.getcurrent())
        if task is None or not task.preemptible:
            return
        torch = sys.modules.get("torch")
        if torch is not None and torch.is_inference_mode_enabled():
            return
        with self._cv:
            if len(self._tasks) == 1 and not self._queue:
                return  # nobody else: no switch
        grad = torch.is_grad_enabled() if torch is not None else None
        task.hub.switch()
        if grad is not None:
            torch.set_grad_enabled(grad)

    def _turn(self, task: Task) -> None:
        """Run ``task`` until it pauses or ends; charge the time to the clients it served."""
        with self._cv:
            payers = collections.Counter(j.client for j in self._members(task)) or \
                collections.Counter([task.job.client])
        t0 = time.monotonic()
        task.glet.switch()
        task.last_ran = time.monotonic()
        spent = task.last_ran - t0
        with self._cv:
            rows = sum(payers.values())
            for client, n in payers.items():
                if client in self._vt:
                    self._vt[client] += spent * n / rows
            if task.glet.dead:
                self._tasks.remove(task)
                self._task_of.pop(task.glet, None)

    def _start(self, job: Job) -> None:
        self._queue.remove(job)
        job.state, job.started_at = JobState.RUNNING, time.monotonic()
        self._served[job.session] = self._served_client[job.client] = job.started_at
        self._running.append(job)

    def _idle_client(self, client: Any) -> None:
        """Forget a client's charged time once it has nothing queued or running (under the lock): who comes back
        starts level with the least-served active client, neither owed nor owing (the map stays bounded)."""
        if not any(j.client == client for j in self._running) and not any(j.client == client for j in self._queue):
            self._vt.pop(client, None)

    def _drop_stopped(self) -> int:
        """End the queued jobs nobody waits for any more; how many were dropped (the caller publishes the new
        state: a dropped job left out of the stats file read as a job queued forever on an idle worker)."""
        stopped = [j for j in self._queue if j.should_stop()]
        for job in stopped:
            self._queue.remove(job)
            job._finish(JobState.CANCELLED, error=Cancelled(f"job {job.key!r} cancelled before it ran"))
            self._counts[JobState.CANCELLED.value] += 1
            self.remember(job)
            self._idle_client(job.client)
        return len(stopped)

    def admit(self, group: Any, room: int) -> list[Job]:
        """For a running batch, between two steps: the queued jobs of ``group`` that come next in the fair order
        and may take a seat (engine/jobs/seats.py), up to ``room``. Jobs of other groups do not hold them back:
        those take their own turns between the batch's steps."""
        out: list[Job] = []
        with self._cv:
            dropped = self._drop_stopped()
            held = [seat(j) for j in self._running if j.batch == group]
            for job in self._ordered():
                if len(out) >= room or not self.batching:
                    break
                if job.batch != group or self._refusal(job, held) is not None:
                    continue  # it waits; the next one in the fair order may fit
                self._start(job)
                held.append(seat(job))
                out.append(job)
        if out or dropped:
            self.publish()
        return out

    def _refusal(self, job: Job, held: list) -> dict | None:
        """Why ``job`` may not join its group's batch beside ``held`` now (None: it may). Under the lock."""
        waiting = {j.client for j in self._queue if j.batch == job.batch and j is not job}
        return seats.refusal(seat(job), held, waiting, self.max_batch)


    def complete(self, job: Job, state: JobState, result=None, error: BaseException | None = None) -> None:
        """End a running job (the batch runner ends each of its requests here)."""
        job._finish(state, result=result, error=error)
        with self._cv:
            if job in self._running:
                self._running.remove(job)
            self._counts[JobState(state).value] += 1
            self.remember(job)
            self._idle_client(job.client)
        self.log_end(job)


    def _next(self, hub: greenlet.greenlet) -> Task:
        with self._cv:
            while True:
                if self._drop_stopped():
                    self.publish()  # the condition's lock is re-entrant: stats() may take it again
                task = self._choose(hub)
                if task is not None:
                    return task
                self._cv.wait()

    def _loop(self) -> None:
        if self._configure is not None:
            self._configure()
        self._native_ids.append(threading.get_native_id())
        hub = greenlet.getcurrent()
        while True:
            self._torch_threads = _torch_threads()
            task = self._next(hub)
            if task.job.fn is _end_thread and task.group is None:
                self.complete(task.job, JobState.DONE, result=None)
                with self._cv:
                    self._tasks.remove(task)
                    self._task_of.pop(task.glet, None)
                self.publish()
                return
            self.publish()
            fresh = task.last_ran == 0.0
            self._turn(task)
            if fresh or task.glet.dead:
                self.publish()
            torch = sys.modules.get("torch")
            if torch is not None:
                torch.set_grad_enabled(True)  # a task that paused restores its own; a fresh one starts as a thread does


def _end_thread() -> None:
    """The job that ends the worker thread taking it (``Worker.close``); never called."""


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")  # never imports it: a worker of plain callables stays torch-free
    return torch.get_num_threads() if torch is not None else None


_WORKER: Worker | None = None
_WORKER_LOCK = threading.Lock()


# The GIL's switch interval beside Streamlit's script threads: the worker gives the GIL back at every torch op, and
# a thread busy in Python keeps it up to the interval each time: its passes took several times longer at the default
# 5 ms than at 0.5 ms (docs/benchmarks.md).
WORKER_SWITCH_INTERVAL_S = 0.0005


def get_worker() -> Worker:
    """The process's one worker, started on first use with its thread count set once (and the process's GIL
    switch interval at most ``WORKER_SWITCH_INTERVAL_S``)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            from engine.measure.timing import configure_worker_threads

            if sys.getswitchinterval() > WORKER_SWITCH_INTERVAL_S:
                sys.setswitchinterval(WORKER_SWITCH_INTERVAL_S)
            _WORKER = Worker(configure=configure_worker_threads)
        return _WORKER


def submit(fn: Callable, *args, key: Any = None, session: Any = None, client: Any = None, warmup: bool = False,
           **kwargs) -> Job:
    return get_worker().submit(fn, *args, key=key, session=session, client=client, warmup=warmup, **kwargs)


def ask(kind: JobKind, request: Any, *, key: Any = None, session: Any = None, client: Any = None,
        warmup: bool = False) -> Job:
    return get_worker().ask(kind, request, key=key, session=session, client=client, warmup=warmup)


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


def run(fn: Callable, *args, **kwargs):
    """Run ``fn`` on the worker and wait (for the command line and tests; no session, no key)."""
    w = get_worker()
    if w.owns(threading.current_thread()):
        return fn(*args, **kwargs)
    return w.submit(fn, *args, **kwargs).result()
