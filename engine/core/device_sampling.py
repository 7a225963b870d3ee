"""Sampling inside the compiled decode step: temperature, top-k, top-p and min-p as one branch-free function of the
logits and a tensor of the four settings, so one compiled graph serves every setting (settings given as Python
numbers would compile a graph per value), and the draw on the device.

The same tokens as the engine's sampler (engine.core.sampling.sample), seed for seed: PyTorch draws one multinomial
sample as the exponential race ``argmax(p / q)`` with ``q ~ Exp(1)`` (``at::multinomial``'s path for one sample,
equivalent to the Gumbel-max trick), so ``noise(...)`` draws ``q`` from the run's generator exactly as
``torch.multinomial`` would, and ``draw`` takes the same argmax. The filters are those of engine.core.sampling in
the same order (temperature -> top-k -> top-p -> min-p, each keeping at least one token, ties surviving top-k),
written without Python branches on the settings: "off" values select a mask that keeps everything.

The noise is drawn where the run's generator lives: the engine's generator is a CPU one (make_generator), so a seed
gives the same tokens on every device, and on a GPU each sampled step copies its noise (vocab floats) to the device.
A greedy step draws nothing.
"""
from __future__ import annotations

import torch

from engine.core.sampling import NEG_INF, SamplingSettings


def knobs(s: SamplingSettings, device) -> torch.Tensor:
    """The settings as one tensor [4]: (temperature, top_k, 1 - top_p, min_p), clamped as the engine's sampler does.
    1 - top_p is taken here, in double precision as the engine's sampler takes it, then rounded once to float32."""
    s = s.clamp()
    return torch.tensor([s.temperature, float(s.top_k), 1.0 - s.top_p, s.min_p], dtype=torch.float32, device=device)


def noise(shape, generator: torch.Generator, device) -> torch.Tensor:
    """q ~ Exp(1) of ``shape`` [batch, vocab], drawn on the generator's device as ``torch.multinomial`` draws it
    (the CPU generator of engine.core.sampling.make_generator gives its very numbers), then moved to ``device``."""
    return torch.empty(shape, dtype=torch.float32, device=generator.device).exponential_(1, generator=generator).to(
        device)


def filtered(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """engine.core.sampling.filter_logits with the settings as a tensor ``k`` [4]: logits [batch, vocab] float32 ->
    the same shape, removed tokens at -inf. The sorts of top-k and top-p run only when one of them is on."""
    t, top_k, tail, min_p = k[0], k[1], k[2], k[3]
    vocab = logits.shape[-1]
    x = logits / torch.where(t > 0, t, torch.ones_like(t))  # [B, V]
    sorts = ((top_k > 0) & (top_k < vocab)) | (tail > 0.0)
    x = torch.cond(sorts, _top_k_top_p, _unsorted, (x, k))
    # min-p (Nguyen et al. 2024): keep p >= min_p * p_max
    probs = x.softmax(-1)
    keep = (probs >= min_p * probs.max(-1, keepdim=True).values) | (min_p <= 0.0)
    return x.masked_fill(~keep, NEG_INF)


def _unsorted(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return x.clone()  # a branch of torch.cond may not return its input


def _top_k_top_p(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    top_k, tail = k[1], k[2]
    vocab = x.shape[-1]
    # top-k: keep logits >= the k-th largest; k off (0 or >= vocab) keeps all
    kk = torch.where((top_k <= 0) | (top_k >= vocab), torch.full_like(top_k, vocab), top_k).long()
    kth = torch.sort(x, dim=-1, descending=True).values.gather(-1, (kk - 1).expand(x.shape[0], 1))  # [B, 1]
    x = x.masked_fill(~(x >= kth), NEG_INF)
    # top-p (Holtzman et al. 2019): drop the ascending tail whose mass is <= 1 - p; the most likely token stays
    asc, order = torch.sort(x, dim=-1, descending=False)  # [B, V]
    drop = (asc.softmax(-1).cumsum(-1) <= tail) & (tail > 0.0)
    drop[..., -1] = False
    return x.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), NEG_INF)


def draw(logits: torch.Tensor, k: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The next token ids [batch] from logits [batch, vocab], settings ``k`` [4] and noise ``q`` [batch, vocab]:
    the argmax when the temperature is 0 (greedy), else the exponential race over the filtered distribution. Only
    the branch taken runs (``torch.cond``): a greedy step pays for one argmax, not for the filters' sorts."""
    return torch.cond(k[0] > 0, _race, _argmax, (logits.float(), k, q))


def _argmax(logits: torch.Tensor, k: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)  # [B]


def _race(logits: torch.Tensor, k: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (filtered(logits, k).softmax(-1) / q).argmax(-1)  # [B]: argmax(p / q), q ~ Exp(1)
