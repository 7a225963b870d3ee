"""Shared look for every chart: readable on a projector, titled, labelled with units, captioned."""
from __future__ import annotations

import plotly.graph_objects as go

FONT = dict(size=15)
COLORS = dict(primary="#1f77b4", accent="#d62728", good="#2ca02c", muted="#9aa4b1", warn="#ff7f0e")
KINDS = {
    "measured": "Measured on this machine",
    "model": "Real values from the model",
    "derived": "Derived from a formula",
    "illustrative": "Illustrative",
}


def style(fig: go.Figure, title: str, x: str, y: str, height: int = 420) -> go.Figure:
    """Title, axis titles (with units) and a projector-friendly template."""
    fig.update_layout(
        title=dict(text=title, font=dict(size=19)), template="plotly_white", font=FONT, height=height,
        margin=dict(l=60, r=20, t=60, b=55), xaxis_title=x, yaxis_title=y,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
    )
    return fig


def caption(kind: str, text: str) -> str:
    """'<kind>: <text>', where kind says whether numbers are measured, real model values, derived or illustrative."""
    return f"**{KINDS[kind]}.** {text}"
