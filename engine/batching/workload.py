"""The Batching lesson's request trace: who asks what, when, and for how many tokens (seeded, synthetic arrivals; the
serving in engine/batching/experiment.py is real). No torch: the command line's help and the pages' settings read it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.prompt import encode_prompt

POLICIES = ("static", "continuous")  # how engine.batching.experiment.serve schedules the requests

PROMPTS = (
    "What is the capital of France?",
    "Give me three tips for sleeping better.",
    "Explain photosynthesis to a ten-year-old.",
    "Write a haiku about the sea.",
    "Why is the sky blue?",
    "Translate 'good morning' into Spanish and German.",
    "What is 17 times 23?",
    "Suggest a name for a black cat.",
    "How do I boil an egg?",
    "Summarise the plot of Romeo and Juliet in one sentence.",
    "List four planets of the solar system.",
    "What does a CPU do?",
)


@dataclass(frozen=True)
class Request:
    rid: int
    arrival_s: float  # offset from the start of the run
    prompt: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int  # exactly this many tokens are generated (end-of-sequence is not a stop here)


@dataclass(frozen=True)
class WorkloadSettings:
    """A request trace: Poisson arrivals at ``rate_per_s``, output lengths uniform in [min, max], seeded."""

    n_requests: int = 8
    rate_per_s: float = 4.0
    min_new_tokens: int = 4
    max_new_tokens: int = 24
    seed: int = 0
    chat: bool = True



def make_workload(tokenizer, s: WorkloadSettings, prompts: tuple[str, ...] = PROMPTS) -> tuple[Request, ...]:
    """Seeded request trace: exponential gaps (Poisson arrivals), the first request at t = 0."""
    if s.n_requests < 1:
        raise ValueError("at least one request is needed")
    if not s.rate_per_s > 0:
        raise ValueError("the arrival rate must be positive")
    lo, hi = sorted((max(1, int(s.min_new_tokens)), max(1, int(s.max_new_tokens))))
    rng = np.random.default_rng(s.seed)
    gaps = rng.exponential(1.0 / s.rate_per_s, s.n_requests)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    lengths = rng.integers(lo, hi + 1, s.n_requests)
    picks = rng.permutation(np.resize(np.arange(len(prompts)), s.n_requests))
    out = []
    for i in range(s.n_requests):
        text = prompts[int(picks[i]) % len(prompts)]
        ids = encode_prompt(tokenizer, text, use_chat_template=s.chat).ids
        out.append(Request(i, float(arrivals[i]), text, ids, int(lengths[i])))
    return tuple(out)


def scale_arrivals(reqs: tuple[Request, ...], rate_factor: float) -> tuple[Request, ...]:
    """The same requests arriving ``rate_factor`` times as often (arrival times divided by it)."""
    return tuple(Request(r.rid, r.arrival_s / rate_factor, r.prompt, r.prompt_ids, r.max_new_tokens) for r in reqs)
