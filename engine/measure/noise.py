"""A noise guard for measured figures: repeats summarised as a median with its spread, a calibration that says
whether the machine was disturbed while a measurement ran, and bound checks that flag results which break their
own bounds (an impossible speedup, a gain with nothing accepted, a bigger batch or a busier server faster).

Every function is pure or reads only the clock and /proc: it returns a plain frozen record whose ``flags`` is a
tuple of human-readable warnings (empty when nothing is wrong), so pages show them and tests assert on them.

Calibration has two witnesses, taken before and after the measured work:
- a probe: a fixed small matrix multiply timed a few times (median); if it got much slower, or is much slower
  than the fastest probe this process has seen, something else was using the CPU;
- the CPU time the *other* processes at normal priority used during the measurement (Linux /proc/stat less its
  nice time and this process's own CPU time, engine.measure.cpu_time), in cores. A browser drawing, a video call
  or a second student's run all show up here; a program that asked for a lower priority gives its core up and
  does not.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable
from dataclasses import dataclass, field

import torch

from engine.measure.cpu_time import cpu_seconds
from engine.measure.spread import Spread

BUSY_MESSAGE = "This machine was busy during the measurement; numbers may be off."
PROBE_SLOWDOWN = 1.5  # probe this much slower than before / than the best seen: disturbed
OTHER_CORES_BUSY = 0.5  # other processes used at least half a core on average: disturbed
WIDE_SPREAD = 0.25  # interquartile range above a quarter of the median: noisy
DISAGREE = 1.5  # two timings of identical work further apart than this (the larger over the smaller): noise


# ---------------------------------------------------------------------------------------------- repeats


def summarize(values, what: str = "the measurement") -> Spread:
    """Median, min, max and quartiles of repeated measurements; flags a wide spread."""
    v = sorted(float(x) for x in values)
    if not v:
        return Spread(float("nan"), float("nan"), float("nan"), 0, float("nan"), float("nan"),
                      (f"No repeats of {what}.",))
    if len(v) >= 4:
        q = statistics.quantiles(v, n=4, method="inclusive")
        q1, q3 = q[0], q[2]
    else:
        q1, q3 = v[0], v[-1]
    med = statistics.median(v)
    flags = []
    if len(v) >= 3 and med > 0 and (q3 - q1) / med > WIDE_SPREAD:
        flags.append(f"The repeats of {what} vary widely (interquartile range {(q3 - q1) / med:.0%} of the "
                     "median): the machine may be busy.")
    return Spread(med, v[0], v[-1], len(v), q1, q3, tuple(flags))


# ---------------------------------------------------------------------------------------------- calibration

_BEST_PROBE: list[float] = []  # the fastest probe this process has timed (a quiet reference)


def probe_seconds(repeats: int = 5, n: int = 256) -> float:
    """Median time of a fixed n x n float32 matrix multiply on the current thread settings."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    a @ b  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    if not _BEST_PROBE or t < _BEST_PROBE[0]:
        _BEST_PROBE[:] = [t]
    return t


@dataclass(frozen=True)
class CalibrationStart:
    wall: float
    probe_s: float
    cpu: tuple[float, float] | None
    taken_at: float  # time.time(), for "measured at"


@dataclass(frozen=True)
class Calibration:
    """Under what load a measurement was taken: probes before and after, other processes' CPU use, when."""

    taken_at: float  # seconds since the epoch when the measurement started
    seconds: float  # how long it ran
    probe_before_s: float
    probe_after_s: float
    probe_best_s: float  # fastest probe seen by this process (the quiet reference)
    other_cores: float | None  # mean cores used by other processes while it ran (None: unknown)
    load_avg: float | None  # 1-minute load average at the end (None: unknown)
    flags: tuple[str, ...] = field(default=())

    @property
    def disturbed(self) -> bool:
        return bool(self.flags)

    @property
    def probe_slowdown(self) -> float:
        return max(self.probe_before_s, self.probe_after_s) / self.probe_best_s if self.probe_best_s else 1.0

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.taken_at))
        other = "unknown" if self.other_cores is None else f"{self.other_cores:.2f} cores"
        return (f"measured at {when} over {self.seconds:.1f} s; other programs used {other}; calibration probe "
                f"x{self.probe_slowdown:.2f} of the quietest seen" + (" (disturbed)" if self.disturbed else ""))


def calibration_start(probe: Callable[[], float] = probe_seconds) -> CalibrationStart:
    return CalibrationStart(time.perf_counter(), probe(), cpu_seconds(), time.time())


def judge(probe_before: float, probe_after: float, probe_best: float, other_cores: float | None) -> tuple[str, ...]:
    """The calibration's verdict as flags (pure: the thresholds in one place, testable without a load)."""
    flags = []
    if other_cores is not None and other_cores >= OTHER_CORES_BUSY:
        flags.append(f"Other programs used {other_cores:.1f} CPU cores on average while this was measured.")
    worst = max(probe_before, probe_after)
    if probe_before > 0 and probe_after / probe_before >= PROBE_SLOWDOWN:
        flags.append(f"A calibration step took {probe_after / probe_before:.1f}x as long after the measurement "
                     "as before it.")
    elif probe_best > 0 and worst / probe_best >= PROBE_SLOWDOWN:
        flags.append(f"A calibration step took {worst / probe_best:.1f}x as long as on a quiet moment.")
    return tuple(flags)


def calibration_end(start: CalibrationStart, probe: Callable[[], float] = probe_seconds) -> Calibration:
    wall = time.perf_counter() - start.wall
    after = probe()
    other = None
    end_cpu = cpu_seconds()
    if start.cpu is not None and end_cpu is not None and wall > 0:
        other = max(0.0, ((end_cpu[0] - start.cpu[0]) - (end_cpu[1] - start.cpu[1])) / wall)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    best = _BEST_PROBE[0] if _BEST_PROBE else min(start.probe_s, after)
    return Calibration(start.taken_at, wall, start.probe_s, after, best, other, load,
                       judge(start.probe_s, after, best, other))


class calibrated:
    """``with calibrated() as cal: ...`` then ``cal.result`` is the Calibration of what ran inside. ``probe``
    times the calibration step; the app passes one that runs it on the engine worker, the thread that runs the
    measured work (a torch op on a script thread would give that thread an OpenMP team of its own)."""

    def __init__(self, probe: Callable[[], float] = probe_seconds):
        self._probe = probe

    def __enter__(self):
        self._start = calibration_start(self._probe)
        self.result: Calibration | None = None
        return self

    def __exit__(self, *exc):
        self.result = calibration_end(self._start, self._probe)
        return False


# ---------------------------------------------------------------------------------------------- bounds


@dataclass(frozen=True)
class SpeedupCheck:
    """A measured speedup judged against its bounds. ``shown`` is what a page should print."""

    value: float
    shown: str
    no_gain: bool  # the honest reading is "no gain" (nothing accepted, or within noise of 1x)
    flags: tuple[str, ...] = ()


def check_speedup(speedup: float, k: int, accepted: int, tokens_per_pass: float, noise: float = 0.1
                  ) -> SpeedupCheck:
    """Speculative decoding (Leviathan et al. 2023) emits at most k + 1 tokens per target pass, and each pass
    costs at least about one plain step, so a speedup above k + 1 is impossible, and one above the measured
    tokens per target pass (by more than ``noise``, the relative spread of the plain steps) is noise. With no
    accepted draft every pass emits exactly one token: the lanes did the same work, so there is no gain."""
    flags = []
    shown = f"{speedup:.2f}x"
    no_gain = False
    if speedup > k + 1:
        flags.append(f"Impossible: a {speedup:.2f}x speedup is above the ceiling k + 1 = {k + 1}x (every draft "
                     "accepted). The machine was probably busy during one lane: measure again.")
    elif tokens_per_pass > 0 and speedup > tokens_per_pass * (1 + noise) and accepted > 0:
        flags.append(f"A {speedup:.2f}x speedup is more than the {tokens_per_pass:.2f} tokens per target pass can "
                     "give (each verify pass costs at least one plain step): part of it is noise.")
    if accepted == 0:
        no_gain = True
        shown = "no gain"
        if speedup > 1:
            flags.append(f"No draft was accepted, so both lanes ran the same number of target passes: the "
                         f"measured {speedup:.2f}x is no gain, within noise.")
    elif tokens_per_pass <= 1 + noise and abs(speedup - 1) <= noise:
        # hardly more than one token per pass: a figure this close to 1x is noise, not a gain or a loss
        no_gain = True
        shown = "no gain"
    return SpeedupCheck(float(speedup), shown, no_gain, tuple(flags))


def disagreement(seconds_a: float, seconds_b: float) -> float:
    """Two timings of identical work: how many times apart they are (the larger over the smaller) when that is more
    than ``DISAGREE``, else 0.0. Such a pair says the machine's noise is larger than any effect measured beside it,
    so nothing measured with it may become a lesson. Non-finite or non-positive timings give 0.0 (nothing to say)."""
    lo, hi = sorted((float(seconds_a), float(seconds_b)))
    if not (lo > 0 and hi < float("inf")):
        return 0.0
    return hi / lo if hi / lo > DISAGREE else 0.0


@dataclass(frozen=True)
class SameWorkGap:
    """Two timed lanes that did identical work: the gap between their clocks, which can only be noise."""

    seconds_a: float
    seconds_b: float

    @property
    def gap(self) -> float:
        return abs(self.seconds_a - self.seconds_b)

    @property
    def relative(self) -> float:
        return self.gap / min(self.seconds_a, self.seconds_b) if min(self.seconds_a, self.seconds_b) > 0 else 0.0

    @property
    def flags(self) -> tuple[str, ...]:
        return (f"Both lanes did the same work, so the {self.gap:.2f} s between their clocks ({self.relative:.0%}) "
                "is noise: neither lane won. Measure again and it shrinks or changes sides.",)


def same_work_gap(seconds_a: float, seconds_b: float) -> SameWorkGap:
    """Judge two lanes that did the same passes over the same tokens: whatever their clocks say, the difference
    is the machine's noise, never a result (a page must say so beside any picture of the two lanes)."""
    return SameWorkGap(float(seconds_a), float(seconds_b))


@dataclass(frozen=True)
class MonotoneCheck:
    flags: tuple[str, ...] = ()


def check_batch_steps(points) -> MonotoneCheck:
    """points: (batch size, Spread of seconds per step) in any order. A bigger batch does more work per step,
    so it cannot be faster per step than a smaller one: flag every such pair (noise if the ranges overlap)."""
    pts = sorted(points, key=lambda p: p[0])
    flags = []
    for (b1, r1), (b2, r2) in zip(pts, pts[1:]):
        if r2.median < r1.median:
            why = ("the ranges overlap, so the difference is noise" if r1.overlaps(r2) else
                   "the ranges do not even overlap: the machine was probably busy during the smaller batch")
            flags.append(f"Batch {b2} measured faster per step than batch {b1} ({r2.median * 1000:.1f} vs "
                         f"{r1.median * 1000:.1f} ms): {why}.")
    return MonotoneCheck(tuple(flags))


def check_batch_throughput(points, slack: float = 0.15) -> MonotoneCheck:
    """points: (batch size, Spread of seconds per step) in any order. A step over b2 rows reads the weights once,
    as a step over b1 < b2 rows does, so its tokens per second (b / step time) should not fall: at worst, on a CPU
    already at its compute limit, it stays about flat. Flag a bigger batch whose tokens per second fell by more
    than ``slack`` (relative): its step took more than b2/b1 times as long, which the work cannot explain (one run
    on a busy laptop measured 320 ms at batch 8 and 7,109 ms at batch 16)."""
    pts = sorted(points, key=lambda p: p[0])
    flags = []
    for (b1, r1), (b2, r2) in zip(pts, pts[1:]):
        tps1, tps2 = b1 / r1.median, b2 / r2.median
        if tps2 < tps1 * (1 - slack):
            flags.append(f"Batch {b2} gave fewer tokens per second than batch {b1} ({tps2:.1f} vs {tps1:.1f}): its "
                         f"step took {r2.median / r1.median:.1f}x as long for {b2 / b1:g}x the rows. One pass "
                         "reads the weights once however many rows it has, so this is the machine, not batching: "
                         "it was probably busy during the larger batch. Measure again.")
    return MonotoneCheck(tuple(flags))


def check_busier_slower(points, spread: float = 0.1) -> MonotoneCheck:
    """points: (server load, e.g. requests per second; latency in seconds). The same request on a busier server
    shares more passes, so it should not finish faster: flag a busier point faster by more than nothing, and say
    whether it is within ``spread`` (relative) of the quieter one, i.e. noise."""
    pts = sorted(points, key=lambda p: p[0])
    flags = []
    for (l1, s1), (l2, s2) in zip(pts, pts[1:]):
        if s2 < s1:
            noise = (s1 - s2) / s1 <= spread
            flags.append(f"The busier server ({l2:g} requests/s) answered faster than at {l1:g} requests/s "
                         f"({s2:.2f} vs {s1:.2f} s): " + ("within noise, no real difference." if noise else
                                                         "the machine was probably busy during the quieter run."))
    return MonotoneCheck(tuple(flags))
