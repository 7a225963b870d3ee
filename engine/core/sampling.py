"""Turning next-token logits into a choice: temperature, top-k, top-p (nucleus), min-p, then a draw.

The order matches transformers' ``generate`` (temperature -> top-k -> top-p -> min-p), and each filter
keeps at least one token. Temperature 0 means greedy: take the argmax, no randomness. Sampling always
runs on CPU float32 with an explicit ``torch.Generator`` so a seed reproduces a run on any device.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

NEG_INF = float("-inf")


def knob(default: float | int, low: float | int, high: float | int):
    """A sampling knob: its default (the knob off, or greedy) and the range ``clamp`` forces it into, declared once;
    the saved run's schema reads the same range (engine/record/format.py: settings_schema)."""
    return field(default=default, metadata={"range": (low, high)})


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling knobs of a run, each a ``knob``. Everything that carries a run carries this record whole (the run
    request, the worker's answers, the trace, the saved run's ``settings``), so a new knob is a field here."""

    temperature: float = knob(0.0, 0.0, 10.0)  # 0 = greedy
    top_k: int = knob(0, 0, 2**32)  # 0 = off
    top_p: float = knob(1.0, 0.0, 1.0)  # 1 = off
    min_p: float = knob(0.0, 0.0, 1.0)  # 0 = off

    def __post_init__(self):
        # NaN has no meaning for any of these and survives every min/max clamp; refuse it here, with a message,
        # rather than as a RuntimeError from deep inside a draw.
        for f in fields(self):
            val = getattr(self, f.name)
            if isinstance(f.default, float) and val != val:
                raise ValueError(f"The sampling setting {f.name} is not a number (nan).")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def clamp(self) -> "SamplingSettings":
        """The same settings forced into their valid ranges, each as its default's type (extreme UI/CLI values never
        crash a run)."""
        def within(f):
            low, high = f.metadata["range"]
            return min(max(type(f.default)(getattr(self, f.name)), low), high)

        return replace(self, **{f.name: within(f) for f in fields(self)})


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits if temperature <= 0 else logits / temperature


def top_k_mask(logits: torch.Tensor, k: int) -> torch.Tensor:
    """True where a token survives top-k: its logit is at least the k-th largest (ties survive)."""
    if k <= 0 or k >= logits.shape[-1]:
        return torch.ones_like(logits, dtype=torch.bool)
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits >= kth


def top_p_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """True for the smallest set of most likely tokens whose probabilities add up to at least p
    (Holtzman et al. 2019, nucleus sampling). The most likely token always survives."""
    if p >= 1.0:
        return torch.ones_like(logits, dtype=torch.bool)
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
    cum = sorted_logits.softmax(-1).cumsum(-1)  # ascending: the tail's mass comes first
    drop_sorted = cum <= (1.0 - p)
    drop_sorted[..., -1] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return ~drop


def min_p_mask(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """True where p(token) >= min_p * p(most likely token) (Nguyen et al. 2024, min-p sampling)."""
    if min_p <= 0.0:
        return torch.ones_like(logits, dtype=torch.bool)
    probs = logits.softmax(-1)
    return probs >= min_p * probs.max(-1, keepdim=True).values


def filter_logits(logits: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
    """Logits after temperature and the three filters; removed tokens get -inf."""
    out = apply_temperature(logits.float(), s.temperature)
    for mask_fn, arg in ((top_k_mask, s.top_k), (top_p_mask, s.top_p), (min_p_mask, s.min_p)):
        out = out.masked_fill(~mask_fn(out, arg), NEG_INF)
    return out


def sampling_probs(logits: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
    """The distribution a token is actually drawn from. Greedy puts all mass on the argmax."""
    if s.greedy:
        probs = torch.zeros_like(logits, dtype=torch.float32)
        return probs.scatter(-1, logits.argmax(-1, keepdim=True), 1.0)
    return filter_logits(logits, s).softmax(-1)


def sample(logits: torch.Tensor, s: SamplingSettings, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick next tokens. logits: [..., vocab] -> ids: [...]. Greedy (temperature 0) is deterministic."""
    logits = logits.detach().float().cpu()
    if s.greedy:
        return logits.argmax(-1)
    probs = sampling_probs(logits, s)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def make_generator(seed: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF)
    return g


def entropy_bits(probs: torch.Tensor) -> float:
    """Shannon entropy in bits; zero-probability tokens contribute nothing."""
    return float(torch.special.entr(probs.float()).sum() / torch.log(torch.tensor(2.0)))
