"""Display values for the KV-cache page: the run's cache measured against the formula, the calculator's numbers
and tables, the common mistake and the attention variants (the page and its sections only lay them out)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.core.kv import kv_bytes_for, layer_bytes_formula
from engine.kv_cache import presets as kp
from engine.core.trace import StepRecord
from ui.frame.html import visible
from ui.kv_cache.figures import fmt_bytes
from ui.frame.lessons import lesson


@dataclass(frozen=True)
class RunCache:
    """This run's cache: measured after every step, and the formula 2 x layers x KV heads x head_dim x bytes."""
    per_token: int  # formula bytes one token adds
    last: StepRecord
    prompt: int  # tokens the prefill wrote
    formula_bytes: list  # formula at each step's cached tokens
    equal: list  # measured == formula, per step
    fed: int  # tokens fed through the model with the cache
    without: int  # tokens a loop without a cache would feed (the whole sequence at every step)

    @property
    def all_equal(self) -> bool:
        return all(self.equal)


def run_cache(info, tr) -> RunCache:
    formula = [kv_bytes_for(info, s.kv_tokens) for s in tr.steps]
    return RunCache(kv_bytes_for(info, 1), tr.steps[-1], tr.steps[0].kv_tokens, formula,
                    [s.kv_bytes == f for s, f in zip(tr.steps, formula)],
                    sum(s.tokens_in for s in tr.steps), sum(s.kv_tokens for s in tr.steps))


def what_you_see(info, rc: RunCache) -> str:
    group = info.n_heads // max(1, info.n_kv_heads)
    design = lesson("kv_cache", "design mha") if group == 1 else lesson("kv_cache", "design gqa", group=group)
    return lesson("kv_cache", "what you see", source=info.source, layers=info.n_layers, heads=info.n_heads,
                  kv_heads=info.n_kv_heads, design=design, tokens=rc.last.kv_tokens, size=fmt_bytes(rc.last.kv_bytes))


def _shape(info) -> dict:
    return dict(layers=info.n_layers, heads=info.n_heads, kv_heads=info.n_kv_heads, head_dim=info.head_dim,
                bpv=info.bytes_per_value, dtype=info.dtype)


def token_question(info, rc: RunCache) -> tuple[str, str]:
    """How many bytes each new token adds: the question and its answer."""
    v = _shape(info)
    return (lesson("kv_cache", "try token", **v),
            lesson("kv_cache", "answer token", per_token=rc.per_token, size=fmt_bytes(rc.per_token), **v))


def holds_text(info, rc: RunCache) -> str:
    return lesson("kv_cache", "holds", tokens=rc.last.kv_tokens, tensors=2 * info.n_layers, **_shape(info))


def heatmap_caption(info, which: str, snap, rc: RunCache, layer: int | None = None) -> str:
    rope = lesson("kv_cache", "heatmap rope") + " " if which == "keys" and info.position_encoding == "rope" else ""
    f = getattr(info, "arch", None)
    if f is not None and layer is not None and f.windows[layer] and snap.layer_tokens:
        rope += (f"This layer has a sliding window of {f.windows[layer]}: it holds only the newest "
                 f"{snap.layer_tokens[layer]} tokens; older columns are blank because they were dropped. ")
    check = " \u2714" if snap.measured_bytes == rc.last.kv_bytes else f" (run: {rc.last.kv_bytes:,})"
    return lesson("kv_cache", "heatmap caption", which=which, head_dim=info.head_dim, rope=rope,
                  size=fmt_bytes(snap.measured_bytes), bytes=snap.measured_bytes, check=check)


def formula_text(info, rc: RunCache) -> str:
    text = lesson("kv_cache", "formula", per_token=rc.per_token, **_shape(info))
    f = getattr(info, "arch", None)
    if f is not None and (f.has_windows or len(set(f.kv_heads)) > 1):
        t = rc.last.kv_tokens
        parts = [f"layer {i}: 2 × {f.kv_heads[i]} × {f.head_dim} × {f.held_tokens(i, t)} × "
                 f"{info.bytes_per_value} = {b:,} B" + (f" (sliding window {f.windows[i]}: holds at most "
                                                         f"{f.windows[i] - 1} past tokens)" if f.windows[i] else "")
                 for i, b in enumerate(layer_bytes_formula(info, t))]
        text += ("\n\nThis model's layers do not all hold the same tokens, so the formula is summed per layer type. "
                 f"At {t} tokens: " + "; ".join(parts) + f". Total {sum(layer_bytes_formula(info, t)):,} B.")
    return text


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
    from engine.core.compiled import cache_length

    if tr.engine_mode != "compiled":
        return None
    length = cache_length(len(tr.prompt_ids) + tr.max_new_tokens, info.max_positions)
    return (f":material/info: Compiled mode: this run's decode steps wrote into a static cache that holds its whole "
            f"length, {length:,} positions ({fmt_bytes(kv_bytes_for(info, length))} by the formula: derived), from "
            "the first token on. The bytes measured below count the positions filled so far, which is what the "
            "formula counts; the cache tensors shown in section 1 are the eager loop's growing cache.")
