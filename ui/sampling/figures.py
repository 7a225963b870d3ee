"""Figures for the logits & sampling page (no st.* calls here)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.frame.figures import COLORS, percent_text, short_label, style, unique_labels, whole_ticks
from ui.frame.html import visible

REMOVED = {"top-k": COLORS["muted"], "top-p": COLORS["warn"], "min-p": "#9467bd"}


def removed_by(st) -> list[str]:
    """For each shown token, the first filter that removed it ('' = kept)."""
    out = []
    for k, p, m in zip(st.keep_top_k, st.keep_top_p, st.keep_min_p):
        out.append("" if m else "top-k" if not k else "top-p" if not p else "min-p")
    return out


def _panels(n: int, gap: float = 0.035) -> list[tuple[float, float]]:
    w = (1.0 - gap * (n - 1)) / n
    return [(i * (w + gap), i * (w + gap) + w) for i in range(n)]


BAR_TEXT = {False: (15, 30), True: (19, 40)}  # (numbers in the bars, px per token row): normal / projector


def stage_bars(st, tokens, chosen_id: int, large: bool = False) -> go.Figure:
    """The top tokens at each stage: raw logits, logits / T, softmax with the filters, final probabilities.
    Four panels side by side sharing the token axis (layout built directly: make_subplots is slow). Every token
    is labelled (plotly would drop every other label where rows are close) and the numbers in the bars keep their
    size (plotly would shrink them to a bar's thickness, ~9 px): each row is tall enough for both. ``large``: the
    presenter view's sizes."""
    s = st.settings
    text_px, row_px = BAR_TEXT[large]
    ys = unique_labels(tokens)[::-1]  # most likely at the top
    rev = lambda a: list(np.asarray(a)[::-1])  # noqa: E731
    why = rev(removed_by(st))
    probs, final, ids = rev(st.probs_scaled), rev(st.final), rev(st.ids)
    bar = dict(type="bar", orientation="h", y=ys, textposition="auto", constraintext="none", cliponaxis=False,
               textfont=dict(size=text_px))
    data = [
        dict(bar, x=rev(st.logits), xaxis="x", marker_color=COLORS["primary"], showlegend=False,
             text=[f"{v:.2f}" for v in rev(st.logits)], name="raw logit"),
        dict(bar, x=rev(st.scaled), xaxis="x2", marker_color=COLORS["primary"], showlegend=False,
             text=[f"{v:.2f}" for v in rev(st.scaled)], name="logit / T"),
    ]
    floor = 0.04 * max(1e-9, float(np.max(st.probs_scaled)))  # a removed token never shrinks to nothing
    for name, color in [("kept", COLORS["primary"]), *REMOVED.items()]:
        want = "" if name == "kept" else name
        xs = [p if w == want else None for p, w in zip(probs, why)]
        if not any(x is not None for x in xs):
            continue
        if name == "kept":
            data.append(dict(bar, x=xs, xaxis="x3", marker_color=color, textposition="none", name="kept"))
        else:  # outlined and hatched at its probability before the filter (at least a visible stub)
            data.append(dict(bar, x=[None if x is None else max(x, floor) for x in xs], xaxis="x3",
                             customdata=[0.0 if x is None else x for x in xs], textposition="none",
                             marker=dict(color="rgba(255,255,255,0)", line=dict(color=color, width=2.5),
                                         pattern=dict(shape="/", fgcolor=color, size=6)),
                             hovertemplate="%{y}: p %{customdata:.4f} before the filter, then removed<extra></extra>",
                             name=f"removed by {name}"))
    colors = [COLORS["accent"] if int(i) == int(chosen_id) else (COLORS["primary"] if f > 0 else COLORS["muted"])
              for i, f in zip(ids, final)]
    data.append(dict(bar, x=final, xaxis="x4", marker_color=colors, showlegend=False, name="final",
                     text=[percent_text(f) if f > 0 else "0" for f in final]))
    t_title = "2. T = 0 (greedy)" if st.greedy else f"2. \u00f7 T (T = {s.temperature:g})"
    titles = ["1. Raw logits", t_title, "3. Softmax + filters", "4. Final"]
    x_titles = ["logit (unitless score)", "logit \u00f7 T (unitless)", "probability (0 to 1)", "probability (0 to 1)"]
    hi = max(1e-9, float(np.max(st.probs_scaled)), float(np.max(st.final))) * 1.08
    layout = dict(barmode="overlay",
                  annotations=[dict(text=t, x=(d0 + d1) / 2, y=1.0, xref="paper", yref="paper", showarrow=False,
                                    xanchor="center", yanchor="bottom", font=dict(size=15))
                               for t, (d0, d1) in zip(titles, _panels(4))])
    for i, ((d0, d1), xt) in enumerate(zip(_panels(4), x_titles), start=1):
        ax = dict(domain=[d0, d1], anchor="y", title=dict(text=xt))
        if i >= 3:
            ax["range"] = [0, hi]
        layout["xaxis" if i == 1 else f"xaxis{i}"] = ax
    fig = style(go.Figure(data=data, layout=layout),
                "From logits to a choice: the top tokens at each stage (red = the sampled token)",
                x_titles[0], "token", height=max(420, row_px * len(ys) + 210))
    fig.update_yaxes(tickmode="array", tickvals=ys, ticktext=ys)
    return fig.update_layout(margin=dict(l=110, r=20, t=95, b=115),
                             legend=dict(orientation="h", yanchor="top", y=-0.14, xanchor="right", x=1.0,
                                         title=dict(text="panel 3 (removed = outlined):")))


def cumulative_curve(st) -> go.Figure:
    """Cumulative probability of the distribution top-p sees, with the top-p (and top-k) cut marked.
    The x-axis spans a little past the cut, so the interesting part fills the chart."""
    s = st.settings
    keep = 1 if s.greedy else st.top_p_keep  # greedy takes the argmax: no filter decides, whatever top-p says
    span = int(min(st.cum_probs.size, max(20, 2 * keep + 5, (s.top_k + 5) if 0 < s.top_k <= 60 else 0)))
    shapes, notes = [], []
    if s.greedy:
        shapes += [dict(type="rect", x0=0.5, x1=1.5, yref="paper", y0=0, y1=1, line_width=0,
                        fillcolor=COLORS["good"], opacity=0.12),
                   dict(type="line", x0=1.5, x1=1.5, yref="paper", y0=0, y1=1, line=dict(color=COLORS["good"]))]
        notes.append(dict(text="greedy (T = 0) keeps 1 token: the most likely; top-p and top-k are not used",
                          x=1.5, yref="paper", y=1, xanchor="left", yanchor="bottom", showarrow=False,
                          font=dict(color=COLORS["good"])))
    elif s.top_p < 1.0:
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=s.top_p, y1=s.top_p,
                           line=dict(dash="dash", color=COLORS["warn"])))
        notes.append(dict(text=f"top-p = {s.top_p:g}", xref="paper", x=1, y=s.top_p, xanchor="right",
                          yanchor="top", showarrow=False, font=dict(color=COLORS["warn"])))
        if keep <= span:
            shapes += [dict(type="rect", x0=0.5, x1=keep + 0.5, yref="paper", y0=0, y1=1, line_width=0,
                            fillcolor=COLORS["good"], opacity=0.12),
                       dict(type="line", x0=keep + 0.5, x1=keep + 0.5, yref="paper", y0=0, y1=1,
                            line=dict(color=COLORS["good"]))]
            notes.append(dict(text=f"top-p keeps {keep:,} token{'s' if keep != 1 else ''}", x=keep + 0.5,
                              yref="paper", y=1, xanchor="left", yanchor="bottom", showarrow=False,
                              font=dict(color=COLORS["good"])))
        else:
            notes.append(dict(text=f"top-p keeps {keep:,} tokens (beyond this chart)", xref="paper", yref="paper",
                              x=1, y=0.05, showarrow=False, xanchor="right"))
    if 0 < s.top_k < st.vocab and s.top_k <= span and not s.greedy:
        shapes.append(dict(type="line", x0=s.top_k + 0.5, x1=s.top_k + 0.5, yref="paper", y0=0, y1=1,
                           line=dict(dash="dot", color=COLORS["muted"])))
        notes.append(dict(text=f"top-k = {s.top_k}", x=s.top_k + 0.5, y=0.05, xanchor="left", showarrow=False))
    fig = go.Figure(
        data=[dict(type="scatter", x=list(range(1, span + 1)), y=st.cum_probs[:span].tolist(), mode="lines+markers",
                   marker=dict(size=5), line=dict(color=COLORS["primary"]), name="cumulative probability")],
        layout=dict(shapes=shapes, annotations=notes, showlegend=False, xaxis=dict(range=[0.5, span + 0.5]),
                    yaxis=dict(range=[0, 1.08])))
    title = ("Cumulative probability at temperature 1, most likely token first (greedy takes rank 1)" if s.greedy
             else "Cumulative probability, most likely token first (after temperature and top-k)")
    return style(fig, title,
                 "token rank (1 = most likely)", "cumulative probability (0 to 1)", height=380)


def draws_vs_probs(tokens, probs, counts, n: int) -> go.Figure:
    """Observed share of n draws beside the sampling probability, token by token."""
    xs = unique_labels(tokens)
    fig = go.Figure([
        go.Bar(x=xs, y=list(probs), name="probability (sampling distribution)", marker_color=COLORS["primary"]),
        go.Bar(x=xs, y=[c / n for c in counts], name=f"share of {n:,} draws", marker_color=COLORS["accent"],
               text=[str(int(c)) for c in counts], textposition="outside"),
    ])
    style(fig, f"{n:,} draws under these settings vs the probabilities", "token",
          "probability / share of draws (0 to 1)", height=400)
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, max(1e-9, max(list(probs) + [c / n for c in counts])) * 1.18])
    return fig


def position_probs(tokens_in, tokens_next, probs, ranks) -> go.Figure:
    """For each prompt position: the probability the model gave to the token that actually came next."""
    ranks = np.asarray(ranks)
    x = np.arange(len(probs))
    colors = [COLORS["good"] if r == 1 else COLORS["primary"] if r <= 10 else COLORS["warn"] for r in ranks]
    hover = [f"after {visible(a)!r} came {visible(b)!r}: p = {p:.3g}, rank {r}"
             for a, b, p, r in zip(tokens_in, tokens_next, probs, ranks)]
    fig = go.Figure(go.Bar(x=x, y=list(probs), marker_color=colors, hovertext=hover, hoverinfo="text"))
    style(fig, "One pass, a prediction at every position: p(the token that really came next)",
          "position in the prompt (its prediction is for position + 1)", "probability (log scale)", height=360)
    fig.update_yaxes(type="log", exponentformat="power")
    whole_ticks(fig, len(x))
    fig.add_annotation(text="green: the model's top guess \u00b7 blue: in its top 10 \u00b7 orange: further down",
                       xref="paper", yref="paper", x=0, y=1.02, showarrow=False, xanchor="left", yanchor="bottom",
                       font=dict(size=14))
    return fig


def step_chart(tokens, chosen_probs, top_probs, entropies) -> go.Figure:
    """Each generation step: the probability of the appended token beside the most likely one, and entropy."""
    x = list(range(len(tokens)))
    fig = go.Figure(
        data=[dict(type="bar", x=x, y=list(top_probs), name="most likely token", marker_color=COLORS["muted"]),
              dict(type="bar", x=x, y=list(chosen_probs), name="appended token", marker_color=COLORS["accent"],
                   text=[short_label(t, 10) for t in tokens], textposition="outside"),
              dict(type="scatter", x=x, y=list(entropies), name="entropy (bits)", mode="lines+markers",
                   line=dict(color=COLORS["primary"]), yaxis="y2")],
        layout=dict(barmode="group", yaxis=dict(range=[0, 1.15]), xaxis=dict(dtick=1),
                    yaxis2=dict(title=dict(text="entropy (bits)"), overlaying="y", side="right", rangemode="tozero",
                                showgrid=False)))
    return style(fig, "Each step's distribution: the appended token, the top token and the entropy",
                 "step (0 = first token after the prompt)", "probability at temperature 1 (0 to 1)", height=380)
