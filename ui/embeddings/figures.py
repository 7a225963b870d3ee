"""Figures for the embeddings & position page (no st.* calls here)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.frame.figures import COLORS, style
from ui.frame.figures import token_label


def _tick_labels(tokens) -> list[str]:
    """Unique axis labels (plotly merges equal category names): '#i token'."""
    return [f"#{i} {token_label(t)}" for i, t in enumerate(tokens)]


def embedding_heatmap(vectors: np.ndarray, tokens, max_tokens: int = 96, dims: int = 64) -> go.Figure:
    """Each prompt token's embedding row: tokens down, dimensions across, colour = value."""
    v = vectors[:max_tokens]
    # All d dimensions side by side look like noise; the ones that differ most between these tokens, sorted
    # by that spread, show which tokens share a pattern (a repeated token repeats its row exactly).
    keep = np.argsort(-v.std(axis=0))[:min(dims, v.shape[1])]
    z = v[:, keep]
    lim = float(np.quantile(np.abs(z), 0.98)) or 1.0
    fig = go.Figure(go.Heatmap(z=z, y=_tick_labels(tokens[:max_tokens]), x=[f"d{i}" for i in keep],
                               colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim,
                               colorbar=dict(title="value"),
                               hovertemplate="%{y}<br>dimension %{x}<br>value %{z:.4f}<extra></extra>"))
    style(fig, f"Embedding vectors: {v.shape[0]} tokens \u00d7 the {z.shape[1]} of {v.shape[1]} dimensions that "
          "vary most across them", "dimension (sorted by spread across these tokens)",
          "prompt token", height=max(340, 130 + 20 * v.shape[0]))
    fig.update_yaxes(autorange="reversed", automargin=True, tickfont=dict(size=14))
    fig.update_xaxes(showticklabels=False)
    return fig


def norms_bar(norms: np.ndarray, tokens, quantiles, max_tokens: int = 96) -> go.Figure:
    n = norms[:max_tokens]
    fig = go.Figure(go.Bar(x=_tick_labels(tokens[:max_tokens]), y=n, marker_color=COLORS["primary"],
                           hovertemplate="%{x}<br>norm %{y:.3f}<extra></extra>"))
    lo, mid, hi = quantiles
    fig.add_hrect(y0=lo, y1=hi, fillcolor=COLORS["muted"], opacity=0.2, line_width=0)
    fig.add_hline(y=mid, line_dash="dash", line_color=COLORS["muted"],
                  annotation_text=f"median of all vocabulary rows {mid:.2f}")
    style(fig, "Length (L2 norm) of each token's embedding; grey band: 5 %-95 % of all vocabulary rows",
          "prompt token", "L2 norm (unitless)", height=340)
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=14))
    return fig


def cosine_heatmap(cos: np.ndarray, tokens, title: str, axis: str = "prompt token", max_tokens: int = 96) -> go.Figure:
    c = cos[:max_tokens, :max_tokens]
    labels = _tick_labels(tokens[:max_tokens])
    fig = go.Figure(go.Heatmap(z=c, x=labels, y=labels, colorscale="RdBu", zmid=0, zmin=-1, zmax=1,
                               colorbar=dict(title="cosine"),
                               hovertemplate="%{y}<br>%{x}<br>cosine %{z:.3f}<extra></extra>"))
    style(fig, title, axis, axis, height=max(420, 120 + 16 * c.shape[0]))
    fig.update_yaxes(autorange="reversed", automargin=True, tickfont=dict(size=14))
    fig.update_xaxes(tickangle=-60, automargin=True, tickfont=dict(size=14))
    return fig


def pca_scatter(m) -> go.Figure:
    """The prompt's tokens (red, labelled) among a seeded random sample of the vocabulary (grey)."""
    fig = go.Figure()
    fig.add_trace(go.Scattergl(x=m.sample_xy[:, 0], y=m.sample_xy[:, 1], mode="markers", name="vocabulary sample",
                               marker=dict(size=5, color=COLORS["muted"], opacity=0.5),
                               hovertext=[f"{token_label(t)!r} (id {i})" for t, i in zip(m.sample_tokens, m.sample_ids)],
                               hoverinfo="text"))
    seen: dict[int, int] = {}
    xs, ys, texts, shown = [], [], [], []
    span = np.ptp(np.vstack([m.sample_xy, m.prompt_xy]), axis=0) + 1e-9  # [2] axis ranges
    for (x, y), t, i in zip(m.prompt_xy, m.prompt_tokens, m.prompt_ids):
        if i in seen:  # a repeated token sits on the same point; label it once
            continue
        seen[i] = 1
        xs.append(float(x))
        ys.append(float(y))
        texts.append(token_label(t))
        # label widths ~ 1.2 % of the x range per character at this size; keep a clear gap on both axes
        free = all(abs(x - sx) / span[0] > 0.012 * max(len(texts[-1]), len(st)) + 0.02 or abs(y - sy) / span[1] > 0.05
                   for sx, sy, st in shown)
        if free:
            shown.append((float(x), float(y), texts[-1]))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", name="prompt tokens (crowded labels: hover)",
                             text=[t if any(t == s[2] and x == s[0] for s in shown) else "" for t, x in zip(texts, xs)],
                             hovertext=texts, textposition="top center", textfont=dict(size=15, color=COLORS["accent"]),
                             marker=dict(size=10, color=COLORS["accent"], line=dict(color="white", width=1)),
                             hovertemplate="%{hovertext}<extra></extra>"))
    e1, e2 = m.explained
    return style(fig, f"Embedding space flattened to 2-D by PCA (the two axes keep {e1 + e2:.1%} of the variance)",
                 f"principal component 1 ({e1:.1%} of variance)", f"principal component 2 ({e2:.1%} of variance)",
                 height=560)


def neighbours_bar(nb) -> go.Figure:
    labels = [f"{token_label(t)!r} ({i})" for t, i in zip(nb.tokens, nb.ids)][::-1]
    fig = go.Figure(go.Bar(x=list(nb.cosines)[::-1], y=labels, orientation="h", marker_color=COLORS["primary"],
                           text=[f"{c:.3f}" for c in nb.cosines][::-1], textposition="auto"))
    style(fig, f"Nearest tokens to {token_label(nb.query_token)!r} (id {nb.query_id}) in the embedding table",
          "cosine similarity (-1 to 1)", "token (id)", height=max(300, 80 + 32 * len(nb.ids)))
    fig.update_yaxes(automargin=True)
    return fig


def rope_angle_heatmap(ra) -> go.Figure:
    """cos(theta) for every position and dimension pair: fast stripes for low pairs, nearly flat for high ones."""
    fig = go.Figure(go.Heatmap(z=np.cos(ra.angles), x=list(range(ra.angles.shape[1])), y=list(ra.positions),
                               colorscale="RdBu", zmin=-1, zmax=1, colorbar=dict(title="cos \u03b8"),
                               customdata=ra.angles,
                               hovertemplate="position %{y}<br>pair %{x}<br>\u03b8 = %{customdata:.3f} rad"
                                             "<br>cos \u03b8 = %{z:.3f}<extra></extra>"))
    style(fig, f"RoPE rotation angle \u03b8 = pos \u00d7 {ra.base:g}^(-2i/{ra.rotary_dim}), shown as cos \u03b8",
          "dimension pair i (0 = fastest)", "position (token index)", height=460)
    fig.update_yaxes(autorange="reversed")
    return fig


def rope_wavelength_line(ra, others: dict | None = None) -> go.Figure:
    """Tokens per full turn (2 pi / frequency) of each pair, on a log axis; ``others`` ({label: RopeAngles}) adds
    the lines of other layer kinds (a model with a RoPE base per kind: Gemma 3's local and global layers)."""
    fig = go.Figure()
    lines = {f"base {ra.base:,.0f}" + (" (layer 0)" if others else ""): ra, **(others or {})}
    for (name, r), color in zip(lines.items(), [COLORS["primary"], COLORS["accent"], COLORS["good"]]):
        wl = 2 * np.pi / r.inv_freq
        fig.add_scatter(x=list(range(len(wl))), y=wl, mode="lines+markers", line_color=color, name=name,
                        hovertemplate="pair %{x}<br>one full turn every %{y:,.1f} tokens<extra></extra>")
    style(fig, "How many positions each dimension pair needs for one full turn", "dimension pair i",
          "wavelength (tokens, log scale)", height=340)
    fig.update_layout(showlegend=bool(others))
    fig.update_yaxes(type="log")
    return fig


def relative_heatmap(demo) -> go.Figure:
    p = demo.scores.shape[0]
    fig = go.Figure(go.Heatmap(z=demo.scores, x=list(range(p)), y=list(range(p)), colorscale="Viridis",
                               colorbar=dict(title="score"),
                               hovertemplate="query position %{y}<br>key position %{x}<br>"
                                             "q\u00b7k/\u221ad = %{z:.4f}<extra></extra>"))
    style(fig, "Score of one q and one k rotated to positions (m, n)",
          "key position n", "query position m", height=460)
    fig.update_yaxes(autorange="reversed")
    return fig


def relative_lines(demo, starts=(0, 8, 16)) -> go.Figure:
    """Score against distance m - n, starting from different query positions: the curves lie on top of each other."""
    p = demo.scores.shape[0]
    fig = go.Figure()
    dashes = ["solid", "dash", "dot", "dashdot"]
    for j, m0 in enumerate(s for s in starts if s < p):
        ms = np.arange(m0, p)
        dist = ms - m0
        fig.add_trace(go.Scatter(x=dist, y=demo.scores[ms, m0], mode="lines", name=f"key at position {m0}",
                                 line=dict(dash=dashes[j % 4], width=3 if j == 0 else 2)))
    fig.add_hline(y=demo.no_rope_score, line_color=COLORS["muted"], line_dash="dot",
                  annotation_text="same q\u00b7k without rotation")
    return style(fig, "Score against distance, for keys at different absolute positions", "distance m - n (tokens)",
                 "q\u00b7k/\u221ad (attention score before softmax)", height=380)


def learned_heatmap(lp, max_dims: int = 128) -> go.Figure:
    v = lp.vectors[:, :max_dims]
    lim = float(np.quantile(np.abs(v), 0.99)) or 1.0
    fig = go.Figure(go.Heatmap(z=v, x=list(range(v.shape[1])), y=list(range(v.shape[0])), colorscale="RdBu", zmid=0,
                               zmin=-lim, zmax=lim, colorbar=dict(title="value")))
    style(fig, f"Learned position vectors (first {v.shape[1]} dimensions of positions 0-{v.shape[0] - 1})",
          "dimension (index)", "position (token index)", height=440)
    fig.update_yaxes(autorange="reversed")
    return fig
