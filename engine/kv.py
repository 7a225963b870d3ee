"""KV-cache accounting: bytes measured from the real cache tensors, and the formula they must equal."""
from __future__ import annotations


def cache_tensors(cache):
    """Yield (layer, keys, values) from a transformers Cache or a legacy tuple of (k, v) pairs."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for i, layer in enumerate(layers):
            k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
            if k is not None and v is not None and k.numel():
                yield i, k, v
        return
    for i, (k, v) in enumerate(cache or ()):
        yield i, k, v


def kv_bytes(cache) -> int:
    """Bytes held by the cache's key and value tensors, measured from the tensors themselves."""
    return sum(t.numel() * t.element_size() for _, k, v in cache_tensors(cache) for t in (k, v))


def kv_tokens(cache) -> int:
    for _, k, _ in cache_tensors(cache):
        return int(k.shape[-2])  # [batch, kv_heads, tokens, head_dim]
    return 0


def kv_bytes_formula(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, bytes_per_value: int,
                     batch: int = 1) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x tokens x bytes per value (x batch)."""
    return 2 * n_layers * n_kv_heads * head_dim * tokens * bytes_per_value * batch


def kv_bytes_for(info, tokens: int, batch: int = 1) -> int:
    return kv_bytes_formula(info.n_layers, info.n_kv_heads, info.head_dim, tokens, info.bytes_per_value, batch)
