"""Looking inside one transformer block: the real values at each sub-step for one position."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.core import arch, archfacts, instrument, loop
from engine.core.loaded import LoadedModel
from engine.jobs.prompt_passes import prompt_passes
from engine.jobs.kinds import JobKind


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
    return block_walks(lm, [ids], layer, position, n_preview)[0]


@torch.inference_mode()
def block_walks(lm: LoadedModel, prompts: list[list[int]], layer: int = 0, position: int = -1,
                n_preview: int = 6) -> list[list[BlockStage] | None]:
    """``block_walk`` for several prompts in one pass (a class whose pages all show block 0 at once).

    Rows are RIGHT-padded and both the pass and the replay are plainly causal (inside a layer's window, if it has
    one): a real position never sees the padding after it, so each row's real positions compute what its prompt
    alone computes; ``position`` counts within each row's own prompt, and each row is checked on its own."""
    model = lm.model
    blk = arch.blocks(model)[layer]
    rotary = getattr(arch.body(model), "rotary_emb", None)
    if rotary is None or not all(hasattr(blk, a) for a, _ in _PARTS):
        return [None] * len(prompts)
    lengths = [len(p) for p in prompts]
    n = max(lengths)
    pad = getattr(lm.tokenizer, "pad_token_id", None) or 0
    x_ids = torch.tensor([list(p) + [pad] * (n - len(p)) for p in prompts], device=lm.device)  # [B, n]
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
        return [None] * len(prompts)
    x, recorded = stream[layer], stream[layer + 1]  # [B, n, hidden]: the block's input and output
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
    tol = 1e-3 if x.dtype == torch.float32 else 3e-2  # half precisions round the same sums differently
    out: list[list[BlockStage] | None] = []
    for i, m in enumerate(lengths):
        real = recorded[i, :m].float()
        scale = float(real.abs().max()) or 1.0
        if not torch.allclose(seen["output"][i, :m].float(), real, atol=tol * scale, rtol=0):
            out.append(None)  # this block is not the pre-norm Llama block the walk assumes
            continue
        p = position if position >= 0 else m + position  # within this row's own prompt
        inp = seen["input"][i, p].float()
        added = inp + seen["self_attn"][i, p].float()
        order = [("input (residual stream)", inp), ("norm (RMSNorm)", seen["input_layernorm"][i, p]),
                 ("attention", seen["self_attn"][i, p]), ("add (residual)", added),
                 ("norm (RMSNorm)", seen["post_attention_layernorm"][i, p]), ("MLP", seen["mlp"][i, p]),
                 ("add (residual)", seen["output"][i, p])]
        out.append([BlockStage(name, (m, int(x.shape[-1])), float(t.float().norm()),
                               tuple(np.round(t[:n_preview].float().cpu().numpy(), 4).tolist())) for name, t in order])
    return out


@dataclass(frozen=True)
class BlockWalkRequest:
    """One prompt's walk through block ``layer``, for the engine worker (``BLOCK_WALK``)."""

    lm: LoadedModel = field(repr=False)
    ids: tuple[int, ...]
    layer: int = 0


def walk_alone(r: BlockWalkRequest):
    return block_walk(r.lm, list(r.ids), r.layer)


# Walks of the same model and block that wait together run in one pass (a class opening the home page together
# asks for block 0 once per tab); a walk of another block waits for its own pass.
BLOCK_WALK = JobKind("block_walk", alone=walk_alone,
                     together=prompt_passes("block walk", lambda r, prompts: block_walks(r.lm, prompts, r.layer)),
                     group=lambda r: ("block_walk", r.lm.ref, id(r.lm), int(r.layer)))
