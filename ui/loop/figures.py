"""Figures for the home page (no st.* calls here)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.frame.archwords import STREAM_AXIS, stream_labels
from ui.frame.figures import COLORS, percent_text, style
from ui.frame.html import visible


def top_probs_bar(tokens, probs, chosen: str | None, title: str) -> go.Figure:
    labels = [repr(visible(t))[1:-1] for t in tokens]
    colors = [COLORS["accent"] if t == chosen else COLORS["primary"] for t in tokens]
    fig = go.Figure(go.Bar(x=list(probs)[::-1], y=labels[::-1], orientation="h", marker_color=colors[::-1],
                           text=[percent_text(p) for p in list(probs)[::-1]], textposition="auto"))
    style(fig, title, "probability (0 to 1)", "next token", height=300)
    fig.update_xaxes(range=[0, max(1e-9, max(probs)) * 1.1])
    return fig


def residual_norm_line(norms: np.ndarray, token: str) -> go.Figure:
    fig = go.Figure(go.Scatter(x=stream_labels(norms.shape[0]), y=norms, mode="lines+markers",
                               line_color=COLORS["primary"]))
    return style(fig, f"Residual stream norm at the last position ({visible(token)!r}) after each layer",
                 STREAM_AXIS, "L2 norm (unitless)", height=320)


