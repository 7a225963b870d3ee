"""Figures for "Fewer bytes, faster decode" (no st.* calls). Input: engine.precision.experiment records."""
from __future__ import annotations

import plotly.graph_objects as go

from engine.precision.experiment import PrecisionComparison
from ui.frame.figures import COLORS, style


def decode_vs_floor(cmp: PrecisionComparison) -> go.Figure:
    """Per precision: the measured decode step (median, whisker min..max) beside the floor for its weight bytes."""
    names = [r.precision for r in cmp.rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=names, y=[r.floor_ms for r in cmp.rows], name="floor: weight bytes / bandwidth (derived)",
        marker_color=COLORS["muted"], text=[f"{r.decode_weight_bytes / 1e6:.0f} MB<br>{r.floor_ms:.1f} ms"
                                            for r in cmp.rows],
        textposition="outside", hovertemplate="%{x}: floor %{y:.1f} ms<extra></extra>"))
    fig.add_trace(go.Bar(
        x=names, y=[r.decode_ms.median for r in cmp.rows], name="decode step (measured median)",
        marker_color=COLORS["primary"],
        error_y=dict(type="data", symmetric=False, thickness=1.5,
                     array=[r.decode_ms.hi - r.decode_ms.median for r in cmp.rows],
                     arrayminus=[r.decode_ms.median - r.decode_ms.lo for r in cmp.rows]),
        text=[f"{r.decode_ms.median:.1f} ms" + ("" if r.precision == cmp.reference else
                                                f"<br>{cmp.speedup(r.precision):.2f}\u00d7")
              for r in cmp.rows],
        # inside the bar: above it, the label sat on the whisker (the run's range) and hid it
        textposition="inside", insidetextanchor="middle", textfont=dict(color="white"),
        hovertemplate="%{x}: decode step %{y:.1f} ms<extra></extra>"))
    top = max([r.decode_ms.hi for r in cmp.rows] + [r.floor_ms for r in cmp.rows if r.floor_ms == r.floor_ms])
    style(fig, f"Decode step per precision vs the floor for its bytes ({cmp.read_gb_s:.1f} GB/s measured)",
          "precision of the weights", "time per decode step (ms)", height=420)
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, top * 1.35])
    return fig


def bytes_vs_speed(cmp: PrecisionComparison) -> go.Figure:
    """The prediction test: bytes read per step relative to float32 vs time per step relative to float32."""
    ref = cmp.row(cmp.reference)
    names = [r.precision for r in cmp.rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[r.decode_weight_bytes / ref.decode_weight_bytes for r in cmp.rows],
                         name="weight bytes per step (\u00f7 float32)", marker_color=COLORS["muted"],
                         text=[f"{r.decode_weight_bytes / ref.decode_weight_bytes:.2f}" for r in cmp.rows],
                         textposition="outside"))
    fig.add_trace(go.Bar(x=names, y=[r.decode_ms.median / ref.decode_ms.median for r in cmp.rows],
                         name="decode time per step (\u00f7 float32, measured)", marker_color=COLORS["primary"],
                         text=[f"{r.decode_ms.median / ref.decode_ms.median:.2f}" for r in cmp.rows],
                         textposition="outside"))
    style(fig, "If time followed bytes, each pair of bars would be equal", "precision of the weights",
          "relative to float32 (float32 = 1)", height=380)
    fig.update_layout(barmode="group")
    top = max(max(r.decode_weight_bytes / ref.decode_weight_bytes, r.decode_ms.median / ref.decode_ms.median)
              for r in cmp.rows)
    fig.update_yaxes(range=[0, top * 1.3])
    return fig
