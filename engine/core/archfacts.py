"""Architecture facts, read from the loaded model and its config (never assumed), and checked where a page's
number depends on them.

``read_facts`` is called once at load (engine.models.loading) and the record lives in ``ModelInfo.arch``. Every page
and the CLI's ``info`` read it. Where a page's path cannot be right for an architecture, ``refusals`` holds a
one-line reason under the feature's name, and the page shows that line instead of a wrong number.

Measured, not read from the config:
- KV heads, head dim and each layer's cache class: from a real cache after a 1-token pass (Falcon's multi-query layers hold 1 KV head whatever its config names;
  a sliding-window layer of window W holds at most W - 1 past tokens in transformers' DynamicSlidingWindowLayer);
- the analysis pass (attention weights, logit lens, residual stream): run once at load on a short sequence and
  compared with a plain forward pass; attention rows must sum to 1 and be zero above the diagonal and outside
  each layer's window, or the analysis is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.core import arch, instrument, loop

GLOBAL, SLIDING, CHUNKED = "global", "sliding", "chunked"
CHECK_TOL = 1e-4  # relative to the logits' scale; float32 passes agree to ~1e-6


@dataclass(frozen=True)
class ArchFacts:
    family: str  # config.model_type
    blocks_path: str  # where the blocks live, e.g. "model.layers", "model.decoder.layers"
    n_blocks: int
    layer_kinds: tuple[str, ...]  # per layer: "global" | "sliding" | "chunked" | another cache kind
    windows: tuple[int | None, ...]  # per layer: the window (tokens a query sees, itself included) or None
    n_heads: int
    kv_heads: tuple[int, ...]  # per layer, measured from the cache
    head_dim: int  # measured from the cache
    attention: str  # "MHA" | "GQA" | "MQA" (from the measured KV heads) | "MLA" (a cached latent)
    position: str  # "rope" | "learned" | "alibi" | "none"
    rope_bases: tuple[float | None, ...]  # per layer (RoPE only)
    rotary_fraction: float | None  # share of each head's dimensions that rotate (RoPE only)
    qk_norm: bool  # queries and keys are normalised before the dot product
    norm: str  # e.g. "RMSNorm, pre-norm"
    parallel_residual: bool  # attention and MLP read the same input and are added together
    tied_embeddings: bool
    embedding_scale: float | None  # the embedding is multiplied by this (Gemma: sqrt(hidden))
    logit_softcap: float | None  # final logits = cap * tanh(logits / cap)
    attn_softcap: float | None
    cache_layers: tuple[str, ...]  # the cache layer class per layer ("DynamicLayer", "DynamicSlidingWindowLayer")
    refusals: dict = field(default_factory=dict)  # feature -> one-line reason it is not shown
    v_head_dim: int | None = None  # measured from the cache where its values are narrower or wider than its keys
    # (DeepSeek's MLA as transformers caches it: "keys" are the latent, "values" the shared RoPE key); None: same

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def sliding_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k != GLOBAL)

    @property
    def has_windows(self) -> bool:
        return any(w is not None for w in self.windows)

    def refused(self, feature: str) -> str | None:
        return self.refusals.get(feature)

    def held_tokens(self, layer: int, tokens: int) -> int:
        """Tokens cache layer ``layer`` holds after ``tokens`` have been fed (what the formula counts)."""
        w = self.windows[layer]
        if self.cache_layers[layer] == "DynamicSlidingWindowLayer" and w:
            return min(int(tokens), int(w) - 1)
        return int(tokens)

    def describe(self) -> str:
        kinds = ", ".join(f"layer {i}: {k}" + (f" (window {w})" if w else "")
                          for i, (k, w) in enumerate(zip(self.layer_kinds, self.windows)))
        pos = self.position
        if pos == "rope":
            bases = sorted({b for b in self.rope_bases if b})
            pos = (f"RoPE ({'base ' + ', '.join(f'{b:g}' for b in bases) if bases else 'inside each attention layer'}"
                   + (f", {self.rotary_fraction:.0%} of each head's dimensions" if self.rotary_fraction not in
                      (None, 1.0) else "") + ")")
            if bases and any(b is None for b in self.rope_bases):
                pos += "; no position encoding (NoPE) in layers " + ", ".join(
                    str(i) for i, b in enumerate(self.rope_bases) if b is None)
        kv = sorted(set(self.kv_heads))
        heads = (f"{self.n_heads} query heads; cached per token: a latent of {self.head_dim} and a RoPE key of "
                 f"{self.value_dim}" if self.attention == "MLA" else
                 f"{self.n_heads} query heads, {'/'.join(map(str, kv))} KV head{'s' if max(kv) > 1 else ''}, "
                 f"head dim {self.head_dim}"
                 + (f", value head dim {self.v_head_dim}" if self.v_head_dim not in (None, self.head_dim) else ""))
        return (f"{self.family}: {self.n_blocks} blocks at {self.blocks_path}; {self.attention} attention "
                f"({heads}); "
                f"{kinds}; positions: {pos}; {self.norm}"
                + ("; QK-norm" if self.qk_norm else "") + ("; parallel residual" if self.parallel_residual else "")
                + ("; tied embeddings" if self.tied_embeddings else "")
                + (f"; embeddings scaled by {self.embedding_scale:.3g}" if self.embedding_scale else "")
                + (f"; final logits soft-capped at {self.logit_softcap:g}" if self.logit_softcap else ""))


# ------------------------------------------------------------------------------------------ reading

def _cfg_get(cfg, *keys, default=None):
    for k in keys:
        v = getattr(cfg, k, None)
        if v is not None:
            return v
    return default


def _layer_types(model) -> tuple[list[str], list[int | None]]:
    from transformers.cache_utils import get_layer_types_and_kwargs

    cfg = arch.text_config(model)
    n = len(arch.blocks(model))
    try:
        types, kwargs = get_layer_types_and_kwargs(cfg)
        types, kwargs = list(types)[:n], list(kwargs)[:n]
    except Exception:  # noqa: BLE001 - an older config without per-layer facts: every layer global
        types, kwargs = ["full_attention"] * n, [{}] * n
    kinds = [{"full_attention": GLOBAL, "sliding_attention": SLIDING, "chunked_attention": CHUNKED}.get(t, t)
             for t in types]
    windows = [kw.get("sliding_window") if k != GLOBAL else None for k, kw in zip(kinds, kwargs)]
    return kinds, [int(w) if w else None for w in windows]


def rotary_module(model):
    """The model's shared rotary-embedding module (body.rotary_emb), or None."""
    mod = getattr(arch.body(model), "rotary_emb", None)
    if mod is None:
        mod = getattr(getattr(arch.blocks(model)[0], "self_attn", None), "rotary_emb", None)
    return mod


def rope_layer_types(model) -> list[str | None]:
    """Per layer, the ``layer_type`` its rotary module must be called with (None: called without one)."""
    mod = rotary_module(model)
    types = getattr(arch.text_config(model), "layer_types", None)
    if mod is None or not types or not any(hasattr(mod, f"{t}_inv_freq") for t in set(types)):
        return [None] * len(arch.blocks(model))
    return list(types)[: len(arch.blocks(model))]


def nope_layers(cfg, n_layers: int) -> tuple[int, ...]:
    """Layers that skip RoPE (NoPE): SmolLM3 and Llama 4 list a 0 in ``no_rope_layers`` for each of them."""
    flags = getattr(cfg, "no_rope_layers", None)
    if not isinstance(flags, (list, tuple)):
        return ()
    return tuple(i for i, use in enumerate(list(flags)[:n_layers]) if not use)


def inv_freq(model, layer_type: str | None = None) -> torch.Tensor | None:
    mod = rotary_module(model)
    if mod is None:
        return None
    t = getattr(mod, f"{layer_type}_inv_freq", None) if layer_type else getattr(mod, "inv_freq", None)
    return t


def _rope_base(model, layer_type: str | None) -> float | None:
    cfg = arch.text_config(model)
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, dict) and layer_type and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    base = params.get("rope_theta") if isinstance(params, dict) else None
    base = base or getattr(cfg, "rope_theta", None)
    if base is None:  # recover it from inv_freq[1] = base^(-2/d)
        inv = inv_freq(model, layer_type)
        if inv is not None and inv.numel() > 1:
            base = float(inv.float()[1] ** (-len(inv)))
    return float(base) if base else None


def _position(model, cfg, family: str) -> str:
    attn_cfg = getattr(cfg, "attn_config", None)
    alibi = bool(getattr(cfg, "alibi", False)) or family == "bloom" or (
        bool(getattr(attn_cfg, "alibi", False) if not isinstance(attn_cfg, dict) else attn_cfg.get("alibi")))
    if alibi:
        return "alibi"
    if rotary_module(model) is not None or getattr(cfg, "rotary_dim", None):
        return "rope"
    if position_table(model) is not None:
        return "learned"
    return "none"


def position_table(model):
    """The learned absolute position embedding (GPT-2's wpe, OPT's embed_positions), or None."""
    b = arch.body(model)
    for attr in ("wpe", "embed_positions", "position_embeddings"):
        mod = getattr(b, attr, None)
        if isinstance(mod, torch.nn.Embedding) or (mod is not None and isinstance(getattr(mod, "weight", None),
                                                                                     torch.nn.Parameter)):
            return mod
    return None


def _norm_kind(model, blk, cfg, family: str) -> str:
    norms = [m for m in blk.modules() if "norm" in type(m).__name__.lower()]
    kind = "RMSNorm" if norms and all("rms" in type(m).__name__.lower() for m in norms) else \
        "LayerNorm" if norms else "no norm"
    names = {n for n, _ in blk.named_children()}
    if {"pre_feedforward_layernorm", "post_feedforward_layernorm"} <= names:
        place = "pre- and post-norm around attention and MLP"
    elif getattr(cfg, "do_layer_norm_before", True) is False or getattr(
            cfg, "apply_residual_connection_post_layernorm", False):
        place = "post-norm"
    else:
        place = "pre-norm"
    return f"{kind}, {place}"


def _parallel(cfg, family: str) -> bool:
    if family in ("gptj", "codegen", "phi", "cohere", "cohere2"):
        return True
    for key in ("use_parallel_residual", "parallel_attn"):
        v = getattr(cfg, key, None)
        if v is not None:
            return bool(v)
    return False


def _probe_cache(model, n_tokens: int):
    dev = next(model.parameters()).device
    cache = loop.new_cache(model)
    loop.forward(model, torch.zeros(1, n_tokens, dtype=torch.long, device=dev), cache)
    return cache


def read_facts(model) -> ArchFacts:
    cfg = arch.text_config(model)
    family = str(getattr(cfg, "model_type", type(model).__name__))
    body, blks = arch.find_blocks(model)
    path = next((n for n, m in model.named_modules() if m is blks), "?")
    kinds, windows = _layer_types(model)
    n_heads = int(_cfg_get(cfg, "num_attention_heads", "n_head", "n_heads", default=0))
    refusals: dict[str, str] = {}
    # KV heads, head dim and the cache layer classes, measured from a real cache
    cache_layers, kv_heads, head_dim, v_dim = [], [], 0, None
    try:
        cache = _probe_cache(model, 1)
        layers = getattr(cache, "layers", None) or []
        for layer in layers:
            cache_layers.append(type(layer).__name__)
            k = getattr(layer, "keys", None)
            if isinstance(k, torch.Tensor) and k.dim() == 4:
                kv_heads.append(int(k.shape[1]))
                head_dim = int(k.shape[-1])
                v = getattr(layer, "values", None)
                if isinstance(v, torch.Tensor) and v.dim() == 4 and int(v.shape[-1]) != head_dim:
                    v_dim = int(v.shape[-1])
        if len(kv_heads) != len(blks) or any(c not in ("DynamicLayer", "DynamicSlidingWindowLayer")
                                             for c in cache_layers):
            refusals["kv_cache"] = (f"{family}'s KV cache is not one [batch, KV heads, tokens, head dim] tensor per "
                                    "layer, so its bytes per layer cannot be read and checked here")
    except Exception as exc:  # noqa: BLE001
        refusals["kv_cache"] = f"a cached pass of {family} failed ({type(exc).__name__}), so its KV cache is not shown"
    if not instrument.measured(model):
        refusals["attention_time"] = (f"{family} runs {model.config._attn_implementation} attention, not the app's "
                                      "timed SDPA, so the time inside attention cannot be measured apart from the "
                                      "rest of the pass")
    hidden = int(_cfg_get(cfg, "hidden_size", "n_embd", "d_model", default=0))
    if not head_dim:
        head_dim = int(_cfg_get(cfg, "head_dim", default=0) or (hidden // n_heads if n_heads else 0))
    if not kv_heads:
        kv = _cfg_get(cfg, "num_key_value_heads", "num_kv_heads", default=n_heads)
        kv_heads = [int(kv)] * len(blks)
    kv_set = set(kv_heads)
    attention = "MQA" if kv_set == {1} and n_heads > 1 else "MHA" if kv_set == {n_heads} else "GQA"
    latent, rope_key = getattr(cfg, "kv_lora_rank", None), getattr(cfg, "qk_rope_head_dim", None)
    if latent and kv_set == {1} and (head_dim, v_dim) == (latent, rope_key):
        # multi-head latent attention (DeepSeek-V2/V3) as transformers caches it: one compressed latent and one
        # shared RoPE key per token, which every query head expands; not a key/value head shared by a group
        attention = "MLA"
        refusals["gqa"] = (f"{family} caches one compressed latent of {latent} values and one shared RoPE key of "
                           f"{rope_key} per token (multi-head latent attention), not keys and values per head, so "
                           "the grouped-query picture does not apply")
    position = _position(model, cfg, family)
    rope_types = rope_layer_types(model)
    bases: list[float | None] = [None] * len(blks)
    fraction = None
    if position == "rope":
        bases = [_rope_base(model, t) for t in rope_types]
        for i in nope_layers(cfg, len(blks)):  # these layers add no position at all (NoPE): no base to show
            bases[i] = None
        inv = inv_freq(model, rope_types[0])
        if inv is not None and head_dim:
            fraction = 2 * inv.numel() / head_dim
        elif getattr(cfg, "rotary_dim", None) and head_dim:
            fraction = int(cfg.rotary_dim) / head_dim
    attn0 = getattr(blks[0], "self_attn", None) or getattr(blks[0], "attn", None) or blks[0]
    qk_norm = any(hasattr(attn0, a) for a in ("q_norm", "k_norm", "q_layernorm", "k_layernorm"))
    emb = model.get_input_embeddings()
    scale = getattr(emb, "embed_scale", None)
    scale = float(scale) if scale is not None else None
    out = model.get_output_embeddings()
    tied = out is not None and getattr(out, "weight", None) is not None and \
        out.weight.data_ptr() == emb.weight.data_ptr()
    cap = getattr(cfg, "final_logit_softcapping", None)
    acap = getattr(cfg, "attn_logit_softcapping", None)
    return ArchFacts(
        family=family, blocks_path=path, n_blocks=len(blks), layer_kinds=tuple(kinds), windows=tuple(windows),
        n_heads=n_heads, kv_heads=tuple(kv_heads), head_dim=head_dim, attention=attention, position=position,
        rope_bases=tuple(bases), rotary_fraction=fraction, qk_norm=qk_norm, norm=_norm_kind(model, blks[0], cfg, family),
        parallel_residual=_parallel(cfg, family), tied_embeddings=bool(tied), embedding_scale=scale,
        logit_softcap=float(cap) if cap else None, attn_softcap=float(acap) if acap else None,
        cache_layers=tuple(cache_layers), refusals=refusals, v_head_dim=v_dim,
    )


# ------------------------------------------------------------------------------------------ checking

def check_length(facts: ArchFacts) -> int:
    """A check sequence long enough to cross every window."""
    return max([w for w in facts.windows if w] + [8]) + 5


def window_mask(n: int, window: int | None) -> torch.Tensor:
    """True where query q may see key k: k <= q, and q - k < window for a windowed layer. [n, n]"""
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    ok = k <= q
    return ok & (q - k < window) if window else ok


def attention_problem(att: list[torch.Tensor], facts: ArchFacts, n: int) -> str | None:
    """None if every layer's recorded weights [1, heads, n, n] are a causal (and windowed) softmax."""
    if len(att) != facts.n_blocks:
        return f"the pass recorded {len(att)} attention layers, not {facts.n_blocks}"
    for i, a in enumerate(att):
        a = a[0].float().cpu()
        if a.shape[-2:] != (n, n):
            return f"layer {i}'s attention weights have shape {tuple(a.shape)}"
        if not torch.allclose(a.sum(-1), torch.ones(a.shape[:-1]), atol=1e-3):
            return f"layer {i}'s attention rows do not sum to 1"
        if float(a.masked_fill(window_mask(n, facts.windows[i]), 0).abs().max()) > 1e-6:
            return f"layer {i}'s attention weights are not zero above the diagonal or outside its window"
    return None


@torch.inference_mode()
def check_analysis(model, facts: ArchFacts) -> dict:
    """Refusals for the analysis pass and the logit lens, found by running them on a short sequence and
    comparing with a plain forward pass. Returns {feature: reason}."""
    out: dict[str, str] = {}
    n = check_length(facts)
    vocab = model.get_input_embeddings().weight.shape[0]
    dev = next(model.parameters()).device
    x = (torch.arange(n, device=dev)[None] * 7 + 3) % vocab  # [1, n]
    # Logits of the last CHECK_LOGITS positions only (all past every window), where the forward pass can leave
    # the others out: with a 262k vocabulary the full logits of every position make this check cost gigabytes and
    # a minute at load (Gemma 3 270M; docs/benchmarks.md).
    kw = _keep_kw(model, min(n, CHECK_LOGITS))
    plain = loop.full_pass(model, x, **kw).logits.float()  # [1, keep, vocab]
    keep = plain.shape[1]
    scale = float(plain.abs().max()) or 1.0
    tol = CHECK_TOL if next(model.parameters()).dtype == torch.float32 else 3e-2
    try:
        with instrument.residual_stream(model) as resid:
            logits, att = analysis_pass(model, x, n, **kw)
    except Exception as exc:  # noqa: BLE001
        out["analysis"] = f"recording {facts.family}'s attention weights failed ({type(exc).__name__})"
        return out
    logits = logits.float()
    if not torch.allclose(logits, plain, atol=tol * scale, rtol=0):
        out["analysis"] = (f"the pass that records {facts.family}'s attention weights does not reproduce its normal "
                           f"output (max gap {float((logits - plain).abs().max()):.2g})")
        return out
    problem = attention_problem(att, facts, n)
    if problem:
        out["attention"] = f"{facts.family}'s recorded attention is not shown: {problem}"
    if len(resid) != facts.n_blocks + 1:
        out["lens"] = f"the residual stream of {facts.family} could not be read after every block"
        return out
    try:
        lens_last = arch.unembed(model, resid[-1][:, -keep:]).float()
    except Exception as exc:  # noqa: BLE001
        out["lens"] = f"{facts.family}'s final norm and output head could not be found ({type(exc).__name__})"
        return out
    if not torch.allclose(lens_last, plain, atol=tol * scale, rtol=0):
        out["lens"] = (f"the final norm and output head applied to {facts.family}'s last block output do not give "
                       "its logits, so earlier layers cannot be read that way")
    return out


CHECK_LOGITS = 16  # positions whose logits the load-time check compares


def _keep_kw(model, keep: int) -> dict:
    """``logits_to_keep=keep`` where the model's forward takes it (most transformers families), else nothing."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": keep} if "logits_to_keep" in params else {}


def analysis_pass(model, x: torch.Tensor, m: int, **kw):
    """One plain forward pass over ``x`` that also records every layer's attention weights (first ``m``
    positions). Returns (logits, [weights [b, h, m, m] per layer]); ``kw`` goes to the forward pass."""
    if instrument.measured(model):
        with instrument.attention_weights(limit=m) as att:
            logits = loop.full_pass(model, x, **kw).logits
        return logits, att
    out = loop.full_pass(model, x, output_attentions=True, **kw)
    return out.logits, [a[..., :m, :m] for a in (out.attentions or ())]


def facts_and_checks(model) -> ArchFacts:
    from dataclasses import replace

    facts = read_facts(model)
    return replace(facts, refusals={**facts.refusals, **check_analysis(model, facts)})
