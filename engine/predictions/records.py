"""The grading rules fed from the records the pages already hold: a timeline, a prompt-length sweep, a precision
comparison, a speculative race, a batched decode-step sweep. Each returns a grading ``Verdict``; a record that
does not measure what decides the question gives NOT_MEASURED."""
from __future__ import annotations

from typing import Sequence

from engine.measure.spread import Spread
from engine.predictions import grading as G
from engine.predictions.grading import Verdict

BATCH = 8  # the batching question asks about 8 sequences at once


def _samples(s: Spread) -> tuple[float, ...]:
    """A spread (median, min..max) as the three values that keep both: its band is the same median and range."""
    return (s.lo, s.median, s.hi) if s.n > 0 else ()


def timeline_verdict(tl) -> Verdict:
    """The timeline question from an ``engine.timeline.experiment.Timeline``: its prefill bar against the decode
    steps (each a measured pass)."""
    pre = [b.ms for b in tl.bars if b.phase == "prefill"]
    dec = [b.ms for b in tl.bars if b.phase == "decode"]
    return G.prefill_vs_decode(pre, dec, tl.prompt_tokens)


def sweep_verdict(sweep) -> Verdict:
    """Which curve climbs, from an ``engine.timeline.experiment.Sweep``: its shortest and longest prompt."""
    rows = sorted(sweep.rows, key=lambda r: r.prompt_tokens)
    if len(rows) < 2:
        return G.NOT_MEASURED
    a, b = rows[0], rows[-1]
    return G.climbing_curve((_samples(a.ttft_ms), _samples(b.ttft_ms)), (_samples(a.tpot_ms), _samples(b.tpot_ms)))


HALF = ("bfloat16", "float16")  # the half precision the question is about, the first one compared


def precision_verdict(cmp) -> Verdict:
    """Half precision against float32, from an ``engine.precision.experiment.PrecisionComparison``."""
    if cmp is None:
        return G.NOT_MEASURED
    names = {r.precision for r in cmp.rows}
    half = next((p for p in HALF if p in names), None)
    if half is None or "float32" not in names:
        return G.NOT_MEASURED
    return G.half_precision(_samples(cmp.row("float32").decode_ms), _samples(cmp.row(half).decode_ms), half)


def race_verdict(run, relative_noise: float) -> Verdict:
    """Speculation with model:self against plain decoding, from an ``engine.speculative.records.SpecRun`` (the
    question is about the target drafting for itself: another drafter's race does not decide it)."""
    if run is None or not run.measurable:
        return G.NOT_MEASURED
    return G.speculation_wins(run.speedup, relative_noise, drafter_matches=run.drafter == f"model:{run.model}")


def batch_verdict(points: Sequence | None, batch: int = BATCH) -> Verdict:
    """One step for ``batch`` sequences against one for 1, from ``engine.batching.records.SweepPoint``s."""
    if not points:
        return G.NOT_MEASURED
    one = next((p for p in points if p.batch == 1), None)
    many = next((p for p in points if p.batch == batch), None)
    if one is None or many is None:
        return G.NOT_MEASURED
    return G.batch_step([s * 1000.0 for s in one.step_seconds], [s * 1000.0 for s in many.step_seconds], batch)


def attention_verdict(att) -> Verdict:
    """The attention sink question from recorded prompt attentions ``att`` [layers, heads, m, m]: where each head's
    last query puts its largest weight (position 0, the last two positions, or elsewhere)."""
    if att is None or att.ndim != 4 or att.shape[-1] < 3:
        return G.NOT_MEASURED
    top = att[:, :, -1, :].argmax(-1)  # [layers, heads]: the key each head's last query reads most
    m = att.shape[-1]
    first, near = int((top == 0).sum()), int((top >= m - 2).sum())
    return G.attention_sink(first, near, int(top.size) - first - near)


def kv_verdict(step_growth: Sequence[int], layers: int, heads: int, kv_heads: int, head_dim: int,
               bytes_per_value: int) -> Verdict:
    """The bytes-per-token question from the bytes each decode step added to the cache (measured) against each
    choice's formula for this model."""
    one = head_dim * bytes_per_value  # [head_dim] values of one head, in bytes
    return G.kv_per_token(step_growth, {"kv heads": 2 * layers * kv_heads * one,
                                        "query heads": 2 * layers * heads * one,
                                        "keys only": layers * kv_heads * one,
                                        "one layer": 2 * kv_heads * one})
