"""Activation smoothing before int8 quantization (SmoothQuant: Xiao et al. 2022, arXiv:2211.10438).

int8 dynamic quantization gives each token's activation vector one scale, so a few channels with huge values
(outliers) leave the small ones only a handful of levels. SmoothQuant moves part of that range into the weights:
for a linear layer y = W x, pick a scale s_j per input channel and use W' = W diag(s), x' = x / s. The product
is unchanged, and x' is easier to quantize. ``s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha)`` with the maximum
of |x_j| taken over a short calibration text.

Here the division x / s costs nothing at run time: it is folded into the weight of the RMSNorm right before the
layers (RMSNorm ends with ``* weight``, so dividing that weight by s divides its output by s exactly). So only
layers fed straight by a norm are smoothed: q/k/v (after ``input_layernorm``) and gate/up (after
``post_attention_layernorm``). The smoothing itself is exact in floating point (a test checks the logits); only
the quantization that follows changes them.

On SmolLM2-135M alpha = 0.5 agreed with float32 best of the alphas tried, at an unchanged decode time; smoothing
``down_proj``'s input too (folded into ``up_proj``) did not rescue it, so it stays float32 (figures in
docs/benchmarks.md).

torchao ships SmoothQuant as a prototype that swaps in its own linear layers, whose int8 kernels are slow on a CPU
(engine/models/precision.py); folding the scales into the existing weights keeps torch.ao's fast kernels and adds no
layer.
"""
from __future__ import annotations

import torch

from engine.core import loop

ALPHA = 0.5
# Architectures whose decoder layers are: input_layernorm (RMSNorm, output * weight) -> q/k/v_proj, and
# post_attention_layernorm -> gate/up_proj. Others (Gemma's norms multiply by 1 + weight) are left unsmoothed.
SUPPORTED_TYPES = ("llama", "mistral", "qwen2")
# Calibration: a little prose, code, numbers and the chat format; not the text the agreement is measured on.
CALIBRATION_TEXT = (
    "Photosynthesis lets plants turn light into chemical energy. Chlorophyll in the leaves absorbs red and blue "
    "light, splits water, releases oxygen and stores energy in sugar built from carbon dioxide. "
    "def add(a, b):\n    return a + b\nprint(add(2, 3))\n1, 2, 3, 5, 8, 13, 21. Paris is the capital of France. "
    "<|im_start|>user\nWhat is a prime number?<|im_end|>\n<|im_start|>assistant\nA prime number has exactly two "
    "divisors."
)


def _groups(model) -> list[tuple[torch.nn.Module, list[torch.nn.Linear]]] | None:
    """(norm, linear layers it feeds) per decoder layer, or None if the model is not a supported layout."""
    if getattr(model.config, "model_type", None) not in SUPPORTED_TYPES:
        return None
    try:
        layers = model.model.layers
        out = []
        for layer in layers:
            att, mlp = layer.self_attn, layer.mlp
            out.append((layer.input_layernorm, [att.q_proj, att.k_proj, att.v_proj]))
            out.append((layer.post_attention_layernorm, [mlp.gate_proj, mlp.up_proj]))
    except AttributeError:
        return None
    ok = all(isinstance(getattr(n, "weight", None), torch.Tensor) and all(isinstance(m, torch.nn.Linear) for m in ls)
             for n, ls in out)
    return out if ok else None


@torch.inference_mode()
def _input_max(model, groups, ids: list[int]) -> list[torch.Tensor]:
    """max |input| per channel of each group's first linear layer over one pass of ``ids``: [in_features] each."""
    seen: list[torch.Tensor | None] = [None] * len(groups)
    hooks = []
    for i, (_, lins) in enumerate(groups):
        def hook(_mod, args, i=i):
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0).float()  # [in_features]
            seen[i] = x if seen[i] is None else torch.maximum(seen[i], x)
        hooks.append(lins[0].register_forward_pre_hook(hook))
    try:
        dev = next(model.parameters()).device
        loop.full_pass(model, torch.tensor([ids], device=dev), logits_to_keep=1)
    finally:
        for h in hooks:
            h.remove()
    return seen  # type: ignore[return-value]


@torch.no_grad()
def smooth(model, ids: list[int], alpha: float = ALPHA) -> bool:
    """Fold SmoothQuant scales into ``model`` in place (a copy the caller owns). Returns False, changing nothing,
    for an unsupported layout. ``ids``: the calibration tokens."""
    groups = _groups(model)
    if groups is None or not ids:
        return False
    amax = _input_max(model, groups, ids)
    for (norm, lins), a in zip(groups, amax):
        w = torch.stack([m.weight.abs().amax(0).float() for m in lins]).amax(0)  # [in_features]
        s = (a.clamp(min=1e-5) ** alpha / w.clamp(min=1e-5) ** (1 - alpha)).clamp(min=1e-5)  # [in_features]
        norm.weight.div_(s.to(norm.weight.dtype))
        for m in lins:
            m.weight.mul_(s.to(m.weight.dtype)[None, :])
    return True


def calibration_ids(tokenizer) -> list[int]:
    return list(tokenizer(CALIBRATION_TEXT, add_special_tokens=False).input_ids)
