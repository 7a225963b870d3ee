"""Pure plotly builders for the two-models page (no st.* here)."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from engine.compare.analysis import PARTS
from engine.models import catalog
from ui.frame.figures import COLORS, style
from ui.frame.html import visible

MIB = 2**20  # cache sizes in binary units, as on the attention and KV-cache pages (ui.frame.archwords)


def _esc(text: str) -> str:
    """Plotly renders a little HTML in labels: model names and tokens are shown literally."""
    return html.escape(visible(str(text)), quote=False)


PART_COLORS = {"embedding": COLORS["accent"], "attention": COLORS["primary"], "MLP": COLORS["good"],
               "norms": COLORS["warn"], "other": COLORS["muted"]}
STAGE_COLORS = {"embedding": "#8c564b", "attention": COLORS["primary"], "MLP": COLORS["good"],
                "norms": COLORS["warn"], "output projection": COLORS["accent"], "sampling": "#9467bd",
                "other": COLORS["muted"]}


def params_bar(splits: dict[str, dict[str, int]]) -> go.Figure:
    """One horizontal stacked bar per model: millions of parameters per part, each part's share written in it."""
    fig = go.Figure()
    names = list(splits)
    for part in PARTS:
        vals = [splits[n].get(part, 0) / 1e6 for n in names]
        if not any(vals):
            continue
        shares = [splits[n].get(part, 0) / max(1, sum(splits[n].values())) for n in names]
        fig.add_bar(y=[_esc(n) for n in names], x=vals, name=part, orientation="h",
                    marker_color=PART_COLORS[part], text=[f"{s:.0%}" if s >= 0.04 else "" for s in shares],
                    textposition="inside", hovertemplate=f"{part}: %{{x:.1f}} M<extra></extra>")
    fig.update_layout(barmode="stack")
    return style(fig, "Where the parameters are", "parameters (millions)", "model", height=300)


def kv_lines(points: dict[str, list], derived: dict[str, list[tuple[int, int]]]) -> go.Figure:
    """KV cache MiB against tokens fed: measured points (markers) and the formula past them (dashed)."""
    fig = go.Figure()
    palette = [COLORS["primary"], COLORS["accent"], COLORS["good"], COLORS["warn"]]
    fixed = dict(zip(catalog.names(), palette[:2]))  # the two packaged models: the same colour on every page
    for i, (name, pts) in enumerate(points.items()):
        c = fixed.get(name, palette[(i + 2) % len(palette)])
        fig.add_scatter(x=[p.tokens for p in pts], y=[p.measured / MIB for p in pts], mode="lines+markers",
                        name=f"{_esc(name)} (measured)", line=dict(color=c, width=3), marker=dict(size=9))
        more = derived.get(name) or []
        if more:
            xs = [pts[-1].tokens] + [t for t, _ in more] if pts else [t for t, _ in more]
            ys = ([pts[-1].measured / MIB] if pts else []) + [b / MIB for _, b in more]
            fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=f"{_esc(name)} (formula)",
                            line=dict(color=c, dash="dash"), marker=dict(size=7, symbol="circle-open"))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return style(fig, "KV cache size as the context grows", "tokens in the context (log scale)",
                 "KV cache (MiB, log scale)")


def decode_bars(stage_ms: dict[str, dict[str, float]], floors: dict[str, float]) -> go.Figure:
    """One stacked bar per model: the median ms of each stage of one decode step; a marker at the bandwidth
    floor (bytes read / measured bandwidth)."""
    fig = go.Figure()
    names = list(stage_ms)
    stages = [s for s in STAGE_COLORS if any(stage_ms[n].get(s, 0) > 0 for n in names)]
    for s in stages:
        fig.add_bar(x=[_esc(n) for n in names], y=[stage_ms[n].get(s, 0.0) for n in names], name=s,
                    marker_color=STAGE_COLORS[s], hovertemplate=f"{s}: %{{y:.1f}} ms<extra></extra>")
    fig.add_scatter(x=[_esc(n) for n in names], y=[floors.get(n, float("nan")) for n in names],
                    mode="markers", name="bandwidth floor (derived)",
                    marker=dict(symbol="line-ew-open", size=60, color="black", line=dict(width=4, color="black")))
    fig.update_layout(barmode="stack")
    return style(fig, "One decode step, stage by stage", "model", "milliseconds per token")


def top5_bar(name: str, tokens: tuple[str, ...], probs: tuple[float, ...]) -> go.Figure:
    labels = list(tokens)
    fig = go.Figure(go.Bar(x=list(probs)[::-1], y=[_esc(t) for t in labels][::-1], orientation="h",
                           marker_color=COLORS["primary"], text=[f"{p:.1%}" for p in probs][::-1],
                           textposition="auto"))
    return style(fig, f"{_esc(name)}: next token", "probability", "token", height=300)
