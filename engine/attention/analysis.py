"""Attention, read from the record and measured on the model: per-head summaries, grouped-query sharing,
the KV-cache saving of grouped-query attention, and how the cost of a forward pass grows with length.

Attention weights come from ``PromptAnalysis.attentions`` ([layers, heads, q, k], rows sum to 1, causal).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from engine.attention import DEFAULT_LENGTHS
from engine.core import instrument, loop
from engine.core.kv import kv_bytes_for
from engine.core.loaded import LoadedModel, ModelInfo
from engine.measure.timing import now

FILLER = ("The quick brown fox jumps over the lazy dog while the teacher explains how a language model reads "
          "every earlier word before it writes the next one. ")


# ---------------------------------------------------------------- summaries of recorded weights

def head_entropy_bits(att: np.ndarray) -> np.ndarray:
    """Mean Shannon entropy (bits) of each head's attention rows: H = -sum_k a_k log2 a_k, averaged over the
    query positions. 0 bits = every query looks at one key; log2(q+1) = spread evenly over all it may see.
    att: [layers, heads, m, m] -> [layers, heads]."""
    a = att.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(a > 0, a * np.log2(a), 0.0).sum(-1)  # [L, H, m]
    return ent.mean(-1)


def head_mean_distance(att: np.ndarray) -> np.ndarray:
    """Mean distance attended (tokens): sum_k a_qk (q - k), averaged over query positions q.
    0 = each token looks at itself; large = looks far back. att: [layers, heads, m, m] -> [layers, heads]."""
    m = att.shape[-1]
    dist = np.arange(m)[:, None] - np.arange(m)[None, :]  # [q, k]
    return (att.astype(np.float64) * np.clip(dist, 0, None)).sum(-1).mean(-1)


# ---------------------------------------------------------------- grouped-query attention

def kv_groups(n_heads: int, n_kv_heads: int) -> list[list[int]]:
    """Query heads that share each key/value head. transformers' ``repeat_kv`` is repeat_interleave on the
    head axis, so query head h reads kv head h // (n_heads / n_kv_heads): heads 0..g-1 -> kv 0, and so on."""
    if n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ValueError(f"{n_heads} query heads cannot be split evenly over {n_kv_heads} KV heads")
    g = n_heads // n_kv_heads
    return [list(range(k * g, (k + 1) * g)) for k in range(n_kv_heads)]


def kv_head_of(head: int, n_heads: int, n_kv_heads: int) -> int:
    return head // (n_heads // n_kv_heads)


@dataclass(frozen=True)
class GQASaving:
    tokens: int
    bytes_gqa: int  # 2 x layers x kv_heads x head_dim x tokens x bytes
    bytes_mha: int  # the same with one KV head per query head
    ratio: float  # bytes_mha / bytes_gqa = n_heads / n_kv_heads


def gqa_saving(info: ModelInfo, tokens: int) -> GQASaving:
    """KV-cache bytes for ``tokens`` positions with this model's KV heads vs one KV head per query head."""
    gqa = kv_bytes_for(info, tokens)  # per layer type: a sliding-window layer holds at most its window
    mha = gqa * info.n_heads // max(1, info.n_kv_heads)  # the same layers with one KV head per query head
    return GQASaving(int(tokens), gqa, mha, mha / gqa if gqa else float("nan"))


# ---------------------------------------------------------------- cost vs length (measured)

@dataclass(frozen=True)
class CostPoint:
    tokens: int
    forward_s: tuple[float, ...]  # whole prefill forward pass, one value per repeat
    attention_s: tuple[float, ...]  # time inside the attention kernels (scores, softmax, weighted sum), all layers

    @property
    def forward_median(self) -> float:
        return statistics.median(self.forward_s)

    @property
    def attention_median(self) -> float:
        return statistics.median(self.attention_s)


def filler_ids(lm: LoadedModel, tokens: int) -> list[int]:
    """``tokens`` ids of ordinary English text (a fixed passage repeated); content does not change the cost."""
    base = lm.tokenizer(FILLER, add_special_tokens=False)["input_ids"]
    reps = tokens // len(base) + 1
    return (base * reps)[:tokens]


@torch.inference_mode()
def measure_forward(lm: LoadedModel, tokens: int, repeats: int = 3, warmup: int = 1) -> CostPoint:
    """Prefill cost at one prompt length: ``warmup`` untimed passes, then ``repeats`` timed passes (device
    synced before each clock read). The attention kernels run through a timed wrapper of PyTorch SDPA, so
    one pass yields both the whole-forward time and the part spent computing q.k scores and the weighted sum
    (the part that grows with the square of the length)."""
    model = lm.model
    x = torch.tensor([filler_ids(lm, tokens)], device=lm.device)  # [1, n]
    fwd, att = [], []
    for i in range(warmup + repeats):
        with instrument.attention_timer() as clock:  # switched on for this pass; the model is not changed
            t0 = now(lm.device)
            loop.full_pass(model, x, logits_to_keep=1)
            seconds = now(lm.device) - t0
        if i >= warmup:
            fwd.append(seconds)
            att.append(clock[0] if instrument.measured(model) else float("nan"))  # not seen: not a zero
    return CostPoint(int(tokens), tuple(fwd), tuple(att))


def measure_cost(lm: LoadedModel, lengths: Sequence[int] = DEFAULT_LENGTHS, repeats: int = 3,
                 on_progress: Callable[[int, int], None] | None = None) -> list[CostPoint]:
    """``measure_forward`` at each length (ascending); ``on_progress(done, total)`` after each."""
    lengths = sorted({int(n) for n in lengths if n >= 1})
    out = []
    for i, n in enumerate(lengths):
        out.append(measure_forward(lm, n, repeats))
        if on_progress is not None:
            on_progress(i + 1, len(lengths))
    return out


def fit_power(tokens: Sequence[int], seconds: Sequence[float], power: float) -> float:
    """Least-squares scale c of the reference curve c * n^power through the measured points."""
    n = np.asarray(tokens, dtype=np.float64) ** power
    y = np.asarray(seconds, dtype=np.float64)
    return float((n @ y) / (n @ n)) if n @ n > 0 else float("nan")


def growth_exponent(tokens: Sequence[int], seconds: Sequence[float]) -> float:
    """Slope of log(time) vs log(length) between the two longest measurements: ~1 linear, ~2 quadratic."""
    if len(tokens) < 2:
        return float("nan")
    (n0, n1), (t0, t1) = tokens[-2:], seconds[-2:]
    if min(n0, n1, t0, t1) <= 0 or n0 == n1:
        return float("nan")
    return float(np.log(t1 / t0) / np.log(n1 / n0))


@dataclass(frozen=True)
class FirstTokenPull:
    heads_mostly_first: int  # heads whose largest weight, for the last query, is on position 0
    heads_total: int
    mean_weight_first: float  # the last query's weight on position 0, averaged over all heads


def first_token_pull(att: np.ndarray) -> FirstTokenPull:
    """How much the last recorded query attends to the very first token (often an 'attention sink':
    a place for weight to go when a head has nothing useful to read). att: [layers, heads, m, m]."""
    last = att[:, :, -1, :].astype(np.float64)  # [L, H, m]
    return FirstTokenPull(int((last.argmax(-1) == 0).sum()), int(last.shape[0] * last.shape[1]),
                          float(last[..., 0].mean()))


# ---------------------------------------------------------------- local vs global layers past the window

@dataclass(frozen=True)
class WindowView:
    """The attention of the last ``rows`` queries over every key, for one sliding-window layer and one global
    layer, on a prompt longer than the window (measured: one recorded forward pass)."""

    n: int  # prompt tokens
    q0: int  # first query position shown
    layers: tuple[int, ...]  # (sliding layer, global layer)
    windows: tuple[int | None, ...]  # their windows (None: global)
    weights: np.ndarray  # [2, rows, n] float32: mean over the layer's heads; rows sum to 1

    def beyond_window_mass(self, i: int) -> float:
        """Attention mass on keys at least the layer's window back (0 for a sliding layer, by construction)."""
        w = self.windows[i]
        if not w:
            w = self._sliding_window()
        q = np.arange(self.q0, self.n)[:, None]
        k = np.arange(self.n)[None, :]
        return float((self.weights[i] * (q - k >= w)).sum(-1).mean())

    def _sliding_window(self) -> int:
        return next(w for w in self.windows if w)


def window_pair(info: ModelInfo) -> tuple[int, int] | None:
    """(first sliding-window layer, first global layer) of this model, or None if it has no such pair."""
    f = info.arch
    if f is None or not f.has_windows:
        return None
    local = next((i for i, w in enumerate(f.windows) if w), None)
    glob = next((i for i, w in enumerate(f.windows) if not w), None)
    return None if local is None or glob is None else (local, glob)


@torch.inference_mode()
def window_view(lm: LoadedModel, ids: Sequence[int], rows: int = 48) -> WindowView:
    """One pass over ``ids`` (longer than the window) recording every layer's weights, kept for the last ``rows``
    queries of the sliding/global pair only (the full [layers, heads, n, n] record is dropped at once)."""
    pair = window_pair(lm.info)
    if pair is None:
        raise ValueError(f"{lm.info.model_type} has no sliding-window layer next to a global one")
    n = len(ids)
    x = torch.tensor([list(ids)], device=lm.device)  # [1, n]
    from engine.core.archfacts import analysis_pass

    _, att = analysis_pass(lm.model, x, n, logits_to_keep=1)
    keep = np.stack([att[i][0, :, n - rows:, :].float().mean(0).cpu().numpy() for i in pair])  # [2, rows, n]
    del att
    f = lm.info.arch
    return WindowView(n, n - rows, pair, tuple(f.windows[i] for i in pair), keep)
