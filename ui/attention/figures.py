"""Figures for the attention page (no st.* calls here). Inputs are plain arrays from the engine's records."""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ui.frame.archwords import STREAM_AXIS, binary_bytes, count, kind_name, stream_labels
from ui.frame.figures import COLORS, style
from ui.frame.html import visible


def _esc(text: str) -> str:
    """Model text for plotly: whitespace made visible, then HTML-escaped (plotly renders a subset of HTML in
    labels and titles, and shows entities such as &lt; as the characters)."""
    return html.escape(visible(text), quote=False)

MASKED = "#c9ced6"  # the colour of future positions (blocked by the causal mask)
SCALE = "Blues"
DRAW_MAX = 64  # attention-map positions drawn at once (a window over longer prompts)
LENS_DRAW_MAX = 16  # logit-lens columns drawn with their token text


def labels(tokens: Sequence[str], start: int = 0) -> list[str]:
    """Axis labels: position and the token, whitespace made visible and HTML-escaped (unique, so plotly keeps
    the order)."""
    out = []
    for i, t in enumerate(tokens):
        v = visible(t)
        v = v[:14] + "\u2026" if len(v) > 15 else v
        out.append(f"{start + i}: {html.escape(v, quote=False)}")
    return out


def head_overview(values: np.ndarray, metric: str, unit: str, selected: tuple[int, int] | None = None,
                  kv_groups: list[list[int]] | None = None, windows: tuple = ()) -> go.Figure:
    """All layers x heads as one heatmap (values: [layers, heads]). A transparent marker sits on every cell so
    a click can select it (plotly heatmaps themselves send no selection events). ``windows`` (per layer, None =
    global): with sliding-window layers present, each layer's kind is written on its axis label and the global
    layers are outlined."""
    n_layers, n_heads = values.shape
    # The heatmap itself takes no hover: plotly would report a heatmap cell, which carries no selection in
    # Streamlit. The (transparent) markers on top carry the hover text and the click.
    fig = go.Figure(go.Heatmap(z=values, x=list(range(n_heads)), y=list(range(n_layers)), colorscale="Viridis",
                               colorbar=dict(title=dict(text=unit, side="right")), hoverinfo="skip"))
    hh, ll = np.meshgrid(np.arange(n_heads), np.arange(n_layers))
    fig.add_trace(go.Scatter(
        x=hh.ravel(), y=ll.ravel(), mode="markers", showlegend=False,
        customdata=np.stack([ll.ravel(), hh.ravel(), values.ravel()], axis=1),
        hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<br>" + metric + ": %{customdata[2]:.2f} "
                      + unit + "<br>click to open<extra></extra>",
        marker=dict(symbol="square", size=18, color="rgba(0,0,0,0.01)", line=dict(width=0))))
    if kv_groups and len(kv_groups) > 1:
        for g in kv_groups[:-1]:
            fig.add_vline(x=g[-1] + 0.5, line=dict(color="white", width=3))
    if selected is not None:
        layer, head = selected
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color=COLORS["accent"], width=3))
    mixed = len(windows) == n_layers and any(w for w in windows) and not all(w for w in windows)
    style(fig, f"{metric} of every head (click a cell to open it)", "head (white lines: KV-head groups)",
          "layer (block)" + ("; outlined: global layers, the rest sliding-window" if mixed else ""),
          height=max(380, 18 * n_layers + 140))
    fig.update_xaxes(dtick=1, range=[-0.5, n_heads - 0.5], showgrid=False)
    fig.update_yaxes(dtick=1 if n_layers <= 12 else 2, range=[-0.5, n_layers - 0.5], showgrid=False)
    if mixed:
        fig.update_yaxes(tickmode="array", tickvals=list(range(n_layers)),
                         ticktext=[f"{i} global" if not w else f"{i} local {w}" for i, w in enumerate(windows)],
                         tickfont=dict(size=11))
        for i, w in enumerate(windows):
            if not w:
                fig.add_shape(type="rect", x0=-0.5, x1=n_heads - 0.5, y0=i - 0.5, y1=i + 0.5,
                              line=dict(color=COLORS["warn"], width=3, dash="dash"))
    fig.update_layout(clickmode="event+select", dragmode=False)
    return fig


def attention_map(head: np.ndarray, tokens: Sequence[str], title: str, start: int = 0, size: int = DRAW_MAX,
                  query: int | None = None, window: int | None = None) -> go.Figure:
    """One head's attention (head: [q, k] over all recorded positions) drawn for the square window of positions
    [start, start + size). Cells above the diagonal (future keys) are drawn grey as 'masked', not as zero weight:
    the causal mask removes them before softmax. A sliding-window layer (``window`` W) also masks keys W or more
    positions back, drawn grey too, with the window's edge outlined. ``query`` (absolute position) is outlined."""
    start = max(0, min(int(start), head.shape[0] - 1))
    stop = min(head.shape[0], start + int(size))
    weights = head[start:stop, start:stop]  # [q, k] window
    tokens = list(tokens)[start:stop]
    m = weights.shape[0]
    lab = labels(tokens, start)
    q_abs = np.arange(start, stop)[:, None]
    k_abs = np.arange(start, stop)[None, :]
    allowed = k_abs <= q_abs
    if window:
        allowed &= q_abs - k_abs < int(window)
    z = np.where(allowed, weights.astype(np.float32), np.nan)
    masked = np.where(allowed, np.nan, 1.0)
    fig = go.Figure()
    fig.add_trace(go.Heatmap(z=masked, x=lab, y=lab, colorscale=[[0, MASKED], [1, MASKED]], showscale=False,
                             hovertemplate="query %{y}<br>key %{x}<br>masked: a token cannot see the future"
                                           "<extra></extra>", name="masked (future)"))
    fig.add_trace(go.Heatmap(z=z, x=lab, y=lab, colorscale=SCALE, zmin=0, zmax=1,
                             colorbar=dict(title=dict(text="weight (0-1)", side="right")),
                             hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"))
    # a legend entry for the grey cells
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers",
                             name="masked: future position" + (f" or {window}+ back (outside the window)"
                                                               if window else ""),
                             marker=dict(symbol="square", size=14, color=MASKED)))
    if window:  # the window's far edge: key q - W + 1 is the oldest a query q still sees
        for r in range(m):
            c = r - int(window) + 1
            if 0 <= c < m:
                fig.add_shape(type="line", x0=c - 0.5, x1=c - 0.5, y0=r - 0.5, y1=r + 0.5,
                              line=dict(color=COLORS["accent"], width=2, dash="dot"))
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"edge of the sliding window ({window} tokens)",
                                 line=dict(color=COLORS["accent"], width=2, dash="dot")))
    if query is not None and start <= query < start + m:
        r = query - start
        fig.add_shape(type="rect", x0=-0.5, x1=r + 0.5, y0=r - 0.5, y1=r + 0.5, line=dict(color=COLORS["accent"], width=2))
    style(fig, title, "key position: the token being looked at", "query position: the token looking",
          height=min(900, max(420, 16 * m + 200)))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=14), showgrid=False)
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=14), showgrid=False)
    # The legend sits at the very bottom of the figure, below the rotated key labels, never over them.
    fig.update_layout(plot_bgcolor="white", margin=dict(l=150, b=200), showlegend=True,
                      legend=dict(orientation="h", x=0, xanchor="left", y=0, yref="container", yanchor="bottom"))
    return fig


def query_bar(head: np.ndarray, tokens: Sequence[str], query: int, where: str = "") -> go.Figure:
    """Where one query position attends: row ``query`` of the head's weights, keys 0..query (they sum to 1).
    ``where`` (e.g. 'layer 3, head 1') ends the title."""
    title = f"Where \u201c{_esc(tokens[query])}\u201d (position {query}) looks" + (f", {where}" if where else "")
    w = np.asarray(head[query, : query + 1], dtype=np.float64)
    lab = labels(tokens[: query + 1])
    colors = [COLORS["accent"] if i == int(np.argmax(w)) else COLORS["primary"] for i in range(len(w))]
    fig = go.Figure(go.Bar(x=lab, y=w, marker_color=colors,
                           hovertemplate="key %{x}<br>weight %{y:.3f}<extra></extra>"))
    style(fig, title, "key position (earlier tokens; later ones are masked)", "attention weight (0 to 1)", height=380)
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=14))
    fig.update_yaxes(range=[0, max(1e-6, float(w.max())) * 1.12])
    fig.update_layout(margin=dict(b=130))
    return fig


def gqa_diagram(groups: list[list[int]], selected_head: int | None = None, kind: str = "GQA") -> go.Figure:
    """Query heads (top row) joined to the key/value head they read (bottom row), as transformers'
    repeat_kv wires them; ``kind`` ("MHA" | "GQA" | "MQA", measured at load) names it in the title."""
    n_heads = sum(len(g) for g in groups)
    n_kv = len(groups)
    palette = [COLORS["primary"], COLORS["warn"], COLORS["good"], "#9467bd", "#8c564b", "#e377c2", "#17becf",
               "#bcbd22"]
    fig = go.Figure()
    kv_x = [(k + 0.5) * n_heads / n_kv - 0.5 for k in range(n_kv)]
    for k, g in enumerate(groups):
        c = palette[k % len(palette)]
        for h in g:
            fig.add_trace(go.Scatter(x=[h, kv_x[k]], y=[1, 0], mode="lines", showlegend=False, hoverinfo="skip",
                                     line=dict(color=c, width=4 if h == selected_head else 2)))
        fig.add_trace(go.Scatter(
            x=g, y=[1] * len(g), mode="markers+text", text=[f"Q{h}" for h in g], textposition="top center",
            marker=dict(size=[30 if h == selected_head else 22 for h in g], color=c, symbol="circle",
                        line=dict(color="black", width=[3 if h == selected_head else 0 for h in g])),
            showlegend=False, hovertemplate=f"query head %{{x}} reads K/V head {k}<extra></extra>"))
        fig.add_trace(go.Scatter(x=[kv_x[k]], y=[0], mode="markers+text", text=[f"K/V {k}"], showlegend=False,
                                 textposition="bottom center", marker=dict(size=34, color=c, symbol="square"),
                                 hovertemplate=f"key/value head {k}<extra></extra>"))
    name = kind_name(kind)
    style(fig, f"{name[0].upper()}{name[1:]}: {n_heads} query heads read {count(n_kv, 'key/value head')}",
          "head index", "", height=340)
    fig.update_yaxes(range=[-0.55, 1.5], tickvals=[0, 1], ticktext=["K/V heads (cached)", "query heads"])
    fig.update_xaxes(range=[-0.8, n_heads - 0.2], dtick=1, showgrid=False)
    return fig


def kv_saving_bar(contexts: Sequence[int], bytes_gqa: Sequence[int], bytes_mha: Sequence[int], n_heads: int,
                  n_kv: int) -> go.Figure:
    """KV-cache size with this model's KV heads vs one KV head per query head (derived from the formula)."""
    x = [f"{c:,} tokens" for c in contexts]
    fig = go.Figure([
        go.Bar(x=x, y=[b / 2**20 for b in bytes_mha], name=f"if every head had its own K/V ({n_heads} KV heads)",
               marker_color=COLORS["muted"], text=[binary_bytes(b) for b in bytes_mha], textposition="outside",
               textfont=dict(size=14)),
        go.Bar(x=x, y=[b / 2**20 for b in bytes_gqa], name=f"this model ({count(n_kv, 'KV head')})",
               marker_color=COLORS["primary"], text=[binary_bytes(b) for b in bytes_gqa], textposition="outside",
               textfont=dict(size=14)),
    ])
    style(fig, "KV-cache size for one sequence", "context length", "KV cache (MiB)", height=360)
    fig.update_layout(barmode="group", legend=dict(orientation="v", x=0.01, xanchor="left", y=0.98,
                                                   yanchor="top"))
    fig.update_yaxes(range=[0, max(b / 2**20 for b in bytes_mha) * 1.2])
    return fig


def cost_chart(tokens: Sequence[int], forward: Sequence[Sequence[float]], attention: Sequence[Sequence[float]],
               n2_scale: float) -> go.Figure:
    """Measured prefill time and time inside attention vs prompt length (medians, bars from min to max),
    with a reference curve c * n^2 scaled to the attention times by least squares."""
    n = np.asarray(tokens)

    def med_err(runs):
        med = np.array([np.median(r) for r in runs]) * 1000
        lo = np.array([min(r) for r in runs]) * 1000
        hi = np.array([max(r) for r in runs]) * 1000
        return med, hi - med, med - lo

    fig = go.Figure()
    for runs, name, color in ((forward, "whole forward pass (measured)", COLORS["primary"]),
                              (attention, "inside attention: scores, softmax, weighted sum (measured)",
                               COLORS["accent"])):
        med, up, down = med_err(runs)
        fig.add_trace(go.Scatter(x=n, y=med, mode="lines+markers", name=name, line_color=color,
                                 error_y=dict(type="data", array=up, arrayminus=down, visible=True),
                                 hovertemplate="%{x} tokens: %{y:.1f} ms<extra></extra>"))
    xs = np.linspace(0, n.max(), 80)
    fig.add_trace(go.Scatter(x=xs, y=n2_scale * xs**2 * 1000, mode="lines", name="reference curve c\u00b7n\u00b2",
                             line=dict(color=COLORS["accent"], dash="dot")))
    style(fig, "Prefill time vs prompt length", "prompt length n (tokens)", "time (ms, median; bars: min-max)",
          height=420)
    return fig


def lens_grid(top_tokens, top_probs: np.ndarray, input_tokens: Sequence[str], positions: Sequence[int],
              last: int = LENS_DRAW_MAX, layer_step: int = 1) -> go.Figure:
    """Logit lens: rows = layers (0 = embeddings), columns = the last ``last`` covered positions; text = the
    top-1 next token read from the residual stream there, colour = its probability."""
    top_probs = np.asarray(top_probs)
    p = min(last, top_probs.shape[1])
    cols = slice(top_probs.shape[1] - p, top_probs.shape[1])
    rows = list(range(0, top_probs.shape[0], layer_step))
    if rows[-1] != top_probs.shape[0] - 1:
        rows.append(top_probs.shape[0] - 1)
    z = top_probs[rows][:, cols, 0]  # [rows, p]
    text = [[html.escape(visible(top_tokens[r][j][0])[:8], quote=False) for j in range(cols.start, cols.stop)]
            for r in rows]
    hover = [[" | ".join(f"{_esc(t)} {pr:.2f}" for t, pr in zip(top_tokens[r][j], top_probs[r, j]))
              for j in range(cols.start, cols.stop)] for r in rows]
    xlab = labels(list(input_tokens)[cols], int(positions[cols.start]))
    names = stream_labels(top_probs.shape[0])
    ylab = [names[r] if r == 0 else f"layer {names[r]}" for r in rows]  # the layer just run, numbered from 0
    fig = go.Figure(go.Heatmap(
        z=z, x=xlab, y=ylab, text=text, texttemplate="%{text}", textfont=dict(size=11), customdata=hover,
        colorscale="YlGnBu", zmin=0, zmax=1, colorbar=dict(title=dict(text="probability", side="right")),
        hovertemplate="after %{y}, at %{x}<br>top 3: %{customdata}<extra></extra>"))
    style(fig, "Logit lens: the top next-token guess after every layer", "input position (the token read so far)",
          "after layer (read through the final norm and output head)", height=max(420, 22 * len(rows) + 200))
    fig.update_yaxes(autorange="reversed", showgrid=False)
    fig.update_xaxes(tickangle=-60, showgrid=False)
    fig.update_layout(margin=dict(b=140, l=90))
    return fig


def final_prob_line(final_prob: np.ndarray, answer: str) -> go.Figure:
    """Probability every layer's lens gives to the model's final choice at the last position."""
    fig = go.Figure(go.Scatter(x=stream_labels(len(final_prob)), y=final_prob, mode="lines+markers",
                               line_color=COLORS["good"]))
    style(fig, f"Probability of the final answer \u201c{_esc(answer)}\u201d after each layer",
          STREAM_AXIS, "probability (0 to 1)", height=320)
    fig.update_yaxes(range=[0, 1.02])
    return fig


def residual_norms_chart(norms: np.ndarray) -> go.Figure:
    """Residual-stream L2 norm after each block: the first and the last position, and the median and range over
    the other positions (log scale: the first token's vector often grows ~100x larger). norms: [layers+1, n]."""
    x = stream_labels(norms.shape[0])
    rest = norms[:, 1:] if norms.shape[1] > 1 else norms
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=rest.max(1), mode="lines", line=dict(width=0), showlegend=False,
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=rest.min(1), mode="lines", line=dict(width=0), fill="tonexty",
                             fillcolor="rgba(31,119,180,0.15)", name="range over the other positions",
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=np.median(rest, 1), mode="lines", name="median of the other positions",
                             line=dict(color=COLORS["primary"], dash="dash")))
    if norms.shape[1] > 1:
        fig.add_trace(go.Scatter(x=x, y=norms[:, 0], mode="lines+markers", name="first position (0)",
                                 line_color=COLORS["warn"]))
    fig.add_trace(go.Scatter(x=x, y=norms[:, -1], mode="lines+markers", name="last position",
                             line_color=COLORS["accent"]))
    style(fig, "Residual stream size after each layer", STREAM_AXIS, "L2 norm (unitless, log scale)", height=400)
    fig.update_yaxes(type="log")
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"),
                      margin=dict(t=100))
    return fig


def window_maps(view, names: tuple[str, str]) -> go.Figure:
    """Two heatmaps, a sliding-window layer beside a global one: the last queries (rows) over every key (columns),
    mean over heads; the oldest key the window still lets each query see is outlined on both."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=[html.escape(n, quote=False) for n in names],
                        horizontal_spacing=0.08)
    qs = np.arange(view.q0, view.n)
    w = next(x for x in view.windows if x)
    for i in range(2):
        z = np.where(view.weights[i] > 0, np.sqrt(view.weights[i]), np.nan)  # sqrt: faint weights stay visible
        fig.add_trace(go.Heatmap(z=z, x=np.arange(view.n), y=qs, colorscale="Viridis", showscale=i == 1,
                                 colorbar=dict(title="√weight"), hovertemplate="query %{y}, key %{x}<extra></extra>"),
                      row=1, col=i + 1)
        fig.add_trace(go.Scatter(x=qs - w + 1, y=qs, mode="lines", line=dict(color=COLORS["accent"], width=3),
                                 name=f"oldest key in a {w}-token window", showlegend=i == 0), row=1, col=i + 1)
    for i in (1, 2):
        fig.update_xaxes(title_text="key position (token)", row=1, col=i)
        fig.update_yaxes(title_text="query position (token)", autorange="reversed", row=1, col=i)
    fig.update_layout(title=dict(text="Sliding vs global layer on a prompt longer than the window", font=dict(size=19)),
                      template="plotly_white", height=440, margin=dict(l=60, r=20, t=80, b=55),
                      legend=dict(orientation="h", yanchor="bottom", y=1.08, xanchor="right", x=1.0))
    return fig
