"""KV-cache accounting: bytes measured from the real cache tensors, and the formula they must equal.

A static cache (compiled mode, engine.core.compiled) allocates its whole length before the first token: its
tensors are read up to the positions filled so far (what the formula counts); ``reserved_bytes`` is the allocation.
"""
from __future__ import annotations


def _static(layer) -> bool:
    return bool(getattr(layer, "is_compileable", False)) and getattr(layer, "max_cache_len", None) is not None


def cache_tensors(cache, reserved: bool = False):
    """Yield (layer, keys, values) from a transformers Cache or a legacy tuple of (k, v) pairs; a static layer's
    tensors cut to the positions filled (all of them with ``reserved``)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for i, layer in enumerate(layers):
            k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
            if k is not None and v is not None and _static(layer) and not reserved:
                n = min(int(layer.get_seq_length()), k.shape[-2])
                k, v = k[..., :n, :], v[..., :n, :]  # [batch, kv_heads, filled, head_dim]
            if k is not None and v is not None and k.numel():
                yield i, k, v
        return
    for i, (k, v) in enumerate(cache or ()):
        yield i, k, v


def kv_bytes(cache) -> int:
    """Bytes held by the cache's key and value tensors, measured from the tensors themselves."""
    return sum(t.numel() * t.element_size() for _, k, v in cache_tensors(cache) for t in (k, v))


def reserved_bytes(cache) -> int:
    """Bytes the cache's key and value tensors occupy: for a static cache its whole length, filled or not."""
    return sum(t.numel() * t.element_size() for _, k, v in cache_tensors(cache, reserved=True) for t in (k, v))


def kv_tokens(cache) -> int:
    """Tokens fed through the cache so far (a sliding-window layer holds fewer: see layer_bytes)."""
    seq = getattr(cache, "get_seq_length", None)
    if seq is not None and getattr(cache, "layers", None) is not None:
        return int(seq())
    for _, k, _ in cache_tensors(cache):
        return int(k.shape[-2])  # [batch, kv_heads, tokens, head_dim]
    return 0


def layer_bytes(cache) -> list[int]:
    """Bytes of keys and values held by each cache layer, measured from its tensors (sliding-window layers
    stop growing at their window)."""
    out: dict[int, int] = {}
    for i, k, v in cache_tensors(cache):
        out[i] = k.numel() * k.element_size() + v.numel() * v.element_size()
    n = len(getattr(cache, "layers", None) or out)
    return [out.get(i, 0) for i in range(max(n, len(out)))]


def layer_bytes_formula(info, tokens: int, batch: int = 1) -> list[int]:
    """Per layer: 2 (K and V) x its KV heads x head_dim x the tokens it holds x bytes per value (x batch). A
    global layer holds every token; a sliding-window layer of window W at most W - 1 (the newest token's key
    is added during the pass). Where values have their own head dim (DeepSeek's MLA as transformers caches it),
    K and V are counted apart: KV heads x (key dim + value dim) x tokens x bytes."""
    f = getattr(info, "arch", None)
    if f is None:
        return [kv_bytes_formula(1, info.n_kv_heads, info.head_dim, tokens, info.bytes_per_value, batch)] * info.n_layers
    return [f.kv_heads[i] * (f.head_dim + f.value_dim) * f.held_tokens(i, tokens) * info.bytes_per_value * batch
            for i in range(f.n_blocks)]


def kv_bytes_formula(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, bytes_per_value: int,
                     batch: int = 1) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x tokens x bytes per value (x batch)."""
    return 2 * n_layers * n_kv_heads * head_dim * tokens * bytes_per_value * batch


def kv_bytes_for(info, tokens: int, batch: int = 1) -> int:
    """The formula summed over layers, per layer type (see layer_bytes_formula)."""
    if getattr(info, "arch", None) is None:
        return kv_bytes_formula(info.n_layers, info.n_kv_heads, info.head_dim, tokens, info.bytes_per_value, batch)
    return sum(layer_bytes_formula(info, tokens, batch))


def growth_at(info, tokens: int) -> int:
    """The formula's bytes for the token after ``tokens``: what one decode step adds to the cache there (less once
    a sliding layer's window is full: that layer drops a token for each one it takes)."""
    return kv_bytes_for(info, tokens + 1) - kv_bytes_for(info, tokens)


def growth_past_windows(info) -> int:
    """``growth_at`` once every sliding window is full: only the layers that keep every token still grow."""
    f = getattr(info, "arch", None)
    far = max([w for w in (f.windows if f is not None else ()) if w] + [1])
    return growth_at(info, far + 1)
