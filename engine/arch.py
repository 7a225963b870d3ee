"""Where the parts of a causal LM live, for the architectures the app knows (Llama-like, GPT-2, GPT-NeoX)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch


def body(model) -> torch.nn.Module:
    for attr in ("model", "transformer", "gpt_neox"):
        if hasattr(model, attr):
            return getattr(model, attr)
    raise ValueError(f"unknown architecture {type(model).__name__}")


def blocks(model) -> torch.nn.ModuleList:
    b = body(model)
    for attr in ("layers", "h"):
        if hasattr(b, attr):
            return getattr(b, attr)
    raise ValueError(f"no transformer blocks found in {type(model).__name__}")


def final_norm(model) -> torch.nn.Module:
    b = body(model)
    for attr in ("norm", "ln_f", "final_layer_norm"):
        if hasattr(b, attr):
            return getattr(b, attr)
    raise ValueError(f"no final norm found in {type(model).__name__}")


def unembed(model, hidden: torch.Tensor) -> torch.Tensor:
    """Residual-stream vectors -> vocabulary logits: final norm, then the output head."""
    return model.get_output_embeddings()(final_norm(model)(hidden))


def block_output(out) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


@contextmanager
def residual_stream(model, select: Callable[[torch.Tensor], torch.Tensor] = lambda t: t):
    """While active, every forward pass appends the embedding output, then each block's output (the residual
    stream after that block), passed through ``select``, to the yielded list. A loaded model has these hooks
    from load time (engine.instrument) and they are only switched on here; a bare model gets them for the
    duration of the block."""
    from engine import instrument

    if instrument.installed(model):
        with instrument.residual_stream(select) as captured:
            yield captured
        return
    captured: list[torch.Tensor] = []
    hooks = [model.get_input_embeddings().register_forward_hook(lambda m, i, o: captured.append(select(o)))]
    for blk in blocks(model):
        hooks.append(blk.register_forward_hook(lambda m, i, o: captured.append(select(block_output(o)))))
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()
