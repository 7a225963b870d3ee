"""Fewer bytes, faster decode: the same model at several precisions, timed in one run, and what it costs.

For each precision (engine.models.precision), in one process, alternating precisions within every repeat so a shared
machine's drift hits all alike:
- measured: prefill time of a prompt, the median decode step, tokens/s (1000 / median step);
- derived: weight bytes one decode step reads (from the stored tensors) and the bandwidth floor for them
  (bytes / measured read bandwidth);
- agreement with float32: greedy tokens identical from the start (how many of N before the first difference),
  and over every position of a fixed text, top-1 agreement (same argmax next token) and the mean
  KL(p_float32 || p_precision) of the next-token distribution, in nats.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from engine.measure.spread import LESSON_RUNS, Spread, lesson_flags
from engine.core.loop import forward, new_cache, timed_greedy, warm_up
from engine.core.loaded import LoadedModel
from engine.models.precision import decode_weight_bytes, lm_precision

Progress = Callable[[float, str], None]

AGREEMENT_TEXT = (
    "The water cycle moves water between the oceans, the air and the land. Heat from the sun evaporates water "
    "from the sea; the vapour rises, cools and condenses into clouds. When the droplets grow heavy they fall as "
    "rain or snow, which runs off into rivers or soaks into the ground, and in time returns to the sea."
)


def _noop(frac: float, msg: str) -> None:
    pass


@dataclass(frozen=True)
class Agreement:
    """Next-token distributions of a model vs a reference (float32) at every position of the same text."""

    positions: int
    top1: float  # fraction of positions where both pick the same most likely token
    mean_kl: float  # mean over positions of KL(p_ref || p) in nats
    max_kl: float


def agreement(ref_logits: torch.Tensor, logits: torch.Tensor) -> Agreement:
    """ref_logits, logits: [positions, vocab]. KL(p || q) = sum_v p_v (log p_v - log q_v), computed in float64."""
    lp = torch.log_softmax(ref_logits.double(), -1)  # [positions, vocab]
    lq = torch.log_softmax(logits.double(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)  # [positions]
    top1 = (ref_logits.argmax(-1) == logits.argmax(-1)).double().mean()
    return Agreement(int(kl.numel()), float(top1), float(kl.mean()), float(kl.max()))


def same_prefix(a, b) -> int:
    """How many tokens two sequences share from the start (a greedy run follows its own earlier tokens, so after
    the first difference the texts go separate ways)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@torch.inference_mode()
def text_logits(lm: LoadedModel, ids: list[int]) -> torch.Tensor:
    """One forward pass over ``ids``: next-token logits at every position, [positions, vocab] float32."""
    x = torch.tensor([ids], device=lm.device)  # [1, n]
    return forward(lm, x, new_cache(lm), keep=len(ids))[0].float().cpu()  # [n, vocab]


def _greedy_timed(lm: LoadedModel, ids: list[int], n: int) -> tuple[float, list[float], list[int]]:
    """Greedy decode of ``n`` tokens (EOS ignored): (prefill s, decode step seconds, token ids)."""
    out, t_prefill, steps = timed_greedy(lm, ids, n)
    return t_prefill, steps, out


@dataclass(frozen=True)
class PrecisionRow:
    precision: str
    dtype: str  # compute dtype: activations and the KV cache
    decode_weight_bytes: int  # derived from the stored tensors
    floor_ms: float  # derived: decode_weight_bytes / read bandwidth
    prefill_ms: Spread  # measured, per repeat
    decode_ms: Spread  # measured: per-repeat medians of the decode steps
    tokens: tuple[int, ...]
    text: str
    same_tokens: int  # greedy tokens identical to float32 from the start
    agreement: Agreement

    @property
    def decode_tokens_per_s(self) -> float:
        return 1000.0 / self.decode_ms.median if self.decode_ms.median > 0 else float("nan")

    @property
    def flags(self) -> tuple[str, ...]:
        """Why this row's decode time cannot carry a sentence: fewer than LESSON_RUNS repeats, or two repeats more
        than 1.5x apart (engine.measure.spread.lesson_flags); empty when it can."""
        return lesson_flags(self.decode_ms, f"{self.precision} decode step", "ms")


@dataclass(frozen=True)
class PrecisionComparison:
    rows: tuple[PrecisionRow, ...]
    reference: str  # the precision the others are compared with
    read_gb_s: float  # measured bandwidth used for the floors
    prompt_tokens: int
    new_tokens: int
    repeats: int
    text_positions: int
    threads: int

    def row(self, precision: str) -> PrecisionRow:
        return next(r for r in self.rows if r.precision == precision)

    def speedup(self, precision: str) -> float:
        """Decode tokens/s of ``precision`` / tokens/s of the reference, medians of this one run."""
        return self.row(self.reference).decode_ms.median / self.row(precision).decode_ms.median

    def speedup_flags(self, precision: str) -> tuple[str, ...]:
        """Why ``speedup(precision)`` is not a lesson: its row's flags and the reference's (empty: it is one)."""
        ref = self.row(self.reference)
        return self.row(precision).flags + (ref.flags if precision != self.reference else ())

    def prefill_speedup(self, precision: str) -> float:
        return self.row(self.reference).prefill_ms.median / self.row(precision).prefill_ms.median


def compare_precisions(models: list[LoadedModel], prompt_ids: list[int], new_tokens: int = 16,
                       repeats: int = LESSON_RUNS,
                       read_gb_s: float = float("nan"), text: str = AGREEMENT_TEXT,
                       progress: Progress = _noop) -> PrecisionComparison:
    """``models``: the same model at several precisions, the reference (float32) first."""
    if not models:
        raise ValueError("give at least one model")
    new_tokens = max(2, int(new_tokens))
    ref = models[0]
    total = len(models) * (repeats + 2)
    done = 0
    for lm in models:
        warm_up(lm)
        _greedy_timed(lm, prompt_ids, 2)
        done += 1
        progress(done / total, f"Warmed up {lm_precision(lm)}")
    prefill_s = {lm.ref: [] for lm in models}
    decode_s = {lm.ref: [] for lm in models}
    tokens: dict = {}
    for r in range(repeats):
        for lm in models:  # alternating: every repeat runs each precision once
            tp, steps, out = _greedy_timed(lm, prompt_ids, new_tokens)
            prefill_s[lm.ref].append(tp * 1000.0)
            decode_s[lm.ref].append(statistics.median(steps) * 1000.0)
            tokens[lm.ref] = out
            done += 1
            progress(done / total, f"Repeat {r + 1}/{repeats}: {lm_precision(lm)} decoded {new_tokens} tokens")
    text_ids = list(ref.tokenizer(text, add_special_tokens=False).input_ids)
    ref_logits = None
    rows = []
    for lm in models:
        logits = text_logits(lm, text_ids)
        ref_logits = logits if ref_logits is None else ref_logits
        wb = decode_weight_bytes(lm.model)
        rows.append(PrecisionRow(
            precision=lm_precision(lm), dtype=lm.info.dtype, decode_weight_bytes=wb,
            floor_ms=wb / (read_gb_s * 1e9) * 1000.0 if read_gb_s > 0 else float("nan"),
            prefill_ms=Spread.of(prefill_s[lm.ref]), decode_ms=Spread.of(decode_s[lm.ref]),
            tokens=tuple(tokens[lm.ref]), text=lm.tokenizer.decode(tokens[lm.ref]),
            same_tokens=same_prefix(tokens[lm.ref], tokens[ref.ref]), agreement=agreement(ref_logits, logits)))
        done += 1
        progress(min(1.0, done / total), f"Compared {lm_precision(lm)} with {lm_precision(ref)} over the fixed text")
    return PrecisionComparison(tuple(rows), lm_precision(ref), float(read_gb_s), len(prompt_ids), new_tokens,
                               int(repeats), len(text_ids), torch.get_num_threads())
