"""The class's picks for one question as a bar chart (pure plotly: no Streamlit), for the teacher's class view and
the presenter view."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from ui.frame.figures import COLORS, style
from ui.frame.questions import Question

WRAP = 38  # characters per line of a choice's label


def _wrap(text: str) -> str:
    words, lines, line = html.escape(text).split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > WRAP:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "<br>".join(lines + [line])


def tally_chart(q: Question, counts: dict[str, int], answer: str | None = None, height: int = 300) -> go.Figure:
    """One horizontal bar per choice (in the lesson's order, top to bottom), its length the picks counted; after
    the reveal ``answer``'s bar is green and the others grey. Choice texts are the lesson file's, escaped."""
    keys = list(q.keys)
    n = [int(counts.get(k, 0)) for k in keys]
    colors = [COLORS["primary"] if answer is None else COLORS["good"] if k == answer else COLORS["muted"]
              for k in keys]
    fig = go.Figure(go.Bar(x=n, y=[_wrap(q.text_of(k)) for k in keys], orientation="h", marker_color=colors,
                           text=n, textposition="auto", hovertemplate="%{x} picks<extra></extra>"))
    total = sum(n)
    # short: the presenter's box is a third of a projector's width, and a longer title lost its last letters there
    style(fig, f"The class's picks: {total}", "picks (students)", "", height)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(rangemode="tozero", dtick=max(1, -(-max(n + [1]) // 6)))
    fig.update_layout(margin=dict(l=20, r=20, t=60, b=55))
    return fig
