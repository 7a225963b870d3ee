"""Pure display values for the two-models page: tables with their "how" column, the chosen pair (no st.* here)."""
from __future__ import annotations

import pandas as pd

from engine.compare import analysis as C

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
                ok = "= formula" if p.measured == p.formula else f"formula {p.formula / 1e6:,.2f} MB"
                row[name] = f"{p.measured / 1e6:,.2f} MB (measured, {ok})"
            else:
                b = dict(derived.get(name, ())).get(n)
                row[name] = f"{b / 1e6:,.1f} MB (derived)" if b is not None else ""
        rows.append(row)
    return pd.DataFrame(rows)


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
        "Weights read per step (derived)": f"{steps[n].weights / 1e6:,.0f} MB",
        "of which the output head": f"{steps[n].head / 1e6:,.0f} MB",
        "KV read at this context (derived)": f"{steps[n].kv / 1e6:,.2f} MB",
        "Bandwidth floor (derived)": f"{floors[n]:,.1f} ms",
        "Measured / floor": f"{medians[n] / floors[n]:,.1f}x" if floors[n] == floors[n] and floors[n] > 0 else "",
    } for n in names])
