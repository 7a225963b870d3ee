"""KV-cache sizes of well-known models, from their published configs (assets/model_presets.json).

Standard attention caches a key and a value vector per KV head, per layer, per token:
    bytes = 2 x layers x kv_heads x head_dim x tokens x batch x bytes_per_value
Multi-head latent attention (MLA; DeepSeek-V2, arXiv:2405.04434, and DeepSeek-V3) caches instead one
compressed latent of ``kv_lora_rank`` values plus one shared RoPE key of ``qk_rope_head_dim`` values per
layer and token, from which every head's keys and values are re-created:
    bytes = layers x (kv_lora_rank + qk_rope_head_dim) x tokens x batch x bytes_per_value
Sizes are integers: bits are used throughout so 4-bit values stay exact (scale factors of fp8/int8/int4
formats are not counted: e.g. one scale per head and token adds 2/head_dim bytes per value at 16-bit scales).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PRESETS_PATH = Path(__file__).resolve().parents[2] / "assets" / "model_presets.json"

DTYPE_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
GPU_MEMORY_GB = (24, 40, 80, 141)  # common accelerator memory sizes (e.g. RTX 4090, A100 40/80 GB, H200)
GB = 10**9  # GPU memory is sold in decimal gigabytes


@dataclass(frozen=True)
class Preset:
    name: str
    hf_id: str
    attention: str  # "MHA" | "GQA" | "MQA" | "MLA" (the model's own design)
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    n_params: int
    weights_dtype: str
    context_window: int
    context_source: str = ""  # where context_window is read: "config.json: max_position_embeddings", a model card
    tied_embeddings: bool = False
    intermediate_size: int = 0
    qkv_bias: bool = False
    kv_lora_rank: int = 0  # MLA only
    qk_rope_head_dim: int = 0  # MLA only
    qk_nope_head_dim: int = 0  # MLA only
    v_head_dim: int = 0  # MLA only
    note: str = ""

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def values_per_token_layer(self) -> int:
        """Values one token adds to the cache in one layer (keys and values together)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim

    def weights_bytes(self, dtype: str | None = None) -> int:
        return self.n_params * DTYPE_BITS[dtype or self.weights_dtype] // 8


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[Preset, ...]:
    data = json.loads(Path(path).read_text())
    fields = set(Preset.__dataclass_fields__)
    return tuple(Preset(**{k: v for k, v in p.items() if k in fields}) for p in data["presets"])


def load_presets(path: Path | str = PRESETS_PATH) -> tuple[Preset, ...]:
    return _load(str(path))


def preset(name: str, path: Path | str = PRESETS_PATH) -> Preset:
    for p in load_presets(path):
        if p.name == name:
            return p
    raise KeyError(f"no preset named {name!r}")


def kv_bytes_per_token(p: Preset, bits: int = 16) -> int:
    """Cache bytes one token adds, summed over all layers, at ``bits`` per value."""
    return p.n_layers * p.values_per_token_layer * bits // 8


def kv_bytes_total(p: Preset, tokens: int, batch: int = 1, bits: int = 16) -> int:
    return p.n_layers * p.values_per_token_layer * tokens * batch * bits // 8


def kv_bytes_mistaken(p: Preset, bits: int = 16) -> int:
    """The common mistake: a GQA model's cache computed as if every query head had its own keys and values."""
    return 2 * p.n_layers * p.n_heads * p.head_dim * bits // 8


def max_tokens_that_fit(p: Preset, memory_bytes: int, bits: int = 16, weights_dtype: str | None = None) -> int:
    """Tokens of cache (across the whole batch) that fit next to the weights; 0 if the weights alone do not."""
    free = memory_bytes - p.weights_bytes(weights_dtype)
    return max(0, free * 8 // (p.n_layers * p.values_per_token_layer * bits))


@dataclass(frozen=True)
class Budget:
    """Memory for one serving setup: weights plus the KV cache of ``batch`` sequences of ``tokens`` each."""
    preset: Preset
    tokens: int
    batch: int
    kv_dtype: str
    weights_dtype: str
    kv_per_token: int  # bytes, one sequence, all layers
    kv_total: int  # bytes, whole batch
    weights: int  # bytes
    gpu_fit_tokens: tuple[tuple[int, int], ...]  # (GPU GB, total cached tokens that fit next to the weights)

    @property
    def total(self) -> int:
        return self.weights + self.kv_total


def budget(p: Preset, tokens: int, batch: int = 1, kv_dtype: str = "bf16", weights_dtype: str | None = None,
           gpus: tuple[int, ...] = GPU_MEMORY_GB) -> Budget:
    if kv_dtype not in DTYPE_BITS or (weights_dtype or p.weights_dtype) not in DTYPE_BITS:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_BITS)}")
    if tokens < 0 or batch < 1:
        raise ValueError("tokens must be >= 0 and batch >= 1")
    bits, wd = DTYPE_BITS[kv_dtype], weights_dtype or p.weights_dtype
    return Budget(p, int(tokens), int(batch), kv_dtype, wd, kv_bytes_per_token(p, bits),
                  kv_bytes_total(p, tokens, batch, bits), p.weights_bytes(wd),
                  tuple((g, max_tokens_that_fit(p, g * GB, bits, wd)) for g in gpus))


@dataclass(frozen=True)
class AttentionVariant:
    kind: str  # "MHA" | "GQA" | "MQA" | "MLA"
    label: str
    kv_heads: int  # KV heads cached (0 for MLA: one latent shared by all heads)
    values_per_token_layer: int
    bytes_per_token: int
    is_model: bool  # True for the model's own design; False for a what-if with the same layers and head sizes


def attention_variants(p: Preset, bits: int = 16) -> list[AttentionVariant]:
    """The same model's cache under multi-head, grouped-query, multi-query and latent attention.

    Keys/values per head keep the model's sizes (DeepSeek-V3: keys 192 = 128 + 64 RoPE, values 128).
    GQA uses the model's own KV heads if it is GQA, else a quarter of the query heads (a common choice).
    MLA for a non-MLA model uses DeepSeek-V2's sizing: latent 4 x head_dim plus a RoPE key of head_dim / 2,
    i.e. 4.5 x head_dim values per layer, which the DeepSeek-V2 paper equates to GQA with 2.25 groups.
    """
    if p.is_mla:
        k_dim, v_dim = p.qk_nope_head_dim + p.qk_rope_head_dim, p.v_head_dim
        mla_values, own = p.values_per_token_layer, "MLA"
    else:
        k_dim = v_dim = p.head_dim
        mla_values = 4 * p.head_dim + p.head_dim // 2
        own = "MQA" if p.n_kv_heads == 1 else "MHA" if p.n_kv_heads == p.n_heads else "GQA"
    gqa = p.n_kv_heads if own == "GQA" else max(1, p.n_heads // 4)
    rows = [("MHA", p.n_heads), ("GQA", gqa), ("MQA", 1)]
    out = []
    for kind, g in rows:
        values = g * (k_dim + v_dim)
        label = {"MHA": f"MHA: {g} KV heads (one per query head)", "GQA": f"GQA: {g} KV heads shared by groups",
                 "MQA": "MQA: 1 KV head shared by all"}[kind]
        out.append(AttentionVariant(kind, label, g, values, p.n_layers * values * bits // 8, own == kind))
    out.append(AttentionVariant("MLA", f"MLA: latent {mla_values} values, shared", 0, mla_values,
                                p.n_layers * mla_values * bits // 8, own == "MLA"))
    return out


def param_count_estimate(p: Preset) -> int | None:
    """Parameters re-derived from the config for dense Llama-style models (a check on the published count).

    Embeddings (+ untied output head), per layer q/k/v/o projections (+ q/k/v biases) and a gated MLP of
    three matrices, two RMSNorm vectors per layer and one final norm. None for other architectures.
    """
    if p.is_mla or p.name.startswith("GPT-2") or not p.intermediate_size:
        return None
    d, kv = p.hidden_size, p.n_kv_heads * p.head_dim
    q = p.n_heads * p.head_dim
    attn = d * q + 2 * d * kv + q * d + ((q + 2 * kv) if p.qkv_bias else 0)
    mlp = 3 * d * p.intermediate_size
    emb = p.vocab_size * d * (1 if p.tied_embeddings else 2)
    return emb + p.n_layers * (attn + mlp + 2 * d) + d
