"""The sampling path laid open, stage by stage, from one vector of cached logits (no forward pass here).

``stages`` records what each stage of ``engine.core.sampling`` does to the most likely tokens: raw logits ->
logits / temperature -> top-k -> top-p -> min-p masks (in transformers' ``generate`` order) -> softmax.
``draw_at`` reproduces the loop's draw at any step from (seed, step) alone, and ``draw_counts`` draws many
tokens at once for a histogram. Everything runs on CPU float32, like ``engine.core.sampling``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core.sampling import (
    SamplingSettings, apply_temperature, entropy_bits, make_generator, min_p_mask, sample, sampling_probs,
    top_k_mask, top_p_mask,
)
from engine.measure.threads import at_most_threads

MAX_DRAWS = 100_000
CURVE_POINTS = 200  # the cumulative curve keeps this many of the most likely tokens
# The functions below run on one thread (``@at_most_threads(1)``, a context manager used as a decorator: the count is
# set for each call and restored after it): splitting a 49k-element op across threads saves nothing, and on a busy
# CPU the hand-offs made them 20x slower (measured: 860 ms vs 44 ms). They run as jobs on the engine worker.


@dataclass(frozen=True)
class Stages:
    """One position's logits followed through the sampling stages. Arrays of length m cover the m tokens
    with the largest raw logits, most likely first (temperature never changes that order)."""

    settings: SamplingSettings
    vocab: int
    ids: np.ndarray  # [m] token ids, most likely first
    logits: np.ndarray  # [m] raw logits
    scaled: np.ndarray  # [m] logits / temperature (the raw logits when greedy)
    probs_raw: np.ndarray  # [m] softmax(logits): the model's own distribution (temperature 1)
    probs_scaled: np.ndarray  # [m] softmax(logits / T) over the whole vocabulary, before any filter
    keep_top_k: np.ndarray  # [m] bool: survives top-k
    keep_top_p: np.ndarray  # [m] bool: survives top-k and then top-p
    keep_min_p: np.ndarray  # [m] bool: survives all three filters
    final: np.ndarray  # [m] the distribution the token is drawn from (one-hot on the argmax when greedy)
    survivors: tuple[int, int, int, int]  # tokens left: whole vocabulary, after top-k, after top-p, after min-p
    entropy_raw_bits: float
    entropy_scaled_bits: float
    entropy_final_bits: float
    cum_probs: np.ndarray  # [c] cumulative probability of the distribution top-p sees, most likely first
    top_p_keep: int  # how many tokens top-p keeps (the cut on the curve)
    final_mass_shown: float  # share of the final distribution held by the m tokens shown

    @property
    def greedy(self) -> bool:
        return self.settings.greedy


@at_most_threads(1)
@torch.inference_mode()
def stages(logits, settings: SamplingSettings, show: int = 15, curve_points: int = CURVE_POINTS) -> Stages:
    """Follow one position's logits [vocab] through temperature, top-k, top-p, min-p and softmax."""
    s = settings.clamp()
    raw = torch.as_tensor(np.asarray(logits), dtype=torch.float32).reshape(-1)  # [vocab]
    vocab = raw.shape[0]
    scaled = apply_temperature(raw, s.temperature)  # greedy leaves the logits as they are
    k_mask = top_k_mask(scaled, s.top_k)
    after_k = scaled.masked_fill(~k_mask, float("-inf"))
    p_mask = top_p_mask(after_k, s.top_p) & k_mask
    after_p = after_k.masked_fill(~p_mask, float("-inf"))
    m_mask = min_p_mask(after_p, s.min_p) & p_mask
    if s.greedy:
        final = sampling_probs(raw, s)  # [vocab] one-hot on the argmax
    else:  # the same as sampling_probs(raw, s): the masks above are the ones filter_logits applies in turn
        final = scaled.masked_fill(~m_mask, float("-inf")).softmax(-1)
    top = torch.topk(raw, min(show, vocab)).indices  # [m] most likely first
    p_raw, p_scaled = raw.softmax(-1), scaled.softmax(-1)
    cum = torch.topk(after_k.softmax(-1), min(curve_points, vocab)).values.cumsum(-1)
    np_ = lambda t: t.numpy().copy()  # noqa: E731
    return Stages(
        settings=s, vocab=vocab, ids=np_(top), logits=np_(raw[top]), scaled=np_(scaled[top]),
        probs_raw=np_(p_raw[top]), probs_scaled=np_(p_scaled[top]), keep_top_k=np_(k_mask[top]),
        keep_top_p=np_(p_mask[top]), keep_min_p=np_(m_mask[top]), final=np_(final[top]),
        survivors=(vocab, int(k_mask.sum()), int(p_mask.sum()), int(m_mask.sum())),
        entropy_raw_bits=entropy_bits(p_raw), entropy_scaled_bits=entropy_bits(p_scaled),
        entropy_final_bits=entropy_bits(final), cum_probs=np_(cum), top_p_keep=int(p_mask.sum()),
        final_mass_shown=float(final[top].sum()),
    )


@at_most_threads(1)
def draw_at(logits, settings: SamplingSettings, seed: int, step: int = 0) -> int:
    """The token the loop draws at ``step`` (0 = first token after the prompt) from these logits.

    ``engine.core.trace.generate_tokens`` uses one generator seeded once and draws from it at every step. A
    one-sample ``torch.multinomial`` consumes the same amount of randomness whatever the probabilities, so
    replaying ``step`` earlier draws puts the generator exactly where the loop had it: with constant
    settings, stepping through generation here reproduces the loop's tokens. Greedy draws use no randomness.
    """
    s = settings.clamp()
    x = torch.as_tensor(np.asarray(logits), dtype=torch.float32).reshape(-1)
    if s.greedy:
        return int(x.argmax())
    gen = make_generator(seed)
    flat = torch.ones(1, x.shape[0])  # replay needs only the generator's consumption, not the real probs
    for _ in range(int(step)):
        torch.multinomial(flat, 1, generator=gen)
    return int(sample(x, s, gen))


def stages_and_draw(logits, settings: SamplingSettings, seed: int, step: int, show: int = 15) -> tuple[Stages, int]:
    """``stages`` and ``draw_at`` of one position, as one job for the engine worker."""
    return stages(logits, settings, show=show), draw_at(logits, settings, seed, step)


@dataclass(frozen=True)
class Draws:
    """Many independent draws under one setting, counted per token (most drawn first)."""

    n: int
    ids: np.ndarray  # [u] distinct tokens drawn
    counts: np.ndarray  # [u]
    probs: np.ndarray  # [u] their probability under the sampling distribution


@at_most_threads(1)
@torch.inference_mode()
def draw_counts(logits, settings: SamplingSettings, n: int, seed: int) -> Draws:
    """Draw n tokens at once (vectorised ``torch.multinomial`` with replacement, seeded) and count them."""
    n = int(min(max(n, 1), MAX_DRAWS))
    s = settings.clamp()
    x = torch.as_tensor(np.asarray(logits), dtype=torch.float32).reshape(-1)
    probs = sampling_probs(x, s)  # [vocab]
    if s.greedy:
        picks = x.argmax().reshape(1).repeat(n)
    else:
        picks = torch.multinomial(probs, n, replacement=True, generator=make_generator(seed))  # [n]
    counts = torch.bincount(picks, minlength=x.shape[0])
    ids = torch.nonzero(counts).reshape(-1)
    order = torch.argsort(counts[ids], descending=True, stable=True)
    ids = ids[order]
    return Draws(n=n, ids=ids.numpy().copy(), counts=counts[ids].numpy().copy(), probs=probs[ids].numpy().copy())


def total_variation(draws: Draws, probs_of_ids: np.ndarray | None = None) -> float:
    """Half the L1 distance between the drawn frequencies and the sampling distribution (0 = identical).
    Tokens never drawn contribute their probability; those not among ``draws.ids`` are counted via 1 - sum."""
    freq = draws.counts / draws.n
    p = draws.probs if probs_of_ids is None else probs_of_ids
    return float(0.5 * (np.abs(freq - p).sum() + max(0.0, 1.0 - float(p.sum()))))
