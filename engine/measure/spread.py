"""A median with the range it came from: how every repeated measurement is summarised (no torch here, so the
serving client can use it without loading PyTorch)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """A median with its range (min..max) over n values, in the unit its name says. Missing (None) and
    non-finite values are left out; with none left every field is NaN and n is 0."""

    median: float
    lo: float
    hi: float
    n: int

    @staticmethod
    def of(values) -> "Spread":
        v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
        if not v:
            return Spread(math.nan, math.nan, math.nan, 0)
        return Spread(statistics.median(v), min(v), max(v), len(v))

    def scaled(self, k: float) -> "Spread":
        return Spread(self.median * k, self.lo * k, self.hi * k, self.n)
