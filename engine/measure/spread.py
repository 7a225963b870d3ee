"""A median with the range it came from: how every repeated measurement is summarised (no torch here, so the
serving client can use it without loading PyTorch)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """A median with its range (min..max) over n values, in the unit its name says: the one summary of repeated
    measurements. ``Spread.of`` leaves missing (None) and non-finite values out (with none left every field is
    NaN and n is 0); ``engine.measure.noise.summarize`` also fills the quartiles and flags a wide spread."""

    median: float
    lo: float
    hi: float
    n: int
    q1: float = math.nan  # first and third quartiles (summarize; min and max below 4 values)
    q3: float = math.nan
    flags: tuple[str, ...] = ()  # what a reader should know about these repeats (a wide spread)

    @staticmethod
    def of(values) -> "Spread":
        v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
        if not v:
            return Spread(math.nan, math.nan, math.nan, 0)
        return Spread(statistics.median(v), min(v), max(v), len(v))

    def range_dict(self) -> dict:
        """The median and its range, as the serving records write them: {"median", "lo", "hi", "n"}."""
        return {"median": self.median, "lo": self.lo, "hi": self.hi, "n": self.n}

    def scaled(self, k: float) -> "Spread":
        return Spread(self.median * k, self.lo * k, self.hi * k, self.n, self.q1 * k, self.q3 * k, self.flags)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def relative_spread(self) -> float:
        """IQR / median (0 for a single value)."""
        return self.iqr / self.median if self.median else float("nan")

    def overlaps(self, other: "Spread") -> bool:
        """True when the two min..max ranges overlap: the difference of the medians may be noise."""
        return self.lo <= other.hi and other.lo <= self.hi


LESSON_RUNS = 5  # a figure a page turns into a sentence: the median of at least this many runs after a warm-up
DISAGREE = 1.5  # two runs of the same work further apart than this (slowest / fastest) are noise, not a lesson


def lesson_flags(s: Spread, what: str, unit: str = "") -> tuple[str, ...]:
    """Why ``s`` (in ``unit``) cannot carry a sentence of a lesson (empty when it can): fewer than LESSON_RUNS runs,
    or two runs that differ by more than DISAGREE times."""
    flags, what = [], what[:1].upper() + what[1:]
    if s.n < LESSON_RUNS:
        flags.append(f"{what}: only {s.n} run(s), fewer than the {LESSON_RUNS} a lesson needs.")
    if s.n >= 2 and s.lo > 0 and s.hi / s.lo > DISAGREE:
        flags.append(f"{what}: two runs differ by {s.hi / s.lo:.1f}\u00d7 ({_num(s.lo)} to {_num(s.hi)}"
                     f"{' ' + unit if unit else ''}), more than {DISAGREE:g}\u00d7: the machine's noise, not the work.")
    return tuple(flags)


def _num(x: float) -> str:
    """Three significant figures without an exponent (1,090 rather than 1.09e+03)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
