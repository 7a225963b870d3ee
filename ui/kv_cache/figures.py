"""Figures for the KV-cache page (no st.* calls here)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.frame.figures import COLORS, style, whole_ticks
from ui.frame.html import visible

KIB, MIB, GIB = 1024, 1024**2, 1024**3
GB = 10**9


def fmt_bytes(n: float) -> str:
    """Binary units (KiB = 1024 bytes) below a gigabyte; decimal GB above, as GPU memory is sold."""
    if n >= GB:
        return f"{n / GB:,.2f} GB"
    if n >= MIB:
        return f"{n / MIB:,.2f} MiB"
    if n >= KIB:
        return f"{n / KIB:,.1f} KiB"
    return f"{int(n):,} bytes"


def cache_heatmap(values: np.ndarray, tokens, prompt_len: int, title: str) -> go.Figure:
    """values: [tokens, head_dim] of one layer and one KV head; columns are positions (NaN: not held, blank)."""
    z = values.T  # [head_dim, tokens]
    labels = [repr(visible(t))[1:-1] for t in tokens]
    hover = [[labels[j]] * z.shape[0] for j in range(z.shape[1])]
    held = np.abs(z[np.isfinite(z)])  # positions a sliding-window layer dropped are NaN: drawn blank
    lim = float(np.quantile(held, 0.99)) if held.size else 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(z.shape[1])), y=list(range(z.shape[0])), colorscale="RdBu_r", zmid=0,
        zmin=-lim, zmax=lim, customdata=np.array(hover).T,
        hovertemplate="position %{x} (%{customdata})<br>channel %{y}<br>value %{z:.3f}<extra></extra>",
        colorbar=dict(title="value"),
    ))
    if 0 < prompt_len < z.shape[1]:
        fig.add_vline(x=prompt_len - 0.5, line_color="black", line_width=2, line_dash="dash",
                      annotation_text="generated \u2192", annotation_position="top right")
    style(fig, title, "position in the sequence (token index)", "channel (0 to head_dim - 1)", height=430)
    fig.update_yaxes(autorange="reversed")
    return fig


def growth_chart(steps, growth: str, formula_bytes) -> go.Figure:
    """Measured cache bytes after each step (markers) against the formula (line); ``growth`` says what each decode
    step added, as measured (ui.kv_cache.view.growth_words)."""
    xs = [s.index for s in steps]
    measured = [s.kv_bytes / KIB for s in steps]
    formula = [b / KIB for b in formula_bytes]
    text = [f"{s.kv_tokens} tokens cached" for s in steps]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=formula, mode="lines", name="formula", line=dict(color=COLORS["accent"],
                                                                                      width=6), opacity=0.45))
    fig.add_trace(go.Scatter(x=xs, y=measured, mode="markers", name="measured from the cache tensors",
                             marker=dict(color=COLORS["primary"], size=9), text=text,
                             hovertemplate="step %{x}: %{y:,.1f} KiB<br>%{text}<extra></extra>"))
    style(fig, f"KV cache size after each step ({growth}, measured)",
          "step (0 = prefill of the whole prompt)", "cache size (KiB)", height=380)
    whole_ticks(fig, len(xs))
    return fig


def memory_bar(weights: int, kv_total: int, gpus, weights_label: str, kv_label: str) -> go.Figure:
    """Weights + KV cache as one stacked bar in GB, with the common GPU memory sizes as lines."""
    top = max(max(weights + kv_total, 1) / GB, max(gpus) if gpus else 0) * 1.08
    wide = lambda b: b / GB > 0.12 * top  # noqa: E731  (label a segment only where the text fits)
    fig = go.Figure()
    fig.add_trace(go.Bar(y=["memory"], x=[weights / GB], orientation="h", name=weights_label,
                         marker_color=COLORS["muted"],
                         text=[f"weights {weights / GB:,.1f} GB" if wide(weights) else ""],
                         textposition="inside", insidetextanchor="middle"))
    fig.add_trace(go.Bar(y=["memory"], x=[kv_total / GB], orientation="h", name=kv_label,
                         marker_color=COLORS["accent"], text=[f"KV {kv_total / GB:,.1f} GB" if wide(kv_total) else ""],
                         textposition="inside", insidetextanchor="middle"))
    last_at: dict[int, float] = {}
    for g in sorted(gpus):
        fig.add_vline(x=g, line_dash="dot", line_color="#334155", line_width=2)
        # a label goes one row higher while the row below still holds a label too close to it
        row = next((r for r in range(3) if g - last_at.get(r, -1e18) > 0.09 * top), 2)
        last_at[row] = g
        fig.add_annotation(x=g, y=1.0, yref="paper", yshift=4 + 20 * row, yanchor="bottom", showarrow=False,
                           text=f"{g} GB", font=dict(size=14))
    style(fig, "Weights + KV cache against one GPU's memory", "memory (GB, 10\u2079 bytes)", "", height=300)
    fig.update_layout(barmode="stack", margin=dict(t=120, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.45, xanchor="left", x=0))
    fig.update_yaxes(showticklabels=False)
    fig.update_xaxes(range=[0, top])
    return fig


def context_sweep(contexts, kv_totals, weights: int, gpus, model: str) -> go.Figure:
    """Total memory (weights + cache) against context length, log-scaled x."""
    totals = [(weights + k) / GB for k in kv_totals]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=list(contexts), y=[weights / GB] * len(totals), mode="lines", name="weights alone",
                             line=dict(color=COLORS["muted"], dash="dash")))
    fig.add_trace(go.Scatter(x=list(contexts), y=totals, mode="lines+markers", name="weights + KV cache",
                             line=dict(color=COLORS["accent"])))
    for g in gpus:
        fig.add_hline(y=g, line_dash="dot", line_color="#334155", annotation_text=f"{g} GB GPU",
                      annotation_position="top left")
    style(fig, f"{model}: memory as the context grows", "context length (tokens per sequence, log scale)",
          "memory (GB)", height=380)
    fig.update_xaxes(type="log")
    return fig


def variants_bar(variants, model: str) -> go.Figure:
    """KV bytes per token under MHA / GQA / MQA / MLA; the model's own design in a strong colour."""
    labels = [v.label + (" \u2190 this model" if v.is_model else "") for v in variants]
    kib = [v.bytes_per_token / KIB for v in variants]
    colors = [COLORS["accent"] if v.is_model else COLORS["primary"] for v in variants]
    fig = go.Figure(go.Bar(x=kib[::-1], y=labels[::-1], orientation="h", marker_color=colors[::-1],
                           text=[fmt_bytes(v.bytes_per_token) for v in variants][::-1], textposition="auto"))
    style(fig, f"{model}: KV cache per token under four attention designs", "KV cache per token (KiB)", "",
          height=330)
    fig.update_layout(margin=dict(l=330))
    return fig


def paging_chart(alloc) -> go.Figure:
    """Per request: tokens used, slots a paged cache reserves, slots contiguous pre-allocation reserves."""
    n = len(alloc.lengths)
    ys = [f"request {i + 1}" for i in range(n)]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=ys, x=alloc.contiguous_slots, orientation="h", name="contiguous: reserved max length",
                         marker_color="#e2e8f0", marker_line=dict(color=COLORS["muted"], width=1)))
    fig.add_trace(go.Bar(y=ys, x=alloc.paged_slots, orientation="h",
                         name=f"paged: whole blocks of {alloc.block_size}", marker_color=COLORS["warn"]))
    fig.add_trace(go.Bar(y=ys, x=alloc.lengths, orientation="h", name="tokens actually cached",
                         marker_color=COLORS["primary"],
                         hovertemplate="%{y}: %{x} tokens<extra></extra>"))
    style(fig, "Cache slots per request: used (blue), paged tail (orange), contiguous reserve (grey)",
          "cache slots (tokens)", "", height=max(320, 60 + 28 * n))
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_yaxes(autorange="reversed")
    return fig


def paging_totals(alloc, bytes_per_token: int) -> go.Figure:
    used = alloc.used * bytes_per_token
    rows = [("paged (blocks of %d)" % alloc.block_size, used, alloc.paged_waste * bytes_per_token),
            ("contiguous (max length each)", used, alloc.contiguous_waste * bytes_per_token)]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=[r[0] for r in rows], y=[r[1] / MIB for r in rows], name="holding tokens",
                         marker_color=COLORS["primary"]))
    fig.add_trace(go.Bar(x=[r[0] for r in rows], y=[r[2] / MIB for r in rows], name="reserved but empty",
                         marker_color=COLORS["warn"],
                         text=[f"{r[2] / (r[1] + r[2]):.0%} wasted" if r[1] + r[2] else "" for r in rows],
                         textposition="outside"))
    style(fig, "Cache memory for all requests together", "allocation scheme", "cache memory (MiB)", height=380)
    fig.update_layout(barmode="stack")
    return fig
