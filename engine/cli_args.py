"""Command-line arguments shared by the commands that run the loop (trace, race)."""
from __future__ import annotations

import argparse
import math


def number(kind: type, lo: float, hi: float | None = None):
    """An argparse type: a finite number of ``kind`` in [lo, hi], else a one-line error (argparse exits 2)."""

    def parse(text: str):
        try:
            val = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a {kind.__name__} number") from None
        if not math.isfinite(val) or val < lo or (hi is not None and val > hi):
            span = f"from {lo:g} to {hi:g}" if hi is not None else f"of at least {lo:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {span}, not {text[:40]}")
        return val

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def add_run_arguments(p, max_new_tokens: int = 16) -> None:
    """--prompt, --max-new-tokens, the sampling settings, --seed and --no-chat-template (each range-checked:
    nan, infinities and negative values are refused with a message, not a traceback from the loop)."""
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=number(int, 1), default=max_new_tokens)
    p.add_argument("--temperature", type=number(float, 0.0, 10.0), default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=number(int, 0), default=0, help="0 = off")
    p.add_argument("--top-p", type=number(float, 0.0, 1.0), default=1.0, help="1 = off")
    p.add_argument("--min-p", type=number(float, 0.0, 1.0), default=0.0, help="0 = off")
    p.add_argument("--seed", type=number(int, 0), default=0)
    p.add_argument("--no-chat-template", action="store_true")
