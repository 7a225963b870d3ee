"""Predictions at every position, read from the logits of one forward pass: what the model expected next, and how it
ranked the token that really came next (the property speculative decoding's verify step relies on). The prompt's
analysis pass (engine.core.trace) records them; the sampling page's pass is engine.sampling.positions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


TOP = 5


@dataclass(frozen=True)
class PositionPredictions:
    ids: np.ndarray  # [n] the input token ids
    top_ids: np.ndarray  # [n, TOP] most likely next tokens after each position
    top_probs: np.ndarray  # [n, TOP] their softmax probabilities (temperature 1)
    actual_probs: np.ndarray  # [n-1] probability the model gave to the token that really came next
    actual_ranks: np.ndarray  # [n-1] its rank among all vocabulary tokens (1 = the model's top guess)
    entropy_bits: np.ndarray  # [n] entropy of each position's next-token distribution
    forward_passes: int = 1


@torch.inference_mode()
def predictions_from_logits(ids: list[int], logits: torch.Tensor, top: int = TOP) -> PositionPredictions:
    """Predictions at every position from the logits of a pass already made (``logits`` [n, vocab])."""
    x = torch.tensor([list(ids)])  # [1, n]
    logits = logits.float().cpu()  # [n, vocab]
    logp = logits.log_softmax(-1)  # [n, vocab]
    probs = logp.exp()
    t = torch.topk(probs, min(top, probs.shape[-1]), dim=-1)
    nxt = x[0, 1:].cpu()  # [n-1] the token that actually came next
    actual_logit = logits[:-1].gather(-1, nxt[:, None])  # [n-1, 1]
    ranks = (logits[:-1] > actual_logit).sum(-1) + 1  # ties share the better rank
    ent = -(probs * logp.nan_to_num(neginf=0.0)).sum(-1) / np.log(2.0)  # [n] bits
    return PositionPredictions(
        ids=np.asarray(ids, dtype=np.int64), top_ids=t.indices.numpy(), top_probs=t.values.numpy(),
        actual_probs=probs[:-1].gather(-1, nxt[:, None])[:, 0].numpy(), actual_ranks=ranks.numpy(),
        entropy_bits=ent.numpy(),
    )
