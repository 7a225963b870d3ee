"""A padded batch of sequences on one KV cache, through the one door (engine.core.loop): left padding, an attention
mask and per-row positions, so every row computes what it would alone; rows join (their caches merged) and leave
between steps. Keys are stored after RoPE, so left-padding a cache never changes a stored key.

The Batching lesson's scheduler (engine/batching/experiment.py) and the class batcher (engine/jobs/classbatch.py)
both run their batches on these: one implementation for the lesson and the class.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from engine.core.loaded import LoadedModel
from engine.core.loop import forward, new_cache


class Batch:
    """The running batch: one KV cache with a row per request, left-padded to a common length."""

    def __init__(self, lm: LoadedModel):
        self.lm = lm
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [B, L] 1 = real cached position, 0 = padding
        self.rows: list = []  # one per row, the caller's own record (the lesson's slot, the class batcher's request)

    def kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers]  # each [B, kv_heads, L, head_dim]

    def set_kv(self, kv, mask: torch.Tensor) -> None:
        self.cache = DynamicCache(ddp_cache_data=kv, config=self.lm.model.config) if kv else None
        self.mask = mask

    def merge(self, kv_new, mask_new: torch.Tensor, rows: list) -> None:
        """Append rows: left-pad the shorter side with zeros (masked out) to a common length."""
        if self.cache is None:
            self.set_kv(kv_new, mask_new)
        else:
            length = max(self.mask.shape[1], mask_new.shape[1])
            kv = [(torch.cat([lpad(k, length), lpad(k2, length)]), torch.cat([lpad(v, length), lpad(v2, length)]))
                  for (k, v), (k2, v2) in zip(self.kv(), kv_new)]
            self.set_kv(kv, torch.cat([lpad(self.mask, length), lpad(mask_new, length)]))
        self.rows += rows

    def keep(self, rows: list[int]) -> None:
        """Drop the other rows, then the leading columns that are padding in every remaining row."""
        if not rows:
            self.cache, self.mask, self.rows = None, None, []
            return
        idx = torch.tensor(rows, device=self.mask.device)
        mask = self.mask[idx]
        start = int(mask.any(0).nonzero()[0])
        self.set_kv([(k[idx, :, start:], v[idx, :, start:]) for k, v in self.kv()], mask[:, start:])
        self.rows = [self.rows[i] for i in rows]

    def leave(self, gone) -> list:
        """The rows for which ``gone(row)`` is true leave the batch (``keep`` the others); returns them."""
        leaving = [bool(gone(s)) for s in self.rows]  # asked once per row: a job can stop meanwhile
        if any(leaving):
            out = [s for s, x in zip(self.rows, leaving) if x]
            self.keep([i for i, x in enumerate(leaving) if not x])
            return out
        return []

    def kv_real_tokens(self) -> int:
        return int(self.mask.sum()) if self.mask is not None else 0


def lpad(t: torch.Tensor, length: int) -> torch.Tensor:
    """Left-pad dim -2 of a cache tensor [B, H, L, D] (or dim -1 of a mask [B, L]) with zeros to ``length``."""
    dim = -1 if t.dim() == 2 else -2
    missing = length - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def left_padded(lm: LoadedModel, prompts: list[tuple[int, ...]]):
    """Several prompts left-padded to the longest, on the model's device: ids [g, P], mask [g, P] (1 = a real
    token) and positions [g, P]."""
    dev = lm.device
    length = max(len(p) for p in prompts)
    pad = lm.tokenizer.pad_token_id or 0
    ids = torch.tensor([[pad] * (length - len(p)) + list(p) for p in prompts], device=dev)  # [g, P]
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], device=dev)  # [g, P]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [g, P] each row counts from 0 at its first real token
    return ids, mask, pos


@torch.inference_mode()
def prefill_slice(lm: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache,
                  start: int, end: int) -> torch.Tensor:
    """Positions [start, end) of left-padded prompts (``left_padded``) on top of ``cache``, which holds their
    positions [0, start) and is extended: one slice of a chunked prefill (the whole prompt when start = 0 and
    end = P). Returns the logits after position end - 1 [g, vocab] on the model's device."""
    return forward(lm, ids[:, start:end], cache, attention_mask=mask[:, :end],
                   position_ids=pos[:, start:end])[:, -1]  # [g, vocab]


def prefill_logits(lm: LoadedModel, prompts: list[tuple[int, ...]]):
    """One pass over several prompts, left-padded to the longest. Returns (per-layer (keys, values),
    mask [g, P], next-token logits [g, vocab] on the model's device, padded positions). The experiments here
    take the argmax; the class batcher (engine/jobs/classbatch.py) prefills in slices with ``prefill_slice``."""
    ids, mask, pos = left_padded(lm, prompts)
    cache = new_cache(lm)
    logits = prefill_slice(lm, ids, mask, pos, cache, 0, ids.shape[1])  # [g, vocab]
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    return kv, mask, logits, int((mask == 0).sum())


@torch.inference_mode()
def decode_logits(lm: LoadedModel, batch: Batch, tokens: list[int]) -> torch.Tensor:
    """One decode step for every row: the new token sits at position = that row's real cached tokens.
    Returns the logits [B, vocab] on the model's device."""
    dev = lm.device
    x = torch.tensor(tokens, device=dev)[:, None]  # [B, 1]
    pos = batch.mask.sum(-1, keepdim=True)  # [B, 1]
    mask = torch.cat([batch.mask, batch.mask.new_ones(len(tokens), 1)], dim=-1)  # [B, L + 1]
    logits = forward(lm, x, batch.cache, attention_mask=mask, position_ids=pos)[:, -1]  # [B, vocab]
    batch.mask = mask
    return logits
