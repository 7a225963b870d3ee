"""Compiles in the background: a graph of compiled mode is compiled on a thread of its own, while the engine's
worker keeps answering eager, and a page switches to the graph once it is ready.

Why a thread of its own and not the engine's worker: a compile is one blocking call of minutes on a 2-core CPU
(dynamo traces, inductor writes and builds C++), and the worker serves the whole room one turn at a time; a compile
there held every student's page for its whole length (issue 49). Here the worker goes on between the compile's
steps: torch's operators release the GIL while they compute, and the interpreter's switch interval is shortened
while a compile runs, so the worker waits at most a fraction of a millisecond for the GIL between two operators
instead of the default 5 ms (a decode step of a few hundred operators would otherwise wait seconds).

Why a compile can be cancelled: it runs only torch's own Python and the compiler it calls, so a cancel raises
``CompileCancelled`` in the compiling thread (CPython's asynchronous exception), which lands at the thread's next
bytecode: dynamo and inductor stop there (a C++ build already started ends first). It derives from BaseException,
so torch's ``except Exception`` handlers do not take it for a failure of the model (which would send every later
run eager): the graph is simply not compiled, and the next compile starts it again.

What the rest of the house relies on: while a compile of a model runs (``busy``), that model's compiled runs go
eager (ui.frame.models routes them), so the compiling thread is the only user of the model's static caches and
compiled functions; the worker never compiles a graph the compiler has.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterator

from engine.core import fx_threads
from engine.core.compile_watch import compile_prefill, compile_warm_up, watched
from engine.core.compiled import compile_status, graph_of, shaped_of
from engine.core.compile_record import COMPILER_THREAD, cache_length, decode_name, last_compile_s
from engine.core.loaded import ModelRef
from engine.core.prefill_buckets import bucket_graphs, run_tokens

# A compile traces with torch.fx, which patches torch.nn.Module for the whole process while it traces: the patches
# are made to apply to the compiling thread only (engine.core.fx_threads); where they cannot be, compiled mode is
# refused (engine.core.compiled.compiler_missing)
fx_threads.install()
SWITCH_INTERVAL_S = 0.0005  # the interpreter's GIL switch interval while a compile runs (default 0.005)


class CompileCancelled(BaseException):
    """Raised in the compiling thread when its compile is cancelled (see the module's docstring)."""


class CompileState(Enum):
    QUEUED = "queued"
    RUNNING = "compiling"
    READY = "ready"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class CompileJob:
    """One graph of one compiled model, compiled by ``fn(*args, progress=...)`` on the compiler's thread."""

    ref: ModelRef
    name: str  # the graph (engine.core.compiled's names, e.g. "decode step, static cache of 256 positions")
    fn: Callable
    args: tuple
    lm: object = field(repr=False, default=None)
    graph: object = field(repr=False, default=None)  # a weak reference to the model's DecodeGraph
    state: CompileState = CompileState.QUEUED
    step: str = ""  # the warm-up's step (engine.core.loop.warm_up: "Prefill ...", "Step 1 of 3 ...")
    phase: str = ""  # torch's phase within the step (engine.core.compile_watch)
    last_s: float | None = None  # this graph's last measured compile time (cache folder), None if never measured
    started: float | None = None
    seconds: float | None = None  # how long it took, once it ended
    failure: str | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def active(self) -> bool:
        return self.state in (CompileState.QUEUED, CompileState.RUNNING)

    def so_far(self) -> float:
        if self.started is None:
            return 0.0
        return self.seconds if self.seconds is not None else time.monotonic() - self.started

    def line(self) -> str:
        """One line for a page: the graph, its state, the time so far against the last time."""
        last = f"last time {self.last_s:.0f} s" if self.last_s is not None else "first compile: time unknown"
        if self.state is CompileState.QUEUED:
            return f"{self.name}: waiting for the compile before it ({last})"
        if self.state is CompileState.RUNNING:
            said = " · ".join(x for x in (self.step, self.phase) if x)
            return f"{self.name}: {self.so_far():.0f} s so far ({last})" + (f" · {said}" if said else "")
        if self.state is CompileState.READY:
            return f"{self.name}: ready in {self.so_far():.0f} s"
        if self.state is CompileState.FAILED:
            return f"{self.name}: {self.failure or 'could not compile'}"
        return f"{self.name}: cancelled after {self.so_far():.0f} s"


@contextmanager
def _short_switch() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class BackgroundCompiler:
    """A queue of compile jobs and the one thread that runs them, one at a time, in the order asked."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._queue: deque[CompileJob] = deque()
        self._jobs: dict[tuple[ModelRef, str], CompileJob] = {}
        self._running: CompileJob | None = None
        self._in_fn = False  # the running job is inside its fn (where a cancel may land)
        self._thread: threading.Thread | None = None

    def submit(self, lm, name: str, fn: Callable, *args) -> CompileJob:
        """Compile graph ``name`` of ``lm`` with ``fn(*args, progress=...)``; the job of that graph when one is queued,
        running or ready already (a failed or cancelled one is asked again)."""
        key = (lm.ref, name)
        graph = graph_of(lm)
        with self._lock:
            job = self._jobs.get(key)
            same = job is not None and job.graph is not None and job.graph() is graph  # not a model loaded again
            if same and job.state in (CompileState.QUEUED, CompileState.RUNNING, CompileState.READY):
                return job
            job = CompileJob(lm.ref, name, fn, args, lm=lm, graph=weakref.ref(graph) if graph is not None else None,
                             last_s=last_compile_s(lm, name))
            self._jobs[key] = job
            self._queue.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=COMPILER_THREAD, daemon=True)
                self._thread.start()
            self._lock.notify_all()
            return job

    def busy(self, ref: ModelRef) -> bool:
        """Is a compile of this model queued or running? (Its compiled runs are then eager: the module's docstring.)"""
        with self._lock:
            return any(j.active for (r, _), j in self._jobs.items() if r == ref)

    def jobs(self, ref: ModelRef) -> list[CompileJob]:
        with self._lock:
            return [j for (r, _), j in self._jobs.items() if r == ref]

    def cancel(self, ref: ModelRef) -> int:
        """Cancel every queued or running compile of this model; returns how many. The running one stops at its
        thread's next bytecode."""
        n = 0
        with self._lock:
            for job in list(self._queue):
                if job.ref == ref:
                    self._queue.remove(job)
                    self._end(job, CompileState.CANCELLED)
                    n += 1
            job = self._running
            if job is not None and job.ref == ref and job.state is CompileState.RUNNING:
                job.state = CompileState.CANCELLED
                if self._in_fn and self._thread is not None:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident),
                                                               ctypes.py_object(CompileCancelled))
                n += 1
        return n

    def wait(self, job: CompileJob, timeout: float | None = None) -> bool:
        return job.done.wait(timeout)

    def wait_idle(self, ref: ModelRef, timeout: float | None = None) -> bool:
        """Wait until no compile of this model is queued or running (a benchmark, before its clocks start);
        returns whether any was."""
        waited, end = False, None if timeout is None else time.monotonic() + timeout
        while True:
            active = [j for j in self.jobs(ref) if j.active]
            if not active:
                return waited
            waited = True
            left = None if end is None else max(0.0, end - time.monotonic())
            if not active[0].done.wait(left) and left == 0.0:
                return waited

    def _end(self, job: CompileJob, state: CompileState, failure: str | None = None) -> None:
        job.state, job.failure = state, failure
        shaped = shaped_of(job.lm) if job.lm is not None and state is not CompileState.READY else None
        if shaped is not None and job.name in shaped.to_do:  # cancelled or failed: no longer to do
            shaped.to_do.remove(job.name)
        if job.started is not None and job.seconds is None:
            job.seconds = time.monotonic() - job.started
        job.lm = None  # the model is not kept alive by a finished job
        job.done.set()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait(timeout=60)
                    if not self._queue:
                        self._thread = None  # idle: a later submit starts a new thread
                        return
                job = self._queue.popleft()
                job.state, job.started, self._running = CompileState.RUNNING, time.monotonic(), job
            self._run(job)

    def _run(self, job: CompileJob) -> None:
        lm = job.lm

        def said(msg: str) -> None:
            if msg.startswith(("Prefill", "Step ")):
                job.step, job.phase = msg, ""
            else:
                job.phase = msg

        graph = graph_of(lm)
        try:
            try:
                if graph is not None:
                    graph.compiling_in = threading.get_ident()
                with _short_switch(), watched(said):
                    with self._lock:
                        self._in_fn = job.state is CompileState.RUNNING
                    if self._in_fn:
                        job.fn(*job.args, progress=said)
            finally:
                with self._lock:
                    self._in_fn = False
                if graph is not None:
                    graph.compiling_in = None
            status = compile_status(lm)
            failure = status.failure if status is not None else None
            with self._lock:
                if job.state is CompileState.RUNNING:
                    self._end(job, CompileState.FAILED if failure else CompileState.READY, failure)
                else:
                    self._end(job, CompileState.CANCELLED)
        except CompileCancelled:
            with self._lock:
                self._end(job, CompileState.CANCELLED)
        except BaseException as exc:  # noqa: BLE001 - the compiler thread never dies: the job says what went wrong
            with self._lock:
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                self._end(job, CompileState.FAILED, f"{type(exc).__name__}: {first}")
        finally:
            with self._lock:
                self._running = None


COMPILER = BackgroundCompiler()  # the server's one compiler (a thread of its own; the worker's is for answers)


def run_graphs(lm, prompt_tokens: int, tokens: int) -> list[tuple[str, Callable, tuple]]:
    """The graphs of ``lm`` (compiled mode) that a run of ``tokens`` tokens, ``prompt_tokens`` of them its prompt,
    needs and does not have yet, in the order they compile: its decode step, then its prompt's prefill bucket
    (engine.core.prefill_buckets). Each as (graph name, fn, args) for ``BackgroundCompiler.submit``; none in eager
    mode, after a failed compile, or for a run longer than any static cache. The run's static cache holds its
    prompt's bucket too (``run_tokens``), as ``engine.core.trace.run_trace`` makes it."""
    graph = graph_of(lm)
    tokens = run_tokens(lm, prompt_tokens, tokens)
    length = cache_length(tokens, graph.max_positions) if graph is not None and not graph.failure else None
    if length is None:
        return []
    out = [] if graph.ready(tokens) else [(decode_name(length), compile_warm_up, (lm, int(tokens)))]
    return out + [(name, compile_prefill, (lm, int(prompt_tokens), t))
                  for name, t in bucket_graphs(lm, prompt_tokens, (tokens,))]

