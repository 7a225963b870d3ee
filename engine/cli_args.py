"""Command-line arguments shared by the commands that run the loop (trace, race), and how they print.

Imports no torch: every command's --help is built from here and the modules it names, in well under a second.
"""
from __future__ import annotations

import argparse
import math
import sys

import engine.settings as settings

# The app's sidebar starts here (ui/frame/state.py's FIELDS; tests/engine/test_cli.py holds them equal): the command
# line says so, since its own default is greedy.
APP_SAMPLING = {"temperature": 0.7, "top_k": 50, "top_p": 0.95}
GREEDY_NOTE = ("The command line is greedy by default (--temperature 0: the same tokens on every run); the app's "
               "pages start at temperature {temperature}, top-k {top_k}, top-p {top_p}: pass those to sample as "
               "they do.").format(**APP_SAMPLING)


def bold(text: str, stream=None) -> str:
    """``text`` in bold when ``stream`` (stdout) is a terminal and NO_COLOR is not set; else plain, so redirected
    output and pipes get no escape codes."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if settings.NO_COLOR.is_set() or isatty is None or not isatty():
        return text
    return f"\x1b[1m{text}\x1b[0m"


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
    p.add_argument("--prompt", required=True,
                   help="the prompt (put in the model's chat template unless --no-chat-template)")
    p.add_argument("--max-new-tokens", type=number(int, 1), default=max_new_tokens,
                   help="tokens to generate at most; default: %(default)s")
    p.add_argument("--temperature", type=number(float, 0.0, 10.0), default=0.0,
                   help="0 = greedy; default: %(default)s (the app starts at {temperature})".format(**APP_SAMPLING))
    p.add_argument("--top-k", type=number(int, 0), default=0,
                   help="0 = off; default: %(default)s (the app starts at {top_k})".format(**APP_SAMPLING))
    p.add_argument("--top-p", type=number(float, 0.0, 1.0), default=1.0,
                   help="1 = off; default: %(default)s (the app starts at {top_p})".format(**APP_SAMPLING))
    p.add_argument("--min-p", type=number(float, 0.0, 1.0), default=0.0, help="0 = off; default: %(default)s")
    p.add_argument("--seed", type=number(int, 0), default=0, help="the sampler's seed; default: %(default)s")
    p.add_argument("--no-chat-template", action="store_true", help="send the prompt as it is, with no chat template")


def add_save_argument(p) -> None:
    p.add_argument("--save", metavar="RUN.json", default=None,
                   help="also write the run to this file: one JSON record that replays offline (python -m engine "
                        "replay) and can be checked on another machine (python -m engine verify)")
