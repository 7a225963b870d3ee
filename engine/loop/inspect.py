"""Looking inside one transformer block: the real values at each sub-step for one position."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core import arch, archfacts, instrument, loop
from engine.core.models import LoadedModel


@dataclass(frozen=True)
class BlockStage:
    name: str  # e.g. "input (residual stream)", "norm", "attention", "add", "norm", "MLP", "add"
    shape: tuple[int, ...]  # of the whole tensor at this stage: [tokens, hidden]
    norm: float  # L2 norm of this position's vector
    preview: tuple[float, ...]  # first values of this position's vector


_PARTS = (("input_layernorm", "norm (RMSNorm)"), ("self_attn", "attention"),
          ("post_attention_layernorm", "norm (RMSNorm)"), ("mlp", "MLP"))


class _Reached(Exception):
    """The pass reached the block the walk shows (raised by a hook to end the pass there)."""


def _stop_here(_module, _inputs, _output):
    raise _Reached


@torch.inference_mode()
def block_walk(lm: LoadedModel, ids: list[int], layer: int = 0, position: int = -1, n_preview: int = 6):
    """Values inside block ``layer`` at ``position``: input, norm, attention, add, norm, MLP, add.

    One pass records the residual stream (the switch installed at load) and stops once block ``layer`` has run (a
    hook on that block for this pass: the blocks after it would change nothing shown, and block 0 of 30 costs a
    thirtieth of the pass); then the block's own modules are applied to its input in the order a Llama-style block
    runs them. The result must land on the block output the pass recorded, or the walk is refused (None): it only
    shows what the model really computes. Returns None for architectures without these parts.
    """
    model = lm.model
    blk = arch.blocks(model)[layer]
    rotary = getattr(arch.body(model), "rotary_emb", None)
    if rotary is None or not all(hasattr(blk, a) for a, _ in _PARTS):
        return None
    x_ids = torch.tensor([ids], device=lm.device)  # [1, n]
    stop = blk.register_forward_hook(_stop_here)  # after the stream's own hook on this block (registered at load)
    try:
        with instrument.residual_stream(model) as stream:
            try:
                loop.full_pass(model, x_ids)
            except _Reached:
                pass
    finally:
        stop.remove()
    if len(stream) < layer + 2:
        return None
    x, recorded = stream[layer], stream[layer + 1]  # [1, n, hidden]: the block's input and output
    n = x.shape[1]
    window = lm.info.arch.windows[layer] if lm.info.arch is not None else None
    allowed = archfacts.window_mask(n, window).to(x.device)  # causal, and inside the layer's window if it has one
    causal = torch.zeros(n, n, device=x.device, dtype=x.dtype).masked_fill(~allowed, float("-inf"))[None, None]
    lt = archfacts.rope_layer_types(model)[layer]
    pos = torch.arange(n, device=x.device)[None]
    cos_sin = rotary(x, pos, layer_type=lt) if lt else rotary(x, pos)
    seen = {"input": x, "input_layernorm": blk.input_layernorm(x)}
    seen["self_attn"] = arch.block_output(blk.self_attn(hidden_states=seen["input_layernorm"],
                                                        position_embeddings=cos_sin, attention_mask=causal))
    after_attn = x + seen["self_attn"]
    seen["post_attention_layernorm"] = blk.post_attention_layernorm(after_attn)
    seen["mlp"] = arch.block_output(blk.mlp(seen["post_attention_layernorm"]))  # an MoE MLP also returns its router
    seen["output"] = after_attn + seen["mlp"]
    scale = float(recorded.float().abs().max()) or 1.0
    tol = 1e-3 if x.dtype == torch.float32 else 3e-2  # half precisions round the same sums differently
    if not torch.allclose(seen["output"].float(), recorded.float(), atol=tol * scale, rtol=0):
        return None  # this block is not the pre-norm Llama block the walk assumes
    x = seen["input"][0].float()  # [tokens, hidden]
    after_attn = x + seen["self_attn"][0].float()
    order = [("input (residual stream)", x), ("norm (RMSNorm)", seen["input_layernorm"][0]),
             ("attention", seen["self_attn"][0]), ("add (residual)", after_attn),
             ("norm (RMSNorm)", seen["post_attention_layernorm"][0]), ("MLP", seen["mlp"][0]),
             ("add (residual)", seen["output"][0])]
    return [BlockStage(name, tuple(t.shape), float(t[position].float().norm()),
                       tuple(np.round(t[position, :n_preview].float().cpu().numpy(), 4).tolist())) for name, t in order]
