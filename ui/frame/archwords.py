"""The words every page uses for a model's architecture facts (engine.core.archfacts): layer lists, the sliding
window, the attention kind, byte counts. In one place, so two pages cannot say the same fact two ways (issue 37:
Gemma's global layers were "5, 11, 17" on one page and "6, 12, 18" on another, its one KV head "grouped-query"
on one and "MQA" on another, its window "512 tokens" where the cache holds 511).

- Layers are numbered from 0, as every chart's layer axis and picker is (``NUMBERING`` says so on the two-models
  page, whose facts list layers with no chart beside them).
- A window of W is what a query sees, itself included; the cache of that layer holds at most W - 1 past tokens
  (transformers' DynamicSlidingWindowLayer: the newest key joins during the pass). ``window_words`` says both.
- Byte counts are binary: KiB, MiB, GiB (``binary_bytes``).
"""
from __future__ import annotations

NUMBERING = "layers are numbered from 0, as on every chart"
KIND_NAMES = {"MHA": "multi-head attention (MHA)", "GQA": "grouped-query attention (GQA)",
              "MQA": "multi-query attention (MQA)", "MLA": "multi-head latent attention (MLA)"}


STREAM_AXIS = "after layer (numbered from 0; embed = the embeddings, before layer 0)"


def stream_labels(points: int) -> list[str]:
    """Labels for the residual stream read after every layer: "embed", then the index of the layer just run
    ("0", "1", ...), so a chart of the stream names each layer as the attention overview and every picker do."""
    return ["embed"] + [str(i) for i in range(points - 1)]


def layer_list(indices) -> str:
    """Layer indices as short runs: (0, 1, 2, 3, 4, 6, 7) -> "0-4, 6, 7" (a run of three or more is a range)."""
    xs = sorted(int(i) for i in indices)
    runs: list[list[int]] = []
    for i in xs:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) >= 3 else ", ".join(map(str, r)) for r in runs)


def global_layers(facts) -> tuple[int, ...]:
    return tuple(i for i, w in enumerate(facts.windows) if not w)


def held_cap(facts, layer: int) -> int | None:
    """The most past tokens layer ``layer``'s cache holds (None: every token, as a global layer's does)."""
    huge = 1 << 40
    cap = facts.held_tokens(layer, huge)
    return cap if cap < huge else None


def window_words(facts, layer: int) -> str:
    """The window of a sliding layer in one phrase that says both numbers: what a query sees and what is cached."""
    w = int(facts.windows[layer])
    cap = held_cap(facts, layer)
    cached = ("the layer's cache still keeps every token (this cache class drops none)" if cap is None else
              f"the layer's cache keeps at most {cap:,} past tokens")
    return f"a window of {w:,} tokens: each token sees itself and the {w - 1:,} before it, so {cached}"


def attention_kind(info) -> str:
    """"MHA" | "GQA" | "MQA" | "MLA": measured from the cache at load (engine.core.archfacts), else from the
    head counts."""
    f = getattr(info, "arch", None)
    if f is not None:
        return f.attention
    return "MQA" if info.n_kv_heads == 1 < info.n_heads else "MHA" if info.n_kv_heads == info.n_heads else "GQA"


def kind_name(kind: str) -> str:
    return KIND_NAMES.get(kind, kind)


def sharing(n_heads: int, n_kv_heads: int) -> str:
    """Who reads which key/value head, in words that match the kind's name."""
    if n_kv_heads == 1:
        return f"all {n_heads} query heads read that one head's keys and values"
    if n_kv_heads >= n_heads:
        return "every query head has its own key/value head"
    return f"each key/value head is shared by {n_heads // n_kv_heads} query heads"


def count(n: int, noun: str) -> str:
    """"1 KV head", "3 KV heads"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def binary_bytes(n: float) -> str:
    """A byte count in binary units (KiB = 1,024 bytes), as the attention and KV pages and the two-models page
    show every cache and weight size."""
    n = float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}" if n / size < 100 else f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"
