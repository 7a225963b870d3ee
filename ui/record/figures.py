"""Figures of a saved run beside its re-run here (no st.* calls here)."""
from __future__ import annotations

import plotly.graph_objects as go

from ui.frame.figures import COLORS, MIN_TICK_SIZE, style
from ui.frame.html import plotly_text

SHOWN_TIMINGS = 24  # the first timings drawn (a long race has a bar per round)


def timings_chart(timings, recorded_where: str) -> go.Figure:
    """Every timing, recorded and here, side by side (ms), the ratio here / recorded written on each pair.
    ``recorded_where`` comes from the record (its machine's name): drawn as plain text."""
    ts = list(timings)[:SHOWN_TIMINGS]
    names = [t.what for t in ts]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[t.recorded_s * 1000 for t in ts], name=plotly_text(f"recorded on {recorded_where}"),
                         marker_color=COLORS["muted"]))
    fig.add_trace(go.Bar(x=names, y=[t.here_s * 1000 for t in ts], name="measured here, now",
                         marker_color=COLORS["primary"],
                         text=[f"x{t.ratio:.2f}" if t.ratio == t.ratio else "" for t in ts], textposition="outside",
                         # full size, upright above each pair: plotly shrank them to a narrow bar's width (tiny)
                         textfont=dict(size=MIN_TICK_SIZE), constraintext="none", textangle=0, cliponaxis=False,
                         hovertemplate="%{x}: %{y:.1f} ms here, %{text} the recorded time<extra></extra>"))
    style(fig, "Every timing, recorded there and measured here (the label: here / recorded)", "what was timed",
          "wall time (ms)", height=440)
    fig.update_layout(barmode="group")
    fig.update_xaxes(tickangle=-35)
    return fig


def logit_chart(per_step, tolerance: float) -> go.Figure:
    """The largest logit difference at each step against the tolerance this comparison allows."""
    xs = list(range(len(per_step)))
    fig = go.Figure(go.Bar(x=xs, y=list(per_step), marker_color=[COLORS["accent"] if d > tolerance else COLORS["good"]
                                                                 for d in per_step], name="largest difference",
                           hovertemplate="step %{x}: %{y:.3g}<extra></extra>"))
    fig.add_hline(y=tolerance, line_dash="dash", line_color=COLORS["accent"],
                  annotation_text=f"tolerance {tolerance:g}", annotation_position="top left")
    style(fig, "Largest logit difference at each step, recorded vs here (same token ids, teacher-forced)",
          "step (0 = prefill)", "|recorded - here| (logit units)", height=360)
    fig.update_yaxes(range=[0, max([tolerance * 1.3, *per_step]) * 1.1])
    return fig
