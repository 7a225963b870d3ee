"""Predictions at every position from ONE forward pass over a prompt (the record: engine.core.predictions)."""
from __future__ import annotations

import torch

from engine.core.loaded import LoadedModel
from engine.core.loop import full_pass
from engine.core.predictions import TOP, PositionPredictions, predictions_from_logits


@torch.inference_mode()
def position_predictions(lm: LoadedModel, ids: list[int], top: int = TOP) -> PositionPredictions:
    """One forward pass over ``ids`` (no cache); the logits at position i predict token i + 1."""
    x = torch.tensor([list(ids)], device=lm.device)  # [1, n]
    return predictions_from_logits(ids, full_pass(lm, x).logits[0], top)
