"""Pure display values for the two-models page: tables with their "how" column, the chosen pair (no st.* here)."""
from __future__ import annotations

import pandas as pd

from engine.compare import analysis as C
from engine.core import kv
from ui.frame import archwords as AW
from ui.frame.archwords import binary_bytes
from ui.frame.lessons import lesson

HOW = {"read": "read from the model", "counted": "counted (parameter tensors)", "measured": "measured",
       "derived": "derived (formula)"}


def facts_table(rows: list[C.FactRow], a: str, b: str) -> pd.DataFrame:
    return pd.DataFrame([{"Fact": r.fact, a: r.a, b: r.b, "Differs": "≠" if r.differs else "",
                          "How": HOW[r.how]} for r in rows])


def highlight_differences(df: pd.DataFrame):
    """A Styler that shades the rows whose two models differ."""
    def shade(row):
        return ["background-color: #fff3cd" if row["Differs"] else ""] * len(row)

    return df.style.apply(shade, axis=1)


def params_table(splits: dict[str, dict[str, int]]) -> pd.DataFrame:
    out = []
    for name, parts in splits.items():
        total = max(1, sum(parts.values()))
        out.append({"Model": name, **{p: f"{_count(parts[p])} ({parts[p] / total:.1%})" for p in C.PARTS
                                      if parts.get(p)}, "Total": _count(total)})
    return pd.DataFrame(out)


def _count(n: int) -> str:
    return f"{n / 1e6:,.1f} M" if n >= 1e6 else f"{n / 1e3:,.1f} K"


def kv_table(points: dict[str, list[C.KVPoint]], derived: dict[str, list[tuple[int, int]]]) -> pd.DataFrame:
    """One row per length: each model's KV bytes, measured (cache tensors) where it was run, else derived."""
    lengths = sorted({p.tokens for pts in points.values() for p in pts} | {t for d in derived.values() for t, _ in d})
    rows = []
    for n in lengths:
        row = {"Tokens": f"{n:,}"}
        for name, pts in points.items():
            p = next((p for p in pts if p.tokens == n), None)
            if p is not None:
                ok = "= formula" if p.measured == p.formula else f"formula {binary_bytes(p.formula)}"
                row[name] = f"{binary_bytes(p.measured)} (measured, {ok})"
            else:
                b = dict(derived.get(name, ())).get(n)
                row[name] = f"{binary_bytes(b)} (derived)" if b is not None else ""
        rows.append(row)
    return pd.DataFrame(rows)


def kv_growth_words(name: str, info) -> str:
    """How one model's cache grows per token, from its facts and the per-layer formula: every layer until its
    window is full, then only the layers that keep every token (the same numbers the measured points meet)."""
    f = info.arch
    below = kv.growth_at(info, 0)
    caps = [AW.held_cap(f, i) for i in range(f.n_blocks)] if f is not None else []
    local = [i for i, c in enumerate(caps) if c is not None]
    if not local:
        return lesson("compare", "kv grows", model=name, layers=AW.count(info.n_layers, "layer"), bytes=below,
                      limit=info.max_positions)
    keep = [i for i, c in enumerate(caps) if c is None]
    return lesson("compare", "kv grows windows", model=name, bytes=below, local=AW.count(len(local), "sliding layer"),
                  window=AW.window_words(f, local[0]), cap=min(caps[i] for i in local),
                  keep=f"{AW.count(len(keep), 'layer')} ({AW.layer_list(keep)})" if keep else "no layer",
                  after=kv.growth_past_windows(info), share=kv.growth_past_windows(info) / below)


def kv_per_layer_words(name: str, info) -> str:
    f = info.arch
    kvh, dim = (f.kv_heads[0], f.head_dim) if f is not None else (info.n_kv_heads, info.head_dim)
    return lesson("compare", "kv per layer", model=name, kv_heads=kvh, head_dim=dim, bpv=info.bytes_per_value,
                  bytes=kvh * 2 * dim * info.bytes_per_value)


def per_token(points: list[C.KVPoint]) -> tuple[float, float]:
    """Measured bytes each new token adds: (below the first window / at the end of the measured range), from
    the last two measured lengths of each range."""
    if len(points) < 2:
        return float("nan"), float("nan")
    first = (points[1].measured - points[0].measured) / max(1, points[1].tokens - points[0].tokens)
    last = (points[-1].measured - points[-2].measured) / max(1, points[-1].tokens - points[-2].tokens)
    return first, last


def decode_rows(names, medians: dict[str, float], steps: dict[str, C.StepBytes], floors: dict[str, float],
                head_share: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame([{
        "Model": n,
        "Decode step (measured, median)": f"{medians[n]:,.1f} ms",
        "Output head's share (measured)": f"{head_share[n]:.0%}",
        "Weights read per step (derived)": binary_bytes(steps[n].weights),
        "of which the output head": binary_bytes(steps[n].head),
        "KV read at this context (derived)": binary_bytes(steps[n].kv),
        "Bandwidth floor (derived)": f"{floors[n]:,.1f} ms",
        "Measured / floor": f"{medians[n] / floors[n]:,.1f}x" if floors[n] == floors[n] and floors[n] > 0 else "",
    } for n in names])
