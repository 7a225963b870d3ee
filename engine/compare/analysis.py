"""Two models side by side: their architecture facts, where their parameters are, their KV cache measured against
the per-layer formula, one decode step's time and bytes, and the same prompt's next-token top-5.

Every number says how it was obtained:
- "read": read from the loaded model and its config (engine.core.archfacts);
- "counted": counted from the model's own parameter tensors;
- "measured": measured on this machine, in this run (the cache's tensors, the clock);
- "derived": computed by a stated formula from the above (the formula is in the docstring and on the page).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core import arch, kv
from engine.core.loop import forward, new_cache
from engine.core.loaded import LoadedModel, ModelInfo


@dataclass(frozen=True)
class FactRow:
    fact: str
    a: str
    b: str
    how: str  # "read" | "counted" | "measured" | "derived"

    @property
    def differs(self) -> bool:
        return self.a != self.b


def _kinds(info: ModelInfo) -> str:
    """Layer kinds with the global layers' indices, counted from 0 as every layer index of the app is."""
    f = info.arch
    if f is None or not f.has_windows:
        return f"all {info.n_layers} global"
    glob = [i for i, k in enumerate(f.layer_kinds) if k == "global"]
    win = sorted({w for w in f.windows if w})
    return (f"{len(f.sliding_layers)} sliding (window {', '.join(map(str, win))}), {len(glob)} global "
            f"(layers {', '.join(map(str, glob))})")


def _bases(info: ModelInfo) -> str:
    f = info.arch
    bases = sorted({b for b in (f.rope_bases if f else (info.rope_theta,)) if b})
    if info.position_encoding != "rope" or not bases:
        return info.position_encoding
    if len(bases) == 1:
        return f"RoPE, base {bases[0]:,.0f}"
    return "RoPE, bases " + " (sliding) / ".join(f"{b:,.0f}" for b in bases) + " (global)"


def fact_rows(a: ModelInfo, b: ModelInfo) -> list[FactRow]:
    """The architecture facts of two loaded models, one row per fact (all read from the models, the parameter
    count counted from their tensors)."""
    def both(name, fn, how="read"):
        return FactRow(name, fn(a), fn(b), how)

    def g(attr):
        return lambda i: getattr(i.arch, attr) if i.arch is not None else None

    return [
        both("Family (config model_type)", lambda i: i.model_type),
        both("Parameters", lambda i: f"{i.n_params / 1e6:,.1f} M", "counted"),
        both("Blocks (layers)", lambda i: str(i.n_layers)),
        both("Hidden size", lambda i: f"{i.hidden_size:,}"),
        both("MLP width", lambda i: f"{i.intermediate_size:,}"),
        both("Vocabulary", lambda i: f"{i.vocab_size:,}"),
        both("Query heads / KV heads", lambda i: f"{i.n_heads} / {i.n_kv_heads}"),
        both("Attention kind", lambda i: g("attention")(i) or "?", "measured"),
        both("Head dim", lambda i: str(i.head_dim), "measured"),
        both("Layer kinds", _kinds),
        both("Positions", _bases),
        both("QK-norm", lambda i: "yes" if g("qk_norm")(i) else "no"),
        both("Norms", lambda i: g("norm")(i) or "?"),
        both("Embedding scaled by", lambda i: f"{g('embedding_scale')(i):.2f} (sqrt(hidden))"
             if g("embedding_scale")(i) else "no scaling"),
        both("Tied embedding / head", lambda i: "yes" if i.tied_embeddings else "no"),
        both("Chat template", lambda i: "yes (instruct model)" if i.has_chat_template else "none (base model)"),
        both("Context (max positions)", lambda i: f"{i.max_positions:,}"),
    ]


# ------------------------------------------------------------------------------------ where the parameters are

PARTS = ("embedding", "attention", "MLP", "norms", "other")


def param_split(model) -> dict[str, int]:
    """Parameters counted per part (each tensor once: a tied head is the embedding). Attention = the blocks'
    attention modules (q/k/v/o and any QK-norm inside them); MLP = their MLP modules; norms = every norm
    outside those; other = anything left (e.g. an untied output head, learned positions)."""
    seen: set[int] = set()
    out = dict.fromkeys(PARTS, 0)

    def add(part, module):
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out[part] += p.numel()

    add("embedding", model.get_input_embeddings())
    for blk in arch.blocks(model):
        for name, child in blk.named_children():
            low = name.lower()
            if "attn" in low or "attention" in low:
                add("attention", child)
            elif "mlp" in low or "ffn" in low or "feed_forward" in low:
                add("MLP", child)
            elif "norm" in low or low.startswith("ln"):
                add("norms", child)
    add("norms", arch.final_norm(model))
    add("other", model)  # what is left: untied head, positions, biases outside the blocks
    return out


# ----------------------------------------------------------------------------------------- KV cache, measured

@dataclass(frozen=True)
class KVPoint:
    tokens: int
    measured: int  # bytes held by the cache's tensors after ``tokens`` tokens (measured)
    formula: int  # sum over layers of 2 x KV heads x head dim x tokens held x bytes (derived)
    per_layer_measured: tuple[int, ...]
    per_layer_formula: tuple[int, ...]


@torch.inference_mode()
def kv_growth(lm: LoadedModel, lengths: tuple[int, ...]) -> list[KVPoint]:
    """Feed a made-up token sequence in chunks up to each of ``lengths`` through one cache and read its bytes
    after each (sliding-window layers stop growing at their window). No text is needed: a cache's size
    depends only on how many tokens went through it."""
    vocab = lm.info.vocab_size
    cache = new_cache(lm)
    out, done = [], 0
    # a model with learned positions cannot read past its table (GPT-2); none is run past its context
    for n in sorted(set(int(t) for t in lengths if 0 < t <= lm.info.max_positions)):
        x = (torch.arange(done, n, device=lm.device)[None] * 7 + 11) % vocab  # [1, n - done]
        forward(lm, x, cache)  # [1, 1, vocab]: the logits are not needed
        done = n
        meas = kv.layer_bytes(cache)
        form = kv.layer_bytes_formula(lm.info, n)
        out.append(KVPoint(n, sum(meas), sum(form), tuple(meas), tuple(form)))
    return out


def kv_bytes_at(info: ModelInfo, tokens: int) -> int:
    """Derived: the per-layer formula at ``tokens`` (windows capped), for lengths too long to run here."""
    return kv.kv_bytes_for(info, tokens)


# ------------------------------------------------------------------------------------------- next-token top-5

@dataclass(frozen=True)
class TopK:
    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    probs: tuple[float, ...]
    prompt_tokens: int


@torch.inference_mode()
def next_token_top(lm: LoadedModel, text: str, k: int = 5) -> TopK:
    """The next-token distribution after ``text`` as plain text (no chat template: one of the two may be a base
    model), its ``k`` most likely tokens and their probabilities (measured: one forward pass)."""
    tok = lm.tokenizer
    ids = tok(text, add_special_tokens=True)["input_ids"]
    x = torch.tensor([ids], device=lm.device)  # [1, n]
    logits = forward(lm, x, new_cache(lm))[0, -1].float()  # [vocab]
    p = torch.softmax(logits, -1)
    top = torch.topk(p, k)
    return TopK(tuple(tok.decode([int(i)]) for i in top.indices), tuple(int(i) for i in top.indices),
                tuple(float(v) for v in top.values), len(ids))


# ------------------------------------------------------------------------------------------- one decode step

@dataclass(frozen=True)
class StepBytes:
    weights: int  # bytes of weights one decode step reads (engine.models.precision.decode_weight_bytes)
    head: int  # of which the output head (the tied embedding where tied): vocab x hidden x bytes
    kv: int  # bytes of KV cache read at this context (the per-layer formula)

    @property
    def total(self) -> int:
        return self.weights + self.kv

    def floor_ms(self, read_gb_s: float) -> float:
        """Derived lower bound on one decode step: bytes read / measured memory bandwidth."""
        return self.total / (read_gb_s * 1e9) * 1000.0 if read_gb_s > 0 else float("nan")


def step_bytes(lm: LoadedModel, context: int) -> StepBytes:
    """Derived: what one decode step at ``context`` tokens must read from memory: every weight once (an untied
    input embedding only one row), plus the KV cache's keys and values (windows capped)."""
    from engine.models import precision

    head = lm.model.get_output_embeddings()
    head_bytes = sum(p.numel() * p.element_size() for p in head.parameters()) if head is not None else 0
    return StepBytes(precision.decode_weight_bytes(lm.model), head_bytes, kv.kv_bytes_for(lm.info, context))
