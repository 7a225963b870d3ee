"""Static KV caches as the compiled mode uses them: made allocated, and rolled back by moving their length.

A compiled graph guards on its inputs' tensors (their kind, shapes, whether they exist), so every static cache a
graph runs on is made the same way (``static_cache``); a speculative rejection or a prefill bucket's padding is undone
by moving the cache's length (``rewind``), never by copying it."""
from __future__ import annotations

import torch


def static_cache(model, rows: int, length: int):
    """A static cache of ``rows`` x ``length`` positions, allocated now (transformers allocates on the first pass: a pass
    on a cache whose keys were still None compiled its graph again, on the worker, 30 s for a SmolLM2 prefill bucket),
    as inference tensors (dynamo guards on a tensor's kind too)."""
    from transformers import StaticCache

    with torch.inference_mode():
        cache = StaticCache(config=model.config, max_cache_len=int(length))
        cfg = model.config.get_text_config(decoder=True)
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        p = next(model.parameters())
        shape = (int(rows), int(heads), 1, int(head_dim))  # lazy_initialization reads only shapes and kind
        for layer in cache.layers:
            layer.lazy_initialization(p.new_empty(shape), p.new_empty(shape))
    return cache


def rewind(cache, n: int) -> None:
    """Roll a static cache back to its first ``n`` tokens (speculative rejections): only its length moves. The next
    pass writes over the rejected positions, and until then the causal mask (built from the cache's length) hides
    them."""
    with torch.inference_mode():
        for layer in cache.layers:
            layer.cumulative_length.fill_(int(n))


def is_static(cache) -> bool:
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(getattr(layer, "is_compileable", False) for layer in layers)
