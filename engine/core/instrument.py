"""Instruments installed on a model ONCE, when it is loaded, and switched on per job with ContextVars.

A request never changes the shared model (no attention-implementation swap, no hook added for one job, no
attribute set): the app's other sessions and the timings would see it. So at load time

- the attention implementation becomes ``ATTN_IMPL``: PyTorch SDPA (exactly transformers' own ``"sdpa"``
  attention) unless a job switched on ``attention_weights()`` (eager math that records each layer's weights
  [batch, heads, q, k]) or ``attention_timer()`` (SDPA with the time spent inside it added up);
- block 0 gets a pre-hook (its input: embeddings plus any learned positions or scaling) and every block a
  forward hook that append the residual stream to the list of an
  active ``residual_stream(model)`` and does nothing otherwise.

ContextVars are per thread, so a job on the engine worker switches them on for itself only.
"""
from __future__ import annotations

import contextvars
import weakref
from contextlib import contextmanager
from typing import Callable

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from engine.core import arch
from engine.measure.timing import now

ATTN_IMPL = "ile_sdpa"  # PyTorch SDPA, with switchable weight capture and timing
# transformers' own SDPA attention and mask, from its public registries (the functions a model set to "sdpa" runs)
_SDPA = ALL_ATTENTION_FUNCTIONS["sdpa"]
_SDPA_MASK = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]

_attn_mode: contextvars.ContextVar = contextvars.ContextVar("ile_attn_mode", default=None)
_resid: contextvars.ContextVar = contextvars.ContextVar("ile_resid", default=None)
_INSTALLED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # models instrumented at load


def _weights_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """Eager attention: softmax(q k^T * scale + mask) v, returning the weights. query [b, h, q, d], key/value
    [b, kv_h, k, d]."""
    groups = getattr(module, "num_key_value_groups", 1)
    k, v = _repeat_kv(key, groups), _repeat_kv(value, groups)  # [b, h, k, d]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, k.transpose(2, 3)) * scale  # [b, h, q, k]
    q_len, k_len = scores.shape[-2:]
    if attention_mask is None:  # SDPA's mask skipped for a plain causal pass: build the causal one
        causal = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)
        scores = scores.masked_fill(~causal, float("-inf"))
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask[..., :k_len], float("-inf"))
    else:
        scores = scores + attention_mask[..., :k_len]
    weights = torch.softmax(scores.float(), dim=-1).to(query.dtype)  # [b, h, q, k]
    out = torch.matmul(weights, v).transpose(1, 2).contiguous()  # [b, q, h, d]
    return out, weights


def _repeat_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    """[b, kv_h, k, d] -> [b, kv_h * groups, k, d]: each key/value head serves ``groups`` consecutive query heads
    (grouped-query attention, Ainslie et al. 2023)."""
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _attention(module, query, key, value, attention_mask, **kw):
    # A compiled graph (engine.core.compiled) never measures: its trace must not read the per-job switch.
    mode = None if torch.compiler.is_dynamo_compiling() else _attn_mode.get()
    if mode is None:
        return _SDPA(module, query, key, value, attention_mask, **kw)
    kind, store = mode
    if kind == "time":
        t0 = now(query.device)
        out = _SDPA(module, query, key, value, attention_mask, **kw)
        store[0] += now(query.device) - t0
        return out
    kw.pop("is_causal", None)
    out, weights = _weights_attention(module, query, key, value, attention_mask, **kw)
    found, limit = store
    found.append(weights if limit is None else weights[..., :limit, :limit])
    return out, weights


AttentionInterface.register(ATTN_IMPL, _attention)
AttentionMaskInterface.register(ATTN_IMPL, _SDPA_MASK)


def install(model: torch.nn.Module) -> None:
    """Called once by the loader, before the model is shared."""
    if model in _INSTALLED:
        return
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(ATTN_IMPL)
    arch.blocks(model)[0].register_forward_pre_hook(_resid_hook, with_kwargs=True)
    for blk in arch.blocks(model):
        blk.register_forward_hook(_resid_block_hook)
    _INSTALLED.add(model)


def _resid_hook(module, args, kwargs):
    active = None if torch.compiler.is_dynamo_compiling() else _resid.get()
    if active is not None:
        active[0].append(active[1](arch.block_input(args, kwargs)))


def _resid_block_hook(module, args, out):
    active = None if torch.compiler.is_dynamo_compiling() else _resid.get()
    if active is not None:
        active[0].append(active[1](arch.block_output(out)))


def installed(model: torch.nn.Module) -> bool:
    return model in _INSTALLED


def measured(model: torch.nn.Module) -> bool:
    """Can ``attention_weights`` / ``attention_timer`` see this model's attention (installed, SDPA-based)?"""
    return model.config._attn_implementation == ATTN_IMPL


@contextmanager
def attention_weights(limit: int | None = None):
    """While active (on this thread), every attention layer appends its weights [b, h, q, k] to the list, cut to
    the first ``limit`` query and key positions (causality makes those identical to a pass over fewer tokens)."""
    store: list[torch.Tensor] = []
    token = _attn_mode.set(("weights", (store, limit)))
    try:
        yield store
    finally:
        _attn_mode.reset(token)


@contextmanager
def attention_timer():
    """While active, seconds spent inside attention kernels are added to ``clock[0]``."""
    clock = [0.0]
    token = _attn_mode.set(("time", clock))
    try:
        yield clock
    finally:
        _attn_mode.reset(token)


@contextmanager
def _residuals_switched_on(select: Callable[[torch.Tensor], torch.Tensor]):
    """While active, every forward pass appends the embedding output, then each block's output (the residual
    stream after that block), passed through ``select``, to the yielded list (the hooks installed at load)."""
    captured: list[torch.Tensor] = []
    token = _resid.set((captured, select))
    try:
        yield captured
    finally:
        _resid.reset(token)


@contextmanager
def residual_stream(model, select: Callable[[torch.Tensor], torch.Tensor] = lambda t: t):
    """While active, every forward pass appends block 0's input (the embedding plus, where the model has
    them, learned positions, scaling or an embedding norm), then each block's output (the residual
    stream after that block), passed through ``select``, to the yielded list. A loaded model has these hooks
    from load time (install) and they are only switched on here; a bare model gets them for the
    duration of the block."""
    if installed(model):
        with _residuals_switched_on(select) as captured:
            yield captured
        return
    captured: list[torch.Tensor] = []
    first = arch.blocks(model)[0]
    hooks = [first.register_forward_pre_hook(lambda m, a, k: captured.append(select(arch.block_input(a, k))),
                                             with_kwargs=True)]
    for blk in arch.blocks(model):
        hooks.append(blk.register_forward_hook(lambda m, i, o: captured.append(select(arch.block_output(o)))))
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()
