"""Which choice of a "Try this" question the run itself decides: pure functions of measured (or read) numbers.

Each rule takes plain numbers a page already has (timings in milliseconds, ratios, token ids) and returns a
``Verdict``: the choice key the numbers decide, the numbers that decided it with their spread, or no choice when
the measurement is too noisy to tell (then nothing is graded). A timing is judged by an interval, never a lone
median: the interquartile range of the samples where there are at least 4, else their min..max; a ratio of two
timings takes the extreme ends (numerator's low over denominator's high, and back), so a decision holds for every
pair of values inside both spreads.

The rules are named in the lesson files (``decided by: measured <rule>``); ``RULES`` maps each name to its
function and the choice keys it can return, which ui/frame/questions.py checks every lesson's choices against.
"""
from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass
from typing import Sequence


class Outcome(enum.Enum):
    DECIDED = "decided"  # the numbers name one choice
    NOISY = "noisy"  # the spread straddles a boundary: too noisy to decide, nothing graded
    UNDECIDED = "undecided"  # exact numbers that name no single choice (a tie, or no choice matches): not graded
    NOT_MEASURED = "not measured"  # the page has not measured what decides it yet


@dataclass(frozen=True)
class Evidence:
    """One deciding number: its median and the interval the verdict used (lo..hi), over n samples."""

    label: str
    median: float
    lo: float
    hi: float
    n: int
    unit: str  # "ms", "x", "" (a count)


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    answer: str | None  # the decided choice key (None unless DECIDED)
    evidence: tuple[Evidence, ...] = ()

    @property
    def decided(self) -> bool:
        return self.outcome is Outcome.DECIDED


NOT_MEASURED = Verdict(Outcome.NOT_MEASURED, None)


def band(samples: Sequence[float]) -> tuple[float, float, float, int]:
    """(median, lo, hi, n) of the finite samples: lo..hi the quartiles with 4 or more samples, else min..max."""
    v = sorted(float(x) for x in samples if x is not None and math.isfinite(float(x)))
    if not v:
        return math.nan, math.nan, math.nan, 0
    if len(v) >= 4:
        q = statistics.quantiles(v, n=4, method="inclusive")
        return statistics.median(v), q[0], q[2], len(v)
    return statistics.median(v), v[0], v[-1], len(v)


def _evidence(label: str, samples: Sequence[float], unit: str, scale: float = 1.0) -> Evidence:
    m, lo, hi, n = band(samples)
    return Evidence(label, m * scale, lo * scale, hi * scale, n, unit)


def _ratio(label: str, top: Evidence, bottom: Evidence) -> Evidence:
    """top / bottom with the widest interval the two spreads allow."""
    if not (bottom.lo > 0 and bottom.hi > 0):
        return Evidence(label, math.nan, math.nan, math.nan, 0, "x")
    return Evidence(label, top.median / bottom.median, top.lo / bottom.hi, top.hi / bottom.lo,
                    min(top.n, bottom.n), "x")


def bucket(lo: float, hi: float, edges: Sequence[float], keys: Sequence[str]) -> str | None:
    """The key of the one bucket (split at ``edges``, ascending) holding all of lo..hi, or None when the interval
    crosses an edge or is not a number. len(keys) == len(edges) + 1."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    pick = [sum(x >= e for e in edges) for x in (lo, hi)]
    return keys[pick[0]] if pick[0] == pick[1] else None


def _judge(evidence: Sequence[Evidence], answer: str | None) -> Verdict:
    if any(e.n == 0 for e in evidence):
        return Verdict(Outcome.NOT_MEASURED, None, tuple(evidence))
    return Verdict(Outcome.DECIDED if answer else Outcome.NOISY, answer, tuple(evidence))


# ------------------------------------------------------------------------------------------------- the rules

AS_WIDE = (2 / 3, 3 / 2)  # the prefill bar is "as wide" when within this factor of the decode bars together


def prefill_vs_decode(prefill_ms: Sequence[float], decode_ms: Sequence[float], prompt_tokens: int) -> Verdict:
    """Is one prefill pass over n prompt tokens narrower than, as wide as, or wider than n decode steps?
    Ratio = prefill / (n x decode step); "as wide" within a factor 1.5 either way."""
    if prompt_tokens < 1:
        return NOT_MEASURED
    pre = _evidence("prefill pass", prefill_ms, "ms")
    dec = _evidence(f"{prompt_tokens} decode steps (n x one step)", decode_ms, "ms", float(prompt_tokens))
    r = _ratio("prefill / decode steps", pre, dec)
    return _judge((pre, dec, r), bucket(r.lo, r.hi, AS_WIDE, ("narrower", "as wide", "wider")))


CLIMBS = 2.0  # a curve "climbs" when its value at the longest prompt is at least this many times the shortest's


def climbing_curve(first_token_ms: tuple[Sequence[float], Sequence[float]],
                   per_token_ms: tuple[Sequence[float], Sequence[float]]) -> Verdict:
    """Which curve of the prompt-length sweep climbs: time to first token, time per token, both or neither?
    Each argument is (samples at the shortest prompt, samples at the longest); a curve climbs when longest /
    shortest >= CLIMBS, is flat when below it, and undecided when its interval crosses CLIMBS."""
    verdicts = []
    ev = []
    for name, (short, long_) in (("time to first token", first_token_ms), ("time per token", per_token_ms)):
        a, b = _evidence(f"{name}, shortest prompt", short, "ms"), _evidence(f"{name}, longest prompt", long_, "ms")
        r = _ratio(f"{name}: longest / shortest", b, a)
        ev += [a, b, r]
        verdicts.append(bucket(r.lo, r.hi, (CLIMBS,), ("flat", "climbs")))
    if any(e.n == 0 for e in ev):
        return Verdict(Outcome.NOT_MEASURED, None, tuple(ev))
    if None in verdicts:
        return Verdict(Outcome.NOISY, None, tuple(ev))
    answer = {("climbs", "flat"): "first token", ("flat", "climbs"): "per token", ("climbs", "climbs"): "both",
              ("flat", "flat"): "neither"}[tuple(verdicts)]
    return Verdict(Outcome.DECIDED, answer, tuple(ev))


HALF_EDGES = (1.1, 1.7)  # below 1.1x: not faster; 1.7x or more: about twice as fast


def half_precision(float32_ms: Sequence[float], half_ms: Sequence[float], half: str = "bfloat16") -> Verdict:
    """Is a decode step in half precision about twice as fast as in float32, faster but not twice, or not faster?
    Speedup = float32 step / half step."""
    f = _evidence("float32 decode step", float32_ms, "ms")
    h = _evidence(f"{half} decode step", half_ms, "ms")
    r = _ratio(f"{half} speedup", f, h)
    return _judge((f, h, r), bucket(r.lo, r.hi, HALF_EDGES, ("not faster", "faster", "twice")))


def speculation_wins(speedup: float, relative_noise: float, drafter_matches: bool = True) -> Verdict:
    """Did speculative decoding beat plain decoding in this race? Speedup = plain time / speculative time, whose
    interval is speedup x (1 -+ relative_noise), the relative spread of the plain decode steps; ``drafter_matches``
    is False when the race shown used another drafter than the one the question is about."""
    if not drafter_matches or not math.isfinite(speedup) or speedup <= 0:
        return NOT_MEASURED
    noise = max(0.0, float(relative_noise)) if math.isfinite(relative_noise) else 0.1
    e = Evidence("speculative speedup (wall clock)", speedup, speedup * (1 - noise), speedup * (1 + noise), 1, "x")
    return _judge((e,), bucket(e.lo, e.hi, (1.0,), ("slower", "faster")))


def batch_step(one_ms: Sequence[float], batch_ms: Sequence[float], batch: int) -> Verdict:
    """One decode step for ``batch`` sequences against one step for one (T): about T (under 1.25 T), well under
    batch x T, about batch x T (within a factor 1.25) or more. Batched beats serial when it is under batch x T."""
    if batch < 2:
        return NOT_MEASURED
    one = _evidence("one step, 1 sequence (T)", one_ms, "ms")
    many = _evidence(f"one step, {batch} sequences", batch_ms, "ms")
    r = _ratio(f"{batch}-sequence step / T", many, one)
    return _judge((one, many, r), bucket(r.lo, r.hi, (1.25, batch / 1.25, batch * 1.25),
                                         ("about t", "less", "about bt", "more")))


def same_tokens(ids: Sequence) -> Verdict:
    """Are the given spellings the same tokens, some shared, or all different? ``ids``: each spelling's token id
    (or tuple of ids). Read from the tokenizer: no noise."""
    n, distinct = len(ids), len(set(ids))
    if n < 2:
        return NOT_MEASURED
    answer = "same" if distinct == 1 else "different" if distinct == n else "some"
    return Verdict(Outcome.DECIDED, answer, (Evidence("different encodings", distinct, distinct, distinct, n, ""),))


def rope_shift(score_near: float, score_shifted: float, rel_tol: float = 1e-3) -> Verdict:
    """Does an attention score change when query and key move together? Equal within ``rel_tol`` (float
    rounding) -> "same"."""
    if not (math.isfinite(score_near) and math.isfinite(score_shifted)):
        return NOT_MEASURED
    same = math.isclose(score_near, score_shifted, rel_tol=rel_tol, abs_tol=1e-6)
    ev = (Evidence("score(3, 0)", score_near, score_near, score_near, 1, ""),
          Evidence("score(13, 10)", score_shifted, score_shifted, score_shifted, 1, ""))
    return Verdict(Outcome.DECIDED, "same" if same else "changes", ev)


def attention_sink(heads_first: int, heads_near: int, heads_other: int) -> Verdict:
    """Which earlier token does the last prompt token read most, over all heads: the first token (an attention
    sink), itself or the token just before it, or another word of the prompt? Each head votes with its largest
    weight; the most heads decide. Read from one recorded pass: no noise, but a tie between the top two decides
    nothing."""
    votes = {"first": heads_first, "near": heads_near, "word": heads_other}
    if sum(votes.values()) < 1:
        return NOT_MEASURED
    ev = (Evidence("heads reading the first token most", heads_first, heads_first, heads_first, 1, ""),
          Evidence("heads reading themselves or the token before most", heads_near, heads_near, heads_near, 1, ""),
          Evidence("heads reading another word most", heads_other, heads_other, heads_other, 1, ""))
    top = sorted(votes.values(), reverse=True)
    if top[0] == top[1]:
        return Verdict(Outcome.UNDECIDED, None, ev)
    return Verdict(Outcome.DECIDED, max(votes, key=votes.get), ev)


def kv_per_token(step_growth: Sequence[int], formulas: dict[str, int]) -> Verdict:
    """Which formula gives the bytes one new token adds to the cache? ``step_growth``: the bytes each decode step
    of this run added (measured from the cache's tensors); ``formulas``: each choice's bytes. The first choice (in
    the lesson's order) equal to what every step added decides; measured bytes are exact, so there is no spread."""
    grown = sorted(set(int(g) for g in step_growth))
    if not grown:
        return NOT_MEASURED
    ev = (Evidence("bytes each decode step added (measured)", grown[0], grown[0], grown[-1], len(step_growth), ""),)
    if len(grown) > 1:  # a window filled during the run: the steps disagree, the question is about the first ones
        return Verdict(Outcome.UNDECIDED, None, ev)
    answer = next((k for k, v in formulas.items() if v == grown[0]), None)  # none: e.g. a latent (MLA) cache
    return Verdict(Outcome.DECIDED if answer else Outcome.UNDECIDED, answer, ev)


def nearer_alike(cos_near: float, cos_far: float) -> Verdict:
    """Are the vectors of two neighbouring positions more alike (cosine) than those of two far apart? Read from
    the model's weights: no noise."""
    if not (math.isfinite(cos_near) and math.isfinite(cos_far)):
        return NOT_MEASURED
    ev = (Evidence("cosine, neighbouring positions", cos_near, cos_near, cos_near, 1, ""),
          Evidence("cosine, far-apart positions", cos_far, cos_far, cos_far, 1, ""))
    return Verdict(Outcome.DECIDED, "more" if cos_near > cos_far else "less", ev)


@dataclass(frozen=True)
class Rule:
    name: str
    answers: tuple[str, ...]  # every choice key the rule can decide


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("prefill_vs_decode", ("narrower", "as wide", "wider")),
    Rule("climbing_curve", ("first token", "per token", "both", "neither")),
    Rule("half_precision", ("not faster", "faster", "twice")),
    Rule("speculation_wins", ("slower", "faster")),
    Rule("batch_step", ("about t", "less", "about bt", "more")),
    Rule("same_tokens", ("same", "some", "different")),
    Rule("rope_shift", ("same", "changes")),
    Rule("attention_sink", ("first", "near", "word")),
    Rule("nearer_alike", ("more", "less")),
    Rule("kv_per_token", ("kv heads", "query heads", "keys only", "one layer")),
)}
