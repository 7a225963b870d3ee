"""The contents of the KV cache at the end of a run: the real key and value tensors of every layer.

The run is replayed exactly as the inference loop ran it (one prefill over the prompt, then one decode
step per generated token, feeding the tokens the run chose), so the cache holds what it held after the
last step: keys and values for the prompt and every generated token but the last (never fed back).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.kv import cache_tensors, kv_bytes, kv_tokens
from engine.models import LoadedModel
from engine.loop import decode_step, new_cache, prefill


@dataclass(frozen=True)
class CacheSnapshot:
    keys: np.ndarray  # [layers, kv_heads, tokens, head_dim] float32 (batch 1 dropped); RoPE already applied
    values: np.ndarray  # [layers, kv_heads, tokens, head_dim] float32
    layer_shape: tuple[int, ...]  # one layer's key tensor as cached: [batch, kv_heads, tokens, head_dim]
    dtype: str  # dtype of the cached tensors
    measured_bytes: int  # kv_bytes of the real cache: every layer, keys and values
    tokens: int
    token_ids: tuple[int, ...]  # the tokens whose keys and values are cached, in position order


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
    ks, vs, shape, dtype = [], [], (), ""
    for _, k, v in cache_tensors(cache):
        shape, dtype = tuple(k.shape), str(k.dtype).replace("torch.", "")
        ks.append(k[0].float().cpu().numpy())  # [kv_heads, tokens, head_dim]
        vs.append(v[0].float().cpu().numpy())
    ids = (tuple(int(i) for i in prompt_ids) + tuple(int(i) for i in generated_ids))[: kv_tokens(cache)]
    return CacheSnapshot(keys=np.stack(ks), values=np.stack(vs), layer_shape=shape, dtype=dtype,
                         measured_bytes=kv_bytes(cache), tokens=kv_tokens(cache), token_ids=ids)
