"""The CPU thread policy of the engine: how many intra-op threads torch uses, and whether OpenMP's idle threads
spin or sleep. Chosen by measurement (``python -m engine bench threads``), not by habit.

Why it matters: with torch's defaults and one other busy program (a browser drawing, a video call, a second
student's run), a decode step that takes ~40 ms went to 765-1769 ms: OpenMP splits each op across all threads,
and threads that spin while they wait fight the other program for the cores. Passive waiting (idle threads
sleep) removed that; see the measured candidates below.

``OMP_WAIT_POLICY`` is read once, when torch loads its OpenMP runtime: ``engine/__init__.py`` calls
``set_wait_policy_env()`` before anything imports torch. The thread count is per OpenMP thread, so
``apply_policy()`` is called by the thread that runs forward passes (today: at the start of every script run
and every CLI command; the engine worker calls it once when it starts).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import engine.settings as settings
from engine.measure.cpu_time import cpu_seconds

# The policy `python -m engine bench threads` chose on the 2-core reference machine: every core, passive waiting
# (the lowest worst case beside a busy program, and the fastest quiet; figures in docs/benchmarks.md, "Figures
# moved out of code comments"). The wait policy is what matters: spinning threads fight the other program for the
# cores; with passive waiting every core for torch beat one core fewer, quiet and busy.
THREADS = "cores"  # "cores" | "cores-1" | an integer
WAIT = "passive"  # "passive" | "active" (OMP_WAIT_POLICY)
# Small forward passes run on one thread: a decode step (one row per sequence), a speculative verify pass, a
# small padded batch. Their matrix multiplies are too thin to split, and with passive waiting every parallel
# region has to wake the sleeping second thread: one thread was as fast or faster up to 8 rows, quiet and busy
# (docs/benchmarks.md), so decode at batch <= 8 and verify at k + 1 <= 8 run on one; prompt-sized passes (prefill)
# keep every core. `python -m engine bench threads --precision int8` re-measures it on another machine.
SMALL_PASS_ROWS = 8
# Larger passes (a prompt) use the cores other programs leave free, read from the kernel's CPU counters over the
# last second: every core on a quiet machine, one fewer per core's worth of other work (quiet, every core was
# faster; beside a busy loop, the free core alone was: docs/benchmarks.md). With another program on a core, the
# second OpenMP thread waits for the core it shares and each of the pass's hundreds of parallel regions waits for
# it. Processes that asked for a lower priority (nice above 0: Chromium's background tabs, indexers, a build run with
# `nice`, the test suite's parallel phase) are not counted: the kernel keeps their time apart, and gives their core to
# the app's thread as soon as it wakes. ILE_ADAPTIVE_THREADS=off keeps the policy's count for every pass.
FREE_CORES_WINDOW_S = 1.0  # the other programs' CPU use is averaged over about this long

_ENV_WAIT_BEFORE = settings.OMP_WAIT_POLICY.raw()  # what the user set, if anything
_TORCH_LOADED_FIRST: bool | None = None  # was torch imported before set_wait_policy_env ran?


def enabled() -> bool:
    """ILE_THREAD_POLICY=off leaves torch's defaults alone (the benchmark of candidates uses it)."""
    return settings.THREAD_POLICY.get()


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def policy_threads(n_cores: int | None = None) -> int:
    """The intra-op thread count the policy asks for on this machine (ILE_THREADS=N overrides)."""
    n = cores() if n_cores is None else n_cores
    spec = settings.THREADS.get() or THREADS
    if spec == "cores":
        return max(1, n)
    if spec == "cores-1":
        return max(1, n - 1)
    try:
        return max(1, int(spec))
    except ValueError:
        return max(1, n - 1)


def small_pass_rows() -> int:
    """Forward passes of at most this many token rows (batch x new tokens) run on one thread; 0 = never.
    ILE_SMALL_PASS_ROWS=N overrides it (the threads benchmark sets it per candidate); with ILE_THREAD_POLICY=off
    it is 0 unless that override is set."""
    override = settings.SMALL_PASS_ROWS.get()
    if override is not None:
        return override
    return SMALL_PASS_ROWS if enabled() else 0


def threads_said(threads: int, small: int | None = None, free: bool | None = None) -> str:
    """How many threads a measurement ran on, for a caption or a summary: "2 threads (passes of at most 8 rows,
    such as a decode step, on 1)". ``small``: the row limit it ran under (default: this process's); ``free``:
    whether larger passes used only the free cores (default: this process's ``adaptive()``)."""
    small = small_pass_rows() if small is None else small
    free = adaptive() if free is None else free
    parts = ([f"passes of at most {small} rows, such as a decode step, on 1"] if small else []) + (
        ["larger ones on the cores other programs left free"] if free else [])
    return f"{threads} thread{'s' if threads != 1 else ''}" + (
        f" ({'; '.join(parts)})" if parts and threads > 1 else "")


@contextmanager
def at_most_threads(n: int):
    """Run the block with at most ``n`` torch intra-op threads on the calling thread, then restore the count.
    The count is per OpenMP thread: passes running on other threads are unaffected."""
    import torch

    before = torch.get_num_threads()
    if before <= n:
        yield
        return
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def adaptive() -> bool:
    """Large passes use the cores other programs leave free (see FREE_CORES_WINDOW_S). Off with
    ILE_ADAPTIVE_THREADS=off, with ILE_THREAD_POLICY=off, and with an explicit ILE_THREADS count."""
    return enabled() and not settings.THREADS.is_set() and settings.ADAPTIVE_THREADS.get()


class _OtherLoad:
    """How many cores' worth of CPU time other processes at normal priority used lately: the kernel's busy time of
    all CPUs, less its "nice" time (processes at a lower priority) and this process's own, over the last
    ``FREE_CORES_WINDOW_S`` or so. Each reading is two small file reads; a sample is kept at most every half window, by
    ``watch``'s thread and by each prompt pass. None where /proc cannot be read."""

    def __init__(self):
        import threading

        self._lock = threading.Lock()
        self._samples: list[tuple[float, float, float]] = []  # (monotonic s, all CPUs' busy s, this process's s)
        self._watching = False

    def _sample(self) -> tuple[float, float, float] | None:
        import time

        now = cpu_seconds()
        return None if now is None else (time.monotonic(), *now)

    def cores_busy(self) -> float | None:
        now = self._sample()
        if now is None:
            return None
        with self._lock:
            s = self._samples
            if not s or now[0] - s[-1][0] >= FREE_CORES_WINDOW_S / 2:
                s.append(now)
            while len(s) > 2 and now[0] - s[1][0] >= FREE_CORES_WINDOW_S:
                s.pop(0)  # keep the newest sample at least a window old as the reference
            t0, busy0, own0 = s[0]
        if now[0] - t0 < 0.05:
            return None  # no history yet: the first large pass of a process keeps the policy's count
        return max(0.0, ((now[1] - busy0) - (now[2] - own0)) / (now[0] - t0))

    def watch(self) -> None:
        """Sample every half window on a daemon thread (once per process), so the first prompt pass after a quiet
        spell reads the last second, not the average since the previous pass."""
        import threading
        import time

        with self._lock:
            if self._watching:
                return
            self._watching = True

        def loop():
            while True:
                self.cores_busy()
                time.sleep(FREE_CORES_WINDOW_S / 2)

        threading.Thread(target=loop, name="ile-free-cores", daemon=True).start()


OTHER_LOAD = _OtherLoad()


def free_cores() -> int | None:
    """Cores other programs leave free now (rounded, at least 1), or None where it cannot be read."""
    busy = OTHER_LOAD.cores_busy()
    return None if busy is None else max(1, min(cores(), round(cores() - busy)))


def large_pass_threads() -> int:
    """The thread count for a pass larger than SMALL_PASS_ROWS: the policy's, at most the free cores when
    ``adaptive()``."""
    n = policy_threads()
    if not adaptive():
        return n
    free = free_cores()
    return n if free is None else max(1, min(n, free))


def _on_cpu(device) -> bool:
    return device is None or getattr(device, "type", str(device)) == "cpu"


def pass_threads(rows: int, device=None):
    """The thread count for one forward pass of ``rows`` token rows on ``device``: one thread for a small pass
    on the CPU (see SMALL_PASS_ROWS), the cores other programs leave free for a larger one (see
    FREE_CORES_WINDOW_S). A context manager."""
    if not _on_cpu(device):
        return nullcontext()
    if 0 < int(rows) <= small_pass_rows():
        return at_most_threads(1)
    return at_most_threads(large_pass_threads()) if adaptive() else nullcontext()


def compiled_pass_threads(rows: int, device=None):
    """``pass_threads`` for a pass of a compiled graph (a verify pass, a padded batch step, a prefill bucket): one
    thread for a small pass, the policy's count for a larger one, never the free cores of the moment. Inductor writes
    the thread count in effect when it compiles into its CPU kernels (``#pragma omp parallel num_threads(N)``), so a
    graph compiled on one thread (or while the machine was busy) would run a 64-token prefill on one core for good:
    measured 1.7-1.9x slower than eager on 2 cores. A context manager."""
    if not _on_cpu(device):
        return nullcontext()
    # exactly, not at most: dynamo guards on the thread count too, and the background compiler's thread and the
    # engine's worker start from different counts (a graph compiled on one would compile again on the other)
    return exactly_threads(1 if 0 < int(rows) <= small_pass_rows() else policy_threads())


@contextmanager
def exactly_threads(n: int):
    """Run the block with ``n`` torch intra-op threads on the calling thread, then restore the count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def rule_for_every_pass(model):
    """Inside the block, every forward call of ``model`` follows ``pass_threads``, including calls made by code
    that does not go through engine.core.loop (``model.generate``, the peer of the benchmarks), so a comparison
    measures the two loops, not two thread counts. Hooks on the model for the block only (CLI benchmarks)."""
    entered = []

    def before(_mod, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        cm = pass_threads(ids.numel(), ids.device) if ids is not None else nullcontext()
        cm.__enter__()
        entered.append(cm)

    def after(_mod, _args, _kwargs, _out):
        if entered:
            entered.pop().__exit__(None, None, None)

    hooks = [model.register_forward_pre_hook(before, with_kwargs=True),
             model.register_forward_hook(after, with_kwargs=True, always_call=True)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def set_wait_policy_env() -> None:
    """Set OMP_WAIT_POLICY before torch loads OpenMP (a value the user set wins)."""
    global _TORCH_LOADED_FIRST
    if _TORCH_LOADED_FIRST is None:
        _TORCH_LOADED_FIRST = "torch" in sys.modules
    if enabled() and _ENV_WAIT_BEFORE is None:
        os.environ.setdefault("OMP_WAIT_POLICY", WAIT.upper())


def apply_policy() -> int:
    """Set torch's intra-op thread count for the calling thread to the policy's; returns it. Cheap and
    idempotent: call it at the start of every thread that runs forward passes."""
    import torch

    if not enabled():
        return torch.get_num_threads()
    n = policy_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    if adaptive() and cores() > 1:
        OTHER_LOAD.watch()  # a window later the first prompt pass can read the other programs' load
    return n


@dataclass(frozen=True)
class PolicyInForce:
    threads: int
    cores: int
    wait: str  # what OpenMP's idle threads do: "passive", "active" or "default"
    wait_note: str
    source: str
    small_pass_rows: int = 0  # forward passes of at most this many rows run on one thread (0: none)

    adaptive: bool = False  # larger passes use only the cores other programs leave free

    def __str__(self) -> str:
        small = (f"; passes of at most {self.small_pass_rows} rows (decode steps) on 1 thread"
                 if self.small_pass_rows and self.threads > 1 else "")
        if self.adaptive and self.threads > 1:
            small += "; larger passes (prompts) on the cores other programs leave free"
        return (f"{self.threads} of {self.cores} cores for torch{small}; OpenMP idle threads: {self.wait} "
                f"({self.wait_note})")


def describe_policy() -> PolicyInForce:
    """What is in force now in this process (for the hardware section of the timeline page)."""
    import torch

    env = settings.OMP_WAIT_POLICY.raw()
    if _TORCH_LOADED_FIRST and _ENV_WAIT_BEFORE is None:
        wait, note = "default", "torch was loaded before the engine could set the wait policy"
    elif env:
        wait = env.lower()
        note = "set by the user" if _ENV_WAIT_BEFORE is not None else "set by the engine before torch loaded"
    else:
        wait, note = "default", "spin a while, then sleep"
    source = ("ILE_THREAD_POLICY=off: torch's defaults" if not enabled() else
              "ILE_THREADS override" if settings.THREADS.is_set() else
              f"policy {THREADS}, {WAIT} (chosen by python -m engine bench threads)")
    return PolicyInForce(torch.get_num_threads(), cores(), wait, note, source, small_pass_rows(), adaptive())
