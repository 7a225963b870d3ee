"""Display values for the KV-cache page: the run's cache measured against the formula, the calculator's numbers
and tables, the common mistake and the attention variants (the page and its sections only lay them out)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.core.loaded import Mode
from engine.core.kv import growth_at, growth_past_windows, kv_bytes_for, layer_bytes_formula
from engine.kv_cache import presets as kp
from engine.core.trace import StepRecord
from engine.predictions.grading import Verdict
from engine.predictions.records import kv_verdict
from ui.frame import archwords as AW
from ui.frame.html import visible
from ui.kv_cache.figures import fmt_bytes
from ui.frame.lessons import lesson


@dataclass(frozen=True)
class RunCache:
    """This run's cache: measured after every step, and the formula summed over layers (2 x KV heads x head_dim x
    the tokens each layer holds x bytes)."""
    per_token: int  # formula bytes one token adds while every layer still grows (the first tokens)
    last: StepRecord
    prompt: int  # tokens the prefill wrote
    formula_bytes: list  # formula at each step's cached tokens
    equal: list  # measured == formula, per step
    fed: int  # tokens fed through the model with the cache
    without: int  # tokens a loop without a cache would feed (the whole sequence at every step)
    step_growth: tuple = ()  # measured: bytes each decode step added to the cache
    next_growth: int = 0  # formula: bytes the next token would add after the last step (windows full or not)

    @property
    def all_equal(self) -> bool:
        return all(self.equal)


def run_cache(info, tr) -> RunCache:
    formula = [kv_bytes_for(info, s.kv_tokens) for s in tr.steps]
    growth = tuple(b.kv_bytes - a.kv_bytes for a, b in zip(tr.steps, tr.steps[1:]))
    t = tr.steps[-1].kv_tokens
    return RunCache(kv_bytes_for(info, 1), tr.steps[-1], tr.steps[0].kv_tokens, formula,
                    [s.kv_bytes == f for s, f in zip(tr.steps, formula)],
                    sum(s.tokens_in for s in tr.steps), sum(s.kv_tokens for s in tr.steps), growth,
                    growth_at(info, t))


def _windowed(info):
    """The model's facts when some layer's cache stops growing (a sliding window), else None."""
    f = getattr(info, "arch", None)
    return f if f is not None and any(AW.held_cap(f, i) is not None for i in range(f.n_blocks)) else None


@dataclass(frozen=True)
class LayerGroup:
    """Layers whose caches hold the same shape after ``tokens`` tokens: same kind, KV heads and tokens held."""
    layers: tuple
    kind: str  # "sliding" | "global"
    kv_heads: int
    held: int  # tokens each of these layers holds
    window: int | None


def layer_groups(info, tokens: int) -> list[LayerGroup]:
    f = getattr(info, "arch", None)
    if f is None:
        return [LayerGroup(tuple(range(info.n_layers)), "global", info.n_kv_heads, int(tokens), None)]
    groups: dict[tuple, list[int]] = {}
    for i in range(f.n_blocks):
        groups.setdefault((f.windows[i], f.kv_heads[i], f.held_tokens(i, tokens)), []).append(i)
    return [LayerGroup(tuple(ls), "sliding" if w else "global", kv, held, w) for (w, kv, held), ls in groups.items()]


def _group_name(g: LayerGroup) -> str:
    return f"{AW.count(len(g.layers), g.kind + ' layer')} ({AW.layer_list(g.layers)})"


def what_you_see(info, rc: RunCache) -> str:
    kind = AW.kind_name(AW.attention_kind(info))
    design = f"{kind}: {AW.sharing(info.n_heads, info.n_kv_heads)}"
    f = _windowed(info)
    held = ""
    if f is not None:
        caps = sorted({AW.held_cap(f, i) for i in range(f.n_blocks)} - {None})
        if rc.last.kv_tokens > caps[0]:
            held = " " + lesson("kv_cache", "held by windows", caps=", ".join(f"{c:,}" for c in caps))
    return lesson("kv_cache", "what you see", source=info.source, layers=info.n_layers, heads=info.n_heads,
                  kv_heads=AW.count(info.n_kv_heads, "KV head"), design=design, tokens=rc.last.kv_tokens,
                  held=held, size=fmt_bytes(rc.last.kv_bytes))


def _shape(info) -> dict:
    return dict(layers=info.n_layers, heads=info.n_heads, kv_heads=info.n_kv_heads, head_dim=info.head_dim,
                bpv=info.bytes_per_value, dtype=info.dtype)


def growth_words(rc: RunCache) -> str:
    """What this run measured per decode step, in one phrase (several values when a window filled during it)."""
    if not rc.step_growth:
        return "no decode step in this run"
    seen = list(dict.fromkeys(rc.step_growth))
    if len(seen) == 1:
        return f"+{seen[0]:,} B per decode step"
    return "+" + ", then +".join(f"{g:,}" for g in seen) + " B per decode step"


def token_question(info, rc: RunCache) -> tuple[str, str]:
    """How many bytes each new token adds: the question and its answer, the answer checked against what this run
    measured per decode step. With sliding windows the answer has two parts: before and after they fill."""
    v = _shape(info)
    measured = lesson("kv_cache", "answer measured", growth=growth_words(rc), tokens=rc.last.kv_tokens)
    if _windowed(info) is None:
        return (lesson("kv_cache", "try token", **v),
                lesson("kv_cache", "answer token", per_token=rc.per_token, size=fmt_bytes(rc.per_token), **v)
                + " " + measured)
    f = info.arch
    grow = [g for g in layer_groups(info, 1 << 40) if g.window is None or AW.held_cap(f, g.layers[0]) is None]
    full = max(c for c in (AW.held_cap(f, i) for i in range(f.n_blocks)) if c is not None)
    return (lesson("kv_cache", "try token windows", **v),
            lesson("kv_cache", "answer token windows", per_token=rc.per_token, after=growth_past_windows(info),
                   growing=" and the ".join(_group_name(g) for g in grow) or "none of the layers", full=full,
                   **v) + " " + measured)


def token_section(info) -> str:
    """The lesson section of the bytes-per-token question: with sliding windows it asks before and after they fill."""
    return "try token" if _windowed(info) is None else "try token windows"


def token_verdict(info, rc: RunCache) -> Verdict | None:
    """The bytes-per-token question graded by the bytes this run's decode steps added to the cache (measured);
    the windowed question is a fact (None)."""
    if _windowed(info) is not None:
        return None
    return kv_verdict(rc.step_growth, info.n_layers, info.n_heads, info.n_kv_heads, info.head_dim,
                      info.bytes_per_value)


def holds_text(info, rc: RunCache) -> str:
    """The cache's shape as the run left it: one shape per group of layers holding the same tokens."""
    groups = layer_groups(info, rc.last.kv_tokens)
    shapes = [f"**[1, {g.kv_heads}, {g.held}, {info.head_dim}]**" + (f" in the {_group_name(g)}" if len(groups) > 1
                                                                     else "") for g in groups]
    return lesson("kv_cache", "holds", shapes=" and ".join(shapes), tensors=2 * info.n_layers, **_shape(info))


def heatmap_caption(info, which: str, snap, rc: RunCache, layer: int | None = None) -> str:
    rope = lesson("kv_cache", "heatmap rope") + " " if which == "keys" and info.position_encoding == "rope" else ""
    f = getattr(info, "arch", None)
    if f is not None and layer is not None and f.windows[layer] and snap.layer_tokens:
        rope += (f"This layer has {AW.window_words(f, layer)}: after this run it holds the newest "
                 f"{snap.layer_tokens[layer]:,}; older columns are blank because they were dropped. ")
    check = " \u2714" if snap.measured_bytes == rc.last.kv_bytes else f" (run: {rc.last.kv_bytes:,})"
    return lesson("kv_cache", "heatmap caption", which=which, head_dim=info.head_dim, rope=rope,
                  size=fmt_bytes(snap.measured_bytes), bytes=snap.measured_bytes, check=check)


def formula_text(info, rc: RunCache) -> str:
    f = getattr(info, "arch", None)
    if f is None or not (f.has_windows or len(set(f.kv_heads)) > 1):
        return lesson("kv_cache", "formula", per_token=rc.per_token, **_shape(info))
    text = lesson("kv_cache", "formula per layer head", **_shape(info))
    t = rc.last.kv_tokens
    per_layer = layer_bytes_formula(info, t)
    dims = f"2 × {f.head_dim}" if f.value_dim == f.head_dim else f"({f.head_dim} + {f.value_dim})"
    parts = [f"{_group_name(g)}: {g.kv_heads} × {dims} × {g.held:,} × {info.bytes_per_value} = "
             f"{per_layer[g.layers[0]]:,} B each" + (f" ({AW.window_words(f, g.layers[0])})" if g.window else "")
             for g in layer_groups(info, t)]
    return text + "\n\n" + lesson("kv_cache", "formula per layer", tokens=t, parts="; ".join(parts),
                                    total=sum(per_layer), next_growth=rc.next_growth)


def cache_words(info) -> str:
    """One model's cache in a sentence, from its facts: KV heads per layer, the attention kind, and which layers
    stop growing at their window (section 6 sets two models side by side with it)."""
    f = _windowed(info)
    windows = f" in all {info.n_layers} layers, for every token"
    if f is not None:
        local = [i for i in range(f.n_blocks) if AW.held_cap(f, i) is not None]
        keep = [i for i in range(f.n_blocks) if i not in local]
        windows = (f"; {len(local)} of its {info.n_layers} layers ({AW.layer_list(local)}) have "
                   f"{AW.window_words(f, local[0])}"
                   + (f"; the {AW.count(len(keep), 'global layer')} ({AW.layer_list(keep)}) keep every token"
                      if keep else ""))
    return lesson("kv_cache", "past window model", model=info.source, kv_heads=AW.count(info.n_kv_heads, "KV head"),
                  kind=AW.kind_name(AW.attention_kind(info)), sharing=AW.sharing(info.n_heads, info.n_kv_heads),
                  windows=windows)


def layer_table(info, snap) -> pd.DataFrame:
    """Per layer: its kind, the tokens it holds, bytes measured from its tensors and the formula's bytes."""
    f = getattr(info, "arch", None)
    formula = layer_bytes_formula(info, snap.tokens)
    rows = []
    for i, measured in enumerate(snap.layer_bytes):
        w = f.windows[i] if f is not None else None
        rows.append({"layer": i, "kind": f"sliding (window {w})" if w else "global",
                     "tokens held": snap.layer_tokens[i] if i < len(snap.layer_tokens) else None,
                     "measured bytes": measured, "formula bytes": formula[i] if i < len(formula) else None})
    return pd.DataFrame(rows)


def size_metrics(rc: RunCache) -> list[tuple]:
    """(label, value, help) for the measured / formula / agreement metrics."""
    return [("Measured after the last step", f"{rc.last.kv_bytes:,} B", "Summed over the real cache tensors"),
            (f"Formula at {rc.last.kv_tokens} tokens", f"{rc.formula_bytes[-1]:,} B", None),
            ("Steps where they agree", f"{sum(rc.equal)} of {len(rc.equal)}", None)]


def steps_table(tr, rc: RunCache) -> pd.DataFrame:
    return pd.DataFrame([{"step": s.index, "phase": s.phase, "token chosen": visible(s.token),
                          "tokens cached": s.kv_tokens, "measured (bytes)": s.kv_bytes,
                          "formula (bytes)": f, "equal": e}
                         for s, f, e in zip(tr.steps, rc.formula_bytes, rc.equal)])


def no_cache_text(rc: RunCache) -> str:
    return lesson("kv_cache", "no cache", fed=rc.fed, without=rc.without, ratio=rc.without / max(1, rc.fed))


# ---------------------------------------------------------------- the calculator

@dataclass(frozen=True)
class Calc:
    """The calculator's choices and the memory budget they give."""
    name: str
    p: kp.Preset
    context: int
    batch: int
    kv_dtype: str
    w_dtype: str
    b: kp.Budget

    @property
    def bits(self) -> int:
        return kp.DTYPE_BITS[self.kv_dtype]


def calc_formula(c: Calc) -> str:
    p, b = c.p, c.b
    if p.is_mla:
        return lesson("kv_cache", "formula mla", model=c.name, rank=p.kv_lora_rank, rope=p.qk_rope_head_dim,
                      heads=p.n_heads, layers=p.n_layers, bytes=c.bits / 8, per_token=b.kv_per_token)
    return lesson("kv_cache", "formula kv", model=c.name, attention=p.attention, layers=p.n_layers,
                  kv_heads=p.n_kv_heads, head_dim=p.head_dim, bytes=c.bits / 8, dtype=c.kv_dtype,
                  per_token=b.kv_per_token)


def budget_metrics(c: Calc) -> list[tuple[str, str]]:
    b = c.b
    return [("KV per token", fmt_bytes(b.kv_per_token)),
            (f"KV for {c.batch} \u00d7 {c.context:,} tokens", fmt_bytes(b.kv_total)),
            (f"Weights ({c.p.n_params / 1e9:,.2f} B params, {c.w_dtype})", fmt_bytes(b.weights)),
            ("Weights + KV", fmt_bytes(b.total))]


def fit_table(c: Calc) -> pd.DataFrame:
    """Whether weights + cache fit on each common GPU size, and how many cached tokens would."""
    b, fit = c.b, []
    for gpu, tokens in b.gpu_fit_tokens:
        if b.weights > gpu * kp.GB:
            verdict = "the weights alone do not fit"
        else:
            verdict = (f"fits; room for {tokens:,} cached tokens in all" if b.total <= gpu * kp.GB else
                       f"does not fit: room for only {tokens:,} cached tokens ({tokens // max(1, c.batch):,} per sequence)")
        fit.append({"GPU memory": f"{gpu} GB", "this setup": verdict})
    return pd.DataFrame(fit)


def sweep_of(c: Calc) -> tuple[list[int], list[int]]:
    """Context lengths 512 to 128K (and the chosen one) and the whole batch's cache bytes at each."""
    sweep = sorted({2**k for k in range(9, 18)} | {int(c.context)})
    return sweep, [kp.kv_bytes_total(c.p, t, int(c.batch), c.bits) for t in sweep]


def mistake() -> str:
    """Llama-3-70B's cache counted over all query heads, against the KV heads it really caches."""
    llama70 = kp.preset("Llama-3-70B")
    right, wrong = kp.kv_bytes_per_token(llama70, 16), kp.kv_bytes_mistaken(llama70, 16)
    return lesson("kv_cache", "mistake", heads=llama70.n_heads, kv_heads=llama70.n_kv_heads, wrong=wrong,
                  wrong_size=fmt_bytes(wrong), times=wrong // right, right=right, right_size=fmt_bytes(right),
                  right_128k=fmt_bytes(right * 131072), wrong_128k=fmt_bytes(wrong * 131072))


@dataclass(frozen=True)
class Variants:
    rows: list  # kp.AttentionVariant: MHA, GQA, MQA, MLA
    question: str
    answer: str
    caption: str


def variants(c: Calc) -> Variants:
    """The chosen model's cache under MHA, GQA, MQA and MLA, and the MQA question about it."""
    rows = kp.attention_variants(c.p, c.bits)
    vk = {v.kind: v for v in rows}
    own = next(v for v in rows if v.is_model)
    mla_note = "" if c.p.is_mla else lesson("kv_cache", "variants mla sizing") + " "
    return Variants(rows, lesson("kv_cache", "try variants", model=c.name, heads=c.p.n_heads, own=own.kind),
                    lesson("kv_cache", "answer variants", mqa=fmt_bytes(vk["MQA"].bytes_per_token),
                           own_size=fmt_bytes(own.bytes_per_token),
                           times=own.bytes_per_token / vk["MQA"].bytes_per_token,
                           mla=fmt_bytes(vk["MLA"].bytes_per_token)),
                    lesson("kv_cache", "variants caption", dtype=c.kv_dtype, model=c.name, mla_note=mla_note))


def presets_table() -> pd.DataFrame:
    return pd.DataFrame([{
        "model": q.name, "attention": q.attention, "layers": q.n_layers, "query heads": q.n_heads,
        "KV heads": "latent" if q.is_mla else str(q.n_kv_heads), "head_dim": q.head_dim, "hidden": q.hidden_size,
        "parameters": f"{q.n_params / 1e9:,.2f} B", "weights dtype": q.weights_dtype,
        "KV bytes per token": kp.kv_bytes_per_token(q, 16), "KV per token": fmt_bytes(kp.kv_bytes_per_token(q, 16)),
        "source": q.hf_id} for q in kp.load_presets()])


def static_cache_note(info, tr) -> str | None:
    """Compiled mode: what the static cache of this run reserved (derived) against what it filled (measured)."""
    from engine.core.compile_record import cache_length

    if tr.engine_mode != Mode.COMPILED:
        return None
    length = cache_length(len(tr.prompt_ids) + tr.max_new_tokens, info.max_positions)
    return (f":material/info: Compiled mode: this run's decode steps wrote into a static cache that holds its whole "
            f"length, {length:,} positions ({fmt_bytes(kv_bytes_for(info, length))} by the formula: derived), from "
            "the first token on. The bytes measured below count the positions filled so far, which is what the "
            "formula counts; the cache tensors shown in section 1 are the eager loop's growing cache.")
