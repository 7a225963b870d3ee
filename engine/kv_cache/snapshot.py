"""The contents of the KV cache at the end of a run: the real key and value tensors of every layer.

The run is replayed exactly as the inference loop ran it (one prefill over the prompt, then one decode
step per generated token, feeding the tokens the run chose), so the cache holds what it held after the
last step: keys and values for the prompt and every generated token but the last (never fed back).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core.kv import cache_tensors, kv_bytes, kv_tokens, layer_bytes
from engine.core.loaded import LoadedModel
from engine.core.loop import decode_step, new_cache, prefill


@dataclass(frozen=True)
class CacheSnapshot:
    keys: np.ndarray  # [layers, kv_heads, tokens, head_dim] float32 (batch 1 dropped); RoPE already applied.
    #                   A sliding-window layer holds only its newest positions: the older ones are NaN (not held)
    values: np.ndarray  # [layers, kv_heads, tokens, head_dim] float32
    layer_shape: tuple[int, ...]  # one layer's key tensor as cached: [batch, kv_heads, tokens, head_dim]
    dtype: str  # dtype of the cached tensors
    measured_bytes: int  # kv_bytes of the real cache: every layer, keys and values
    tokens: int
    token_ids: tuple[int, ...]  # the tokens whose keys and values are cached, in position order
    layer_tokens: tuple[int, ...] = ()  # positions each layer really holds (the newest ones)
    layer_bytes: tuple[int, ...] = ()  # bytes each layer's keys and values hold, measured


@torch.inference_mode()
def replay_cache(lm: LoadedModel, prompt_ids: list[int], generated_ids: list[int]):
    """Prefill ``prompt_ids`` then decode ``generated_ids[:-1]`` one by one; returns the live cache."""
    dev = lm.device
    cache = new_cache(lm)
    prefill(lm, torch.tensor([list(prompt_ids)], device=dev), cache)
    for tok in list(generated_ids)[:-1]:
        decode_step(lm, torch.tensor([[int(tok)]], device=dev), cache)
    return cache


def cache_snapshot(lm: LoadedModel, prompt_ids, generated_ids) -> CacheSnapshot:
    cache = replay_cache(lm, list(prompt_ids), list(generated_ids))
    n = kv_tokens(cache)
    if len({int(k.shape[1]) for _, k, _ in cache_tensors(cache)}) > 1:
        raise ValueError("this model's layers cache different numbers of KV heads; the snapshot shows one shape")
    ks, vs, held, shape, dtype = [], [], [], (), ""
    for _, k, v in cache_tensors(cache):
        if not shape or k.shape[-2] == n:
            shape = tuple(k.shape)
        dtype = str(k.dtype).replace("torch.", "")
        t = int(k.shape[-2])  # a sliding-window layer holds the newest t <= n positions
        held.append(t)
        for out, x in ((ks, k), (vs, v)):  # values may have their own head dim (MLA): each padded to its own
            pad = np.full((x.shape[1], n - t, x.shape[-1]), np.nan, dtype=np.float32)
            out.append(np.concatenate([pad, x[0].float().cpu().numpy()], axis=1))  # [kv_heads, n, head_dim]
    ids = (tuple(int(i) for i in prompt_ids) + tuple(int(i) for i in generated_ids))[:n]
    return CacheSnapshot(keys=np.stack(ks), values=np.stack(vs), layer_shape=shape, dtype=dtype,
                         measured_bytes=kv_bytes(cache), tokens=n, token_ids=ids, layer_tokens=tuple(held),
                         layer_bytes=tuple(layer_bytes(cache)))
