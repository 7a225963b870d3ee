"""A benchmark as one typed record, as ``JobKind`` is the worker's contract (engine/jobs/kinds.py): its name, how it
runs, its own arguments, how its result reads, and which engine modes it supports. Each benchmark module declares
its ``BENCH``; ``python -m engine bench NAME`` imports the module ``BENCHES`` names (engine/__main__.py) and reads the
record, never a module attribute looked up by name.

It imports no torch: the command line imports a benchmark's module only for the benchmark it runs.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from engine.core.loaded import Mode


@dataclass(frozen=True)
class Bench:
    """``run(lm, args) -> dict``: the JSON result, measured against a peer in the same run. ``arguments(parser)``
    adds the benchmark's own options; ``summary(result)`` is its text for people (None: the JSON, indented).
    ``eager_because``: why the benchmark's work runs eager in any engine mode, one line said when compiled mode is
    asked for ("" = it runs in every mode)."""

    name: str
    run: Callable[[Any, argparse.Namespace], dict]
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    summary: Callable[[dict], str] | None = None
    eager_because: str = ""

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The engine modes this benchmark runs in."""
        return (Mode.EAGER,) if self.eager_because else tuple(Mode)
