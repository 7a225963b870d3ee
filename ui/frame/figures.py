"""Shared look for every chart: readable on a projector, titled, labelled with units, captioned."""
from __future__ import annotations

import math

import plotly.graph_objects as go
import plotly.io as pio

INK = "#1e293b"  # dark slate: tick labels and axis titles readable from the back of a room (not plotly's grey)
TICK_SIZE = 15  # px; never under MIN_TICK_SIZE
MIN_TICK_SIZE = 14
FONT = dict(size=15, color=INK)
COLORS = dict(primary="#1f77b4", accent="#d62728", good="#2ca02c", muted="#9aa4b1", warn="#ff7f0e")
KINDS = {
    "measured": "Measured on this machine",
    "recorded": "Measured on the machine that recorded it",  # a saved run opened here (ui/record)
    "compared": "Measured there and here",  # a saved run beside its re-run on this machine
    "model": "Real values from the model",
    "derived": "Derived from a formula",
    "illustrative": "Illustrative",
    "counted": "Counted from this class's picks",  # the class tally (ui/frame/tally.py)
}

# Every figure starts from plotly's white template, set once as plotly's default: a new figure takes it as it is built,
# already validated. Passing template="plotly_white" to each figure's update_layout validated a copy of the whole
# template every time: about a third of styling a chart (47 ms -> 30 ms per figure, rebuilt on every rerun).
pio.templates.default = "plotly_white"


def style(fig: go.Figure, title: str, x: str, y: str, height: int = 420) -> go.Figure:
    """Title, axis titles (with units) on the projector-friendly template (the default, above)."""
    fig.update_layout(
        title=dict(text=title, font=dict(size=19)), font=FONT, height=height,
        margin=dict(l=60, r=20, t=60, b=55), xaxis_title=x, yaxis_title=y,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
    )
    return fig


def _positive(values) -> list[float]:
    out = []
    for v in values if values is not None else ():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if f > 0 and math.isfinite(f):
            out.append(f)
    return out


def _decades(fig: go.Figure, letter: str, name: str) -> float:
    """How many powers of ten the data on one axis spans (0 when unknown)."""
    ref = letter + name[len(letter) + 4:]  # "yaxis2" -> "y2"
    vals = []
    for t in fig.data:
        if (getattr(t, f"{letter}axis", None) or letter) == ref and hasattr(t, letter):
            vals += _positive(getattr(t, letter))
    return math.log10(max(vals) / min(vals)) if vals else 0.0


def readable(fig: go.Figure, size: int = TICK_SIZE) -> go.Figure:
    """Every axis's tick labels at least ``size`` px (never under MIN_TICK_SIZE) and dark, axis titles and colour
    bars too, whatever a builder or the Streamlit chart theme (11 px light grey) would give. A log axis whose data
    spans a power of ten or more is labelled only at powers of ten, without minor ticks (plotly's 2 and 5
    between decades clutter it); one with its own tick values keeps them. Called on every figure shown
    (ui.frame.layout.chart), so a new builder cannot forget it."""
    size = max(size, MIN_TICK_SIZE)

    def fix(axis, letter):
        now = axis.tickfont.size if axis.tickfont and axis.tickfont.size else 0
        axis.update(tickfont=dict(size=max(now, size), color=INK), title_font=dict(color=INK),
                    minor=dict(ticks="", showgrid=False))
        if axis.type == "log" and axis.tickvals is None:
            name = axis.plotly_name
            if _decades(fig, letter, name) >= 1:
                axis.update(dtick=1)

    fig.for_each_xaxis(lambda a: fix(a, "x"))
    fig.for_each_yaxis(lambda a: fix(a, "y"))
    for t in fig.data:
        bar = getattr(t, "colorbar", None)
        if bar is not None:
            now = bar.tickfont.size if bar.tickfont and bar.tickfont.size else 0
            t.update(colorbar=dict(tickfont=dict(size=max(now, size), color=INK), title_font=dict(color=INK)))
    fig.update_layout(font_color=INK, legend_font_color=INK)
    return fig


def caption(kind: str, text: str) -> str:
    """'<kind>: <text>', where kind says whether numbers are measured, real model values, derived or illustrative."""
    return f"**{KINDS[kind]}.** {text}"


def prob_text(p: float | None) -> str:
    """A probability as a table shows it: three decimals, and scientific notation below 0.001 (a rank-791 token's
    1.3e-05 printed as "0" at three or four decimals, which reads as impossible)."""
    if p is None:
        return ""
    p = float(p)
    return f"{p:.3f}" if p >= 0.001 or p == 0 else f"{p:.1e}"
