"""Shared look for every chart: readable on a projector, titled, labelled with units, captioned."""
from __future__ import annotations

import math

import unicodedata

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from ui.frame.html import plotly_text, visible

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


def whole_ticks(fig: go.Figure, n: int, most: int = 30) -> go.Figure:
    """A tick at every whole number on the x axis of ``n`` positions or steps (up to ``most``): plotly's own ticks
    fall on halves (-0.5, 0.5, 1.5) when there are only a few; past ``most`` its ticks are whole anyway."""
    fig.update_xaxes(dtick=1 if n <= most else None)
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


def percent_text(p: float) -> str:
    """A probability as a percentage ("5.9%"), and in scientific notation below 0.1% ("1.4e-04"): at one decimal a
    rare token drawn at a high temperature read "p = 0.0%", as if it could not be drawn."""
    p = float(p)
    return f"{p:.1%}" if p >= 0.001 or p == 0 else f"{p:.1e}"


# ---- helpers and figures more than one topic draws (a topic imports no other topic's figures)
# Marks and letters that Unicode makes default-ignorable (drawn as nothing): variation selectors (U+FE0F after ❤ asks
# for the emoji style; alone in a token it left a blank chip), the combining grapheme joiner, Hangul fillers, Khmer
# inherent vowels, Mongolian free variation selectors. Format characters (Cf) are found by their category.
IGNORABLE = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
             (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF))


def invisible(ch: str) -> bool:
    """Whether a character draws nothing on its own (or moves the line), so a label must name it: format and
    control characters, separators other than the space, default-ignorable marks."""
    cat = unicodedata.category(ch)
    return (cat in ("Cf", "Cc", "Zl", "Zp") or (cat == "Zs" and ch != " ")
            or any(lo <= ord(ch) <= hi for lo, hi in IGNORABLE))


def code_point(ch: str) -> str:
    return f"\u27e8U+{ord(ch):04X}\u27e9"


def token_label(text: str) -> str:
    """Token text for display: whitespace made visible, invisible characters (zero-width space, joiners,
    direction marks, control characters, variation selectors) named by code point so they cannot vanish or reorder
    the line."""
    return "".join(code_point(ch) if invisible(ch) else ch for ch in visible(text))


def invisible_names(text: str) -> list[str]:
    """"⟨U+FE0F⟩ variation selector-16" for each distinct invisible character of ``text``, in order."""
    seen = dict.fromkeys(ch for ch in visible(text) if invisible(ch))
    return [f"{code_point(ch)} {unicodedata.name(ch, 'unnamed').lower()}" for ch in seen]


def short_label(tok: str, limit: int = 14) -> str:
    """A token as a short, visible, unambiguous axis label."""
    v = visible(tok)
    return v if len(v) <= limit else v[: limit - 1] + "\u2026"


def unique_labels(tokens) -> list[str]:
    """Axis categories must be distinct: two tokens that look alike get their rank appended."""
    seen: dict[str, int] = {}
    out = []
    for t in tokens:
        lab = short_label(t)
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out


def legend_below(fig: go.Figure, rows: int = 1) -> go.Figure:
    """Legend under the plot, so it never sits on the title (in a half-width column it wraps to 2-3 lines)."""
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0.0),
                      margin=dict(b=80 + 22 * rows))
    return fig


def step_times_bar(steps) -> go.Figure:
    xs = [s.index for s in steps]
    ms = [s.seconds * 1000 for s in steps]
    colors = [COLORS["warn"] if s.phase == "prefill" else COLORS["primary"] for s in steps]
    batch = max((getattr(s, "batch_size", 1) for s in steps), default=1)
    fig = go.Figure(go.Bar(x=xs, y=ms, marker_color=colors,
                           hovertext=[f"{s.phase}: {s.tokens_in} token(s) in, chose {plotly_text(repr(s.token))}"
                                      + (f"; measured in a batch of {s.batch_size}" if s.batch_size > 1 else "")
                                      for s in steps]))
    title = "Time of each forward pass (orange: prefill over the whole prompt; blue: one decode step)"
    if batch > 1:
        title = f"Time of each forward pass, measured in a batch of up to {batch} requests (orange: prefill; blue: decode)"
    return style(fig, title, "step (0 = prefill)", "wall time (ms)", height=320)


def progress_lines(run) -> go.Figure:
    """Tokens generated against time for both lanes, from the per-pass timings of this run. When the lanes did the
    same work (``run.same_work``: nothing drafted), the title and a note on the plot say their gap is noise, and
    the speculative line is drawn in the plain lane's colour, dashed: no lane is shown winning."""
    pt = np.cumsum(run.plain_step_seconds)
    st_ = run.spec_prefill_seconds + np.cumsum([r.draft_seconds + r.verify_seconds for r in run.rounds])
    s_tokens = 1 + np.cumsum([len(r.emitted) for r in run.rounds])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=np.r_[0, pt], y=np.arange(len(pt) + 1), mode="lines+markers", name="plain decoding",
                             line=dict(color=COLORS["muted"], width=3, shape="hv"), marker=dict(size=5)))
    same = bool(getattr(run, "same_work", False))
    fig.add_trace(go.Scatter(x=np.r_[0, run.spec_prefill_seconds, st_],
                             y=np.r_[0, 1, np.minimum(s_tokens, len(run.spec_ids))], mode="lines+markers",
                             name=plotly_text(f"speculative ({run.drafter}, k={run.k})") + (": nothing drafted" if same else ""),
                             line=dict(color=COLORS["muted"] if same else COLORS["good"], width=3, shape="hv",
                                       dash="dash" if same else None), marker=dict(size=6)))
    title = "The race: tokens written against time"
    if same:
        gap = abs(run.plain_seconds - run.spec_seconds)
        title = "No race: both lanes did the same work, so the gap between them is noise"
        fig.add_annotation(xref="paper", yref="paper", x=0.01, y=0.98, xanchor="left", yanchor="top",
                           showarrow=False, align="left", bgcolor="rgba(255,255,255,0.85)",
                           text=f"same passes, same tokens: the {gap:.2f} s gap is noise, not a winner")
    return legend_below(style(fig, title, "time since start (s)", "tokens generated", height=380))
