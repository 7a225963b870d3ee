"""Display values for the attention page: the prompt's attention record, the sink answer, the per-head summary,
grouped-query numbers, score counts and the cost sentence (the page and its sections only lay them out)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.predictions.records import attention_verdict
from engine.attention.analysis import (FirstTokenPull, first_token_pull, gqa_saving, growth_exponent,
                                     head_entropy_bits, head_mean_distance, kv_groups, kv_head_of)
from ui.frame import archwords as AW
from ui.frame.html import md_escape, visible
from ui.frame.lessons import lesson

METRICS = ["entropy (bits)", "mean distance (tokens)"]


@dataclass(frozen=True)
class Prompt:
    """The attention the trace recorded for the prompt."""
    att: np.ndarray  # [layers, heads, m, m]
    n: int  # prompt tokens
    m: int  # positions whose attention was kept (m <= n)
    toks: list  # the first m prompt tokens
    pull: FirstTokenPull
    windows: tuple = ()  # per layer: the sliding window (tokens a query sees) or None for a global layer

    def head(self, layer: int, head: int) -> np.ndarray:
        return self.att[layer, head]  # [m, m]


def prompt_of(tr) -> Prompt:
    att = tr.analysis.attentions  # [layers, heads, m, m]
    m = att.shape[-1]
    f = getattr(getattr(tr, "info", None), "arch", None)
    return Prompt(att, len(tr.prompt_ids), m, list(tr.prompt_tokens[:m]), first_token_pull(att),
                  tuple(f.windows) if f is not None else ())


def refusal(info) -> str | None:
    """One line when this architecture's attention weights cannot be shown faithfully (engine.core.archfacts)."""
    reason = info.refused("analysis") or info.refused("attention")
    return f"Attention weights are not shown for this model: {reason}." if reason else None


def window_note(info) -> str | None:
    """Which layers are local (sliding window) and which global, from the model's own config: one short
    paragraph, the layers as runs ("0-4, 6-10"), the window in words that say what is seen and what is cached."""
    f = getattr(info, "arch", None)
    if f is None or not f.has_windows:
        return None
    local = [i for i, w in enumerate(f.windows) if w]
    glob = AW.global_layers(f)
    sizes = sorted({f.windows[i] for i in local})
    window = (AW.window_words(f, local[0]) if len(sizes) == 1 else
              "windows of " + ", ".join(f"{w:,}" for w in sizes) + " tokens")
    return lesson("attention", "window note", local_layers=AW.count(len(local), "sliding-window (local) layer"),
                  local=AW.layer_list(local), window=window,
                  glob=(lesson("attention", "window note global", layers=AW.count(len(glob), "global layer"),
                               which=AW.layer_list(glob))
                        if glob else ""))


def sink_answer(p: Prompt) -> str:
    """The reveal of the 'which token does the last one read' question: a sink when a third of the heads or more
    read position 0 most."""
    pull = p.pull
    first = md_escape(repr(visible(p.toks[0])))  # a token's text is user text: literal in markdown
    values = dict(mostly=pull.heads_mostly_first, total=pull.heads_total, first=first, weight=pull.mean_weight_first)
    if pull.heads_mostly_first * 3 >= pull.heads_total:
        return lesson("attention", "answer sink", **values)
    return lesson("attention", "answer no sink", **values)


def sink_verdict(p: Prompt):
    """Which choice of the sink question this run's attention decides (engine/predictions/records.py)."""
    return attention_verdict(p.att)


@dataclass(frozen=True)
class Summary:
    """One number per head for the overview: values [layers, heads], the metric's name, unit and explanation."""
    values: np.ndarray
    name: str
    unit: str
    explain: str

    def at(self, layer: int, head: int) -> str:
        return f"{self.values[layer, head]:.2f} {self.unit}"


def summary(p: Prompt, metric: str) -> Summary:
    if metric.startswith("entropy"):
        return Summary(head_entropy_bits(p.att), "Attention entropy", "bits", lesson("attention", "entropy"))
    return Summary(head_mean_distance(p.att), "Mean distance attended", "tokens",
                   lesson("attention", "distance", far=(p.m - 1) / 2))


def window_caption(start: int, size: int, m: int) -> str:
    return lesson("attention", "window", start=start, end=start + size - 1, m=m)


@dataclass(frozen=True)
class GQA:
    """How the query heads share key/value heads, and what that saves in the cache."""
    groups: list  # groups[kv] = the query heads reading K/V head kv
    group: int  # query heads per K/V head
    text: str  # the section's paragraph
    contexts: list  # token counts compared (sorted): this run's, 2048, the model's longest context
    bytes_gqa: list
    bytes_mha: list

    @property
    def shared(self) -> bool:
        return self.group > 1


def gqa(info, tr, head: int) -> GQA:
    """Section 3 for the head on view: its K/V group, and the cache with and without sharing."""
    tokens = len(tr.prompt_ids) + len(tr.generated_ids)  # this run's prompt + output
    groups = kv_groups(info.n_heads, info.n_kv_heads)
    group = info.n_heads // info.n_kv_heads
    contexts = sorted({tokens, 2048, info.max_positions})
    savings = [gqa_saving(info, c) for c in contexts]
    if group > 1:
        kv = kv_head_of(head, info.n_heads, info.n_kv_heads)
        text = lesson("attention", "gqa shared", heads=info.n_heads,
                      kv_heads=AW.count(info.n_kv_heads, "key/value head"),
                      kind=AW.kind_name(AW.attention_kind(info)), sharing=AW.sharing(info.n_heads, info.n_kv_heads),
                      head=head, kv=kv, others=", ".join(str(h) for h in groups[kv] if h != head),
                      kv_cached=AW.count(info.n_kv_heads, "K/V head"), ratio=gqa_saving(info, tokens).ratio)
    else:
        text = lesson("attention", "gqa none", heads=info.n_heads)
    return GQA(groups, group, text, contexts, [s.bytes_gqa for s in savings], [s.bytes_mha for s in savings])


def gqa_header(info) -> str:
    """Section 3's header, named after this model's kind of attention."""
    kind = AW.attention_kind(info)
    what = {"MQA": "every query head reads one shared key/value head", "MHA": "every head has its own keys and values"
            }.get(kind, "heads share keys and values")
    name = AW.kind_name(kind)
    return f"3. {name[0].upper()}{name[1:]}: {what}"


def saving_caption(info, g: GQA) -> str:
    """The formula the bars were computed with, and their values: per layer, the tokens it holds (a sliding layer
    at most its window - 1), so the caption and the bars are the same numbers."""
    f = getattr(info, "arch", None)
    sizes = "; ".join(f"{c:,} tokens: {AW.binary_bytes(b)} (with {info.n_heads} KV heads: {AW.binary_bytes(m)})"
                      for c, b, m in zip(g.contexts, g.bytes_gqa, g.bytes_mha))
    if f is not None and f.has_windows:
        local = [i for i, w in enumerate(f.windows) if w]
        return lesson("attention", "saving caption windows", n_layers=info.n_layers, head_dim=info.head_dim,
                      bpv=info.bytes_per_value, dtype=info.dtype, n_local=len(local),
                      window=AW.window_words(f, local[0]), sizes=sizes, run=g.contexts[0],
                      longest=info.max_positions)
    return lesson("attention", "saving caption", layers=info.n_layers, head_dim=info.head_dim,
                  bpv=info.bytes_per_value, dtype=info.dtype, run=g.contexts[0], longest=info.max_positions,
                  sizes=sizes)


def cost_text(info, n: int) -> str:
    """Scores computed for an n-token prompt: n(n+1)/2 per head per layer."""
    per_head = n * (n + 1) // 2
    return lesson("attention", "cost", n=n, per_head=per_head, in_model=info.n_layers * info.n_heads * per_head)


def cost_result(points) -> str:
    """The growth between the two longest measured lengths, whole pass and attention alone."""
    ns = [p.tokens for p in points]
    fwd = [p.forward_median for p in points]
    att = [p.attention_median for p in points]
    return lesson("attention", "cost result", before=ns[-2], last=ns[-1], forward_ratio=fwd[-1] / fwd[-2],
                  forward_exponent=growth_exponent(ns, fwd), attention_ratio=att[-1] / att[-2],
                  attention_exponent=growth_exponent(ns, att), attention_share=att[-1] / fwd[-1])
