"""The values one pass of the loop produces at its last position, for the home page's loop picture.

The trace records the first token's embedding row, final hidden state and logits (its untimed prompt
analysis); for a later token the same three are read here with one plain forward pass over the context
(prompt + tokens generated so far), untimed and without a cache, so nothing the trace timed is touched.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core import loop
from engine.core.loaded import LoadedModel


@dataclass(frozen=True)
class LastPosition:
    embedding: np.ndarray  # [P] first values of the last token's embedding row
    hidden: np.ndarray  # [P] first values of the final (normed) hidden state at the last position
    top_ids: np.ndarray  # [K] largest logits, largest first
    top_logits: np.ndarray  # [K]
    logit_range: tuple[float, float]  # (min, max) over the whole vocabulary


@torch.inference_mode()
def last_position(lm: LoadedModel, ids, n_preview: int = 8, k: int = 5) -> LastPosition:
    """Embedding row, final hidden state and top logits at the last of ``ids`` (one pass, no cache)."""
    model = lm.model
    x = torch.tensor([list(ids)], device=lm.device)  # [1, n]
    out = loop.full_pass(model, x, output_hidden_states=True, logits_to_keep=1)
    hidden = out.hidden_states[-1][0, -1]  # [d], after the final norm
    logits = out.logits[0, -1].float()  # [vocab]: the model's own (soft-capping included where it has one)
    top = torch.topk(logits, k)
    row = model.get_input_embeddings().weight[int(ids[-1])]  # [d]
    return LastPosition(row[:n_preview].float().cpu().numpy(), hidden[:n_preview].float().cpu().numpy(),
                        top.indices.cpu().numpy(), top.values.cpu().numpy(),
                        (float(logits.min()), float(logits.max())))
