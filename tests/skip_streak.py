"""Skips that cannot hide a failure: a timing test that compares the app with the command line skips when the command
line disagrees with itself (a noisy machine), and on a machine that is always noisy that could be every run, a
failure never seen. ``SkipStreak`` counts such skips in a row in pytest's cache (``.pytest_cache``, one small value
per test); past ``MAX_IN_A_ROW`` the test fails instead. A run that reaches its comparison resets the count, whatever
the comparison then says."""
from __future__ import annotations

import re

import pytest

MAX_IN_A_ROW = 2  # two noisy runs in a row happen on a busy shared machine; a third fails


class SkipStreak:
    def __init__(self, cache, nodeid: str):
        self.cache = cache
        self.key = "ile/skips-in-a-row/" + re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)

    @property
    def count(self) -> int:
        return int(self.cache.get(self.key, 0))

    def skip(self, why: str) -> None:
        """Skip for a noisy reference measurement, or fail when this is the third such skip in a row."""
        n = self.count + 1
        self.cache.set(self.key, n)
        if n > MAX_IN_A_ROW:
            pytest.fail(f"skipped {n} times in a row (at most {MAX_IN_A_ROW} allowed), so a failure could hide "
                        f"behind the noise: {why}", pytrace=False)
        pytest.skip(f"{why} (skip {n} in a row; skip {MAX_IN_A_ROW + 1} fails)")

    def measured(self) -> None:
        """The comparison ran: the streak ends (a failing comparison fails on its own)."""
        self.cache.set(self.key, 0)
