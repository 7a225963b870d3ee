"""The inference loop's stages in loop order: a new KV cache, prefill over the prompt, one decode step per new
token, and the end-of-sequence ids that stop it. Every other module runs the model through these functions.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from engine.models import LoadedModel


def eos_ids(lm: LoadedModel) -> set[int]:
    ids: set[int] = set()
    gen = getattr(lm.model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), lm.tokenizer.eos_token_id):
        if isinstance(src, int):
            ids.add(src)
        elif src:
            ids.update(int(i) for i in src)
    return ids


def new_cache(lm: LoadedModel) -> DynamicCache:
    return DynamicCache(config=lm.model.config)


@torch.inference_mode()
def prefill(lm: LoadedModel, ids: torch.Tensor, cache) -> torch.Tensor:
    """One forward pass over the whole prompt; fills the cache. ids: [batch, n] -> logits [batch, vocab]."""
    return lm.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]


@torch.inference_mode()
def decode_step(lm: LoadedModel, token: torch.Tensor, cache) -> torch.Tensor:
    """One forward pass for one new token per sequence, reading past keys/values from the cache.
    token: [batch, 1] -> logits [batch, vocab]."""
    return lm.model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]


def warm_up(lm: LoadedModel) -> None:
    """One small pass so the first timed step does not pay for one-off allocations."""
    if getattr(lm, "_warm", False):
        return
    with lm.lock:
        ids = torch.tensor([[lm.tokenizer.eos_token_id or 0] * 4], device=lm.device)
        cache = new_cache(lm)
        prefill(lm, ids, cache)
        decode_step(lm, ids[:, :1], cache)
        lm._warm = True
