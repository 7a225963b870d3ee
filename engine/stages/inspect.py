"""Looking inside one transformer block: the real values at each sub-step for one position."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine import arch
from engine.models import LoadedModel


@dataclass(frozen=True)
class BlockStage:
    name: str  # e.g. "input (residual stream)", "norm", "attention", "add", "norm", "MLP", "add"
    shape: tuple[int, ...]  # of the whole tensor at this stage: [tokens, hidden]
    norm: float  # L2 norm of this position's vector
    preview: tuple[float, ...]  # first values of this position's vector


class _Stop(Exception):
    """Raised by a hook to end a forward pass early: nothing after the inspected block is needed."""


_PARTS = (("input_layernorm", "norm (RMSNorm)"), ("self_attn", "attention"),
          ("post_attention_layernorm", "norm (RMSNorm)"), ("mlp", "MLP"))


@torch.inference_mode()
def block_walk(lm: LoadedModel, ids: list[int], layer: int = 0, position: int = -1, n_preview: int = 6):
    """Values inside block ``layer`` at ``position``: input, norm, attention, add, norm, MLP, add.

    Works for Llama-style blocks (pre-norm, two residual adds); returns None for other architectures.
    """
    blk = arch.blocks(lm.model)[layer]
    if not all(hasattr(blk, a) for a, _ in _PARTS):
        return None
    seen: dict[str, torch.Tensor] = {}

    def stop(m, i, o):
        seen["output"] = arch.block_output(o)
        raise _Stop

    # Hooks go on the shared model only for this job: every pass runs on the one engine worker, so no other
    # session's pass can see them; they are removed before the job ends.
    hooks = [blk.register_forward_pre_hook(
        lambda m, a, kw: seen.__setitem__("input", (a[0] if a else kw["hidden_states"])), with_kwargs=True)]
    for attr, _ in _PARTS:
        hooks.append(getattr(blk, attr).register_forward_hook(
            lambda m, i, o, attr=attr: seen.__setitem__(attr, arch.block_output(o))))
    hooks.append(blk.register_forward_hook(stop))
    try:
        lm.model(input_ids=torch.tensor([ids], device=lm.device), use_cache=False)
    except _Stop:
        pass
    finally:
        for h in hooks:
            h.remove()
    x = seen["input"][0].float()  # [tokens, hidden]
    after_attn = x + seen["self_attn"][0].float()
    order = [("input (residual stream)", x), ("norm (RMSNorm)", seen["input_layernorm"][0]),
             ("attention", seen["self_attn"][0]), ("add (residual)", after_attn),
             ("norm (RMSNorm)", seen["post_attention_layernorm"][0]), ("MLP", seen["mlp"][0]),
             ("add (residual)", seen["output"][0])]
    return [BlockStage(name, tuple(t.shape), float(t[position].float().norm()),
                       tuple(np.round(t[position, :n_preview].float().cpu().numpy(), 4).tolist())) for name, t in order]
