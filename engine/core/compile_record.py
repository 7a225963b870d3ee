"""Compiled mode's graphs by name, and what each last cost to compile.

Which graph a pass needs (a static cache length, a padded batch size, a prefill bucket, a verify width) and the name
a person reads for it; the last measured compile time of each graph, kept per model, precision and device in the
cache folder across restarts, so a page can say before a compile starts how long it took last time. Plain values
and a small JSON file: no torch here (engine.core.compiled holds the graphs themselves).
"""
from __future__ import annotations

import json

SHORTEST = 256  # the shortest static cache: the app's default prompt and answer fit in it
COMPILER_THREAD = "ile-compiler"  # the background compiler's thread (engine.core.background_compile)


def cache_length(tokens: int, max_positions: int) -> int | None:
    """The static cache length for a run of ``tokens`` tokens: the smallest power of two from SHORTEST that holds
    them (one compiled graph per length, so few lengths), capped at the model's positions; None if too long."""
    tokens = max(1, int(tokens))
    if tokens > max_positions:
        return None
    n = SHORTEST
    while n < tokens:
        n *= 2
    return min(n, int(max_positions))


BATCH_SIZES = (1, 2, 4, 8, 16, 32)
COMPILE_TIMES = "compile_times.json"  # in the cache folder: the last measured compile time of each graph


def padded_batch(rows: int) -> int | None:
    """The batch size a batched decode step of ``rows`` rows runs at (the smallest in BATCH_SIZES that holds them),
    or None when there are more rows than the largest: that step runs eager."""
    return next((b for b in BATCH_SIZES if b >= int(rows)), None)


# Prefill compiled: a prompt is padded on the right up to its bucket (causal attention: the real tokens never see the
# padding) and the logits are kept at its last real position; the padding's cache positions are rolled back. Past the
# largest bucket, prefill runs eager. Powers of four: few graphs, padding at most 4x.
PREFILL_BUCKETS = (16, 64, 256, 1024)


def prefill_bucket(tokens: int) -> int | None:
    """The padded length a prefill of ``tokens`` tokens runs at, or None past the largest bucket (eager)."""
    return next((b for b in PREFILL_BUCKETS if b >= int(tokens)), None)


def prefill_name(bucket: int, length: int) -> str:
    return f"prefill of up to {bucket} tokens, static cache of {length:,} positions"


def verify_name(width: int, length: int) -> str:
    return f"verify pass of {width} tokens (k = {width - 1}), static cache of {length:,} positions"


def batch_name(rows: int, length: int) -> str:
    return f"batched decode step of {rows} row{'' if rows == 1 else 's'}, static cache of {length:,} positions"


def decode_name(length: int) -> str:
    return f"decode step, static cache of {length:,} positions"


def _times_key(lm, name: str) -> str:
    info = lm.info
    return f"{lm.ref.name} | {lm.ref.precision or info.dtype} | {info.device} | {name}"


def _times_path():
    from engine.settings import cache_dir

    return cache_dir() / COMPILE_TIMES


def _read_times() -> dict:
    try:
        data = json.loads(_times_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def last_compile_s(lm, name: str) -> float | None:
    """The last measured compile (and warm-up) time of graph ``name`` of this model, precision and device, kept
    across restarts in the cache folder; None before the first."""
    v = _read_times().get(_times_key(lm, name))
    return float(v) if isinstance(v, (int, float)) else None


def record_compile_s(lm, name: str, seconds: float) -> None:
    try:
        data = _read_times()
        data[_times_key(lm, name)] = round(float(seconds), 1)
        path = _times_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache folder: the time is still shown this session (ShapedGraphs.compile_s)


def expected_line(lm, name: str) -> str:
    """What a person is told before graph ``name`` compiles: the last measured time, or that it is unknown."""
    last = last_compile_s(lm, name)
    return (f"compiling the {name}: last time {last:.0f} s" if last is not None
            else f"compiling the {name}: first compile: unknown")
