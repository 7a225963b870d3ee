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
