"""Figures for the batching page (no st.* calls here)."""
from __future__ import annotations

import plotly.graph_objects as go

from ui.frame.figures import COLORS, style

KIB = 1024
PHASES = {  # name -> (colour, legend text)
    "queued": ("#cbd5e1", "queued (waiting)"),
    "prefill": (COLORS["warn"], "prefill (prompt pass)"),
    "decoding": (COLORS["primary"], "decoding"),
    "held": ("#fca5a5", "done, slot still held (padding)"),
}
POLICY_COLORS = {"static": COLORS["accent"], "continuous": COLORS["good"]}


LABEL_ROWS = 16  # up to this many requests, every one is labelled on the y axis (one row each, 24 px)


def workload_chart(reqs) -> go.Figure:
    """When each request arrives and how many tokens it asks for. The x range leaves room on both sides for the
    widest bubble and the "24 tok" beside it (a first arrival at 0 s and the last one sat half outside the plot)."""
    xs = [r.arrival_s for r in reqs]
    span = max(max(xs, default=0.0) - min(xs, default=0.0), 0.1)
    fig = go.Figure(go.Scatter(
        x=xs, y=[f"req {r.rid}" for r in reqs], mode="markers+text", cliponaxis=False,
        marker=dict(size=[8 + r.max_new_tokens for r in reqs], color=COLORS["primary"], opacity=0.75),
        text=[f"{r.max_new_tokens} tok" for r in reqs], textposition="middle right",
        hovertext=[f"req {r.rid}: {len(r.prompt_ids)} prompt tokens, {r.max_new_tokens} to generate<br>{r.prompt}"
                   for r in reqs], hoverinfo="text"))
    every = len(reqs) <= LABEL_ROWS
    style(fig, "The requests: arrival time and tokens each one asks for", "arrival time (s after start)",
          "request", height=max(260, 120 + (24 if every else 14) * len(reqs)))
    fig.update_yaxes(autorange="reversed", **(dict(tickmode="linear", dtick=1) if every else {}))
    fig.update_xaxes(range=[min(xs, default=0.0) - 0.08 * span, max(xs, default=0.0) + 0.2 * span])
    return fig


def sweep_throughput_bar(points) -> go.Figure:
    base = points[0].tokens_per_s
    fig = go.Figure(go.Bar(
        x=[str(p.batch) for p in points], y=[p.tokens_per_s for p in points], marker_color=COLORS["primary"],
        text=[f"{p.tokens_per_s:.0f}<br>\u00d7{p.tokens_per_s / base:.1f}" for p in points], textposition="auto"))
    style(fig, "Tokens per second, all rows together", "batch size (sequences decoded per step)",
          "tokens / s (aggregate)", height=380)
    fig.update_xaxes(type="category")
    return fig


def sweep_step_time(points) -> go.Figure:
    med = [p.median_s * 1e3 for p in points]
    fig = go.Figure(go.Scatter(
        x=[str(p.batch) for p in points], y=med, mode="lines+markers+text", line_color=COLORS["accent"],
        text=[f"{m:.0f}" for m in med], textposition="top center",
        error_y=dict(type="data", symmetric=False, array=[p.p90_s * 1e3 - m for p, m in zip(points, med)],
                     arrayminus=[m - p.p10_s * 1e3 for p, m in zip(points, med)], color="#94a3b8")))
    style(fig, "Time of one decode step", "batch size (sequences decoded per step)", "step time (ms)", height=380)
    fig.update_xaxes(type="category")
    fig.update_yaxes(rangemode="tozero")
    return fig


def _segments(r):
    return [("queued", r.arrival_s, r.admitted_s), ("prefill", r.admitted_s, r.first_token_s),
            ("decoding", r.first_token_s, r.done_s), ("held", r.done_s, r.released_s)]


def gantt(result, x_max: float | None = None) -> go.Figure:
    """One row per request: queued, prefill, decoding, and (static) the time its slot is held after it is done."""
    fig = go.Figure()
    labels = [f"req {r.rid} ({r.max_new_tokens} tok)" for r in result.requests]
    for phase, (color, legend) in PHASES.items():
        xs, base, ys, hover = [], [], [], []
        for r, label in zip(result.requests, labels):
            name, a, b = next(s for s in _segments(r) if s[0] == phase)
            if b - a <= 1e-6:
                continue
            xs.append(b - a)
            base.append(a)
            ys.append(label)
            hover.append(f"{label}: {legend} {a:.2f} to {b:.2f} s ({(b - a) * 1e3:.0f} ms)")
        fig.add_trace(go.Bar(x=xs, base=base, y=ys, orientation="h", name=legend, marker_color=color,
                             hovertext=hover, hoverinfo="text", showlegend=True))
    fig.add_trace(go.Scatter(x=[r.arrival_s for r in result.requests], y=labels, mode="markers", name="arrival",
                             marker=dict(symbol="line-ns-open", size=14, color="#0f172a", line_width=2),
                             hoverinfo="skip"))
    m = result.metrics()
    style(fig, f"{result.policy.capitalize()} batching: {m['throughput_tok_s']:.1f} tokens/s, mean latency "
               f"{m['mean_latency_s']:.2f} s", "wall-clock time (s after start)", "request",
          height=max(300, 110 + 30 * len(labels)))
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=labels)
    if x_max:
        fig.update_xaxes(range=[0, x_max * 1.02])
    return fig


def occupancy_chart(result, max_batch: int, x_max: float | None = None) -> go.Figure:
    """Rows in each forward pass: useful decode rows, wasted rows (finished requests still decoding), prefills."""
    dec = [s for s in result.steps if s.phase == "decode"]
    pre = [s for s in result.steps if s.phase == "prefill"]
    fig = go.Figure()
    for name, steps, rows, color in (
            ("decode rows doing useful work", dec, [s.useful_rows for s in dec], COLORS["primary"]),
            ("wasted rows (request already done)", dec, [s.pad_tokens for s in dec], "#fca5a5"),
            ("prefill (requests joining)", pre, [len(s.rids) for s in pre], COLORS["warn"])):
        fig.add_trace(go.Bar(x=[(s.start_s + s.end_s) / 2 for s in steps], y=rows,
                             width=[s.end_s - s.start_s for s in steps], name=name, marker_color=color,
                             hovertext=[f"{s.phase} {s.start_s:.2f} to {s.end_s:.2f} s: rows {list(s.rids)}"
                                        for s in steps], hoverinfo="text"))
    style(fig, f"{result.policy.capitalize()}: rows in each forward pass (bar width = pass duration)",
          "wall-clock time (s after start)", "rows in the pass", height=300)
    fig.update_layout(barmode="stack", bargap=0)
    fig.update_xaxes(type="linear")
    fig.add_hline(y=max_batch, line_dash="dot", line_color="#64748b", annotation_text=f"max batch {max_batch}",
                  annotation_position="top left")
    # one tick per row up to 8 rows; beyond that every 2nd or 5th (21 labels in 300 px overlapped on a projector)
    fig.update_yaxes(range=[0, max_batch + 0.8], dtick=1 if max_batch <= 8 else 2 if max_batch <= 16 else 5)
    if x_max:
        fig.update_xaxes(range=[0, x_max * 1.02])
    return fig


def kv_over_time(results) -> go.Figure:
    """Measured bytes of the batch KV cache after each pass, per policy (padding included)."""
    fig = go.Figure()
    for res in results:
        # a static batch's cache is freed when the batch ends (its last pass): drop to zero right there
        ends = {r.released_s for r in res.requests} if res.policy == "static" else set()
        xs, ys = [0.0], [0.0]
        for s in res.steps:
            xs.append(s.end_s)
            ys.append(s.kv_bytes / KIB)
            if s.end_s in ends:
                xs.append(s.end_s)
                ys.append(0.0)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=res.policy,
                                 line_color=POLICY_COLORS.get(res.policy)))
    style(fig, "KV cache held by the server over time", "wall-clock time (s after start)",
          "KV cache (KiB, measured)", height=340)
    fig.update_yaxes(rangemode="tozero")
    return fig


def latency_bars(results) -> go.Figure:
    """Per-request latency (arrival to last token) under each policy, split into time to first token and the rest."""
    fig = go.Figure()
    for res in results:
        reqs = res.requests
        fig.add_trace(go.Bar(x=[f"req {r.rid}" for r in reqs], y=[r.latency_s for r in reqs], name=res.policy,
                             marker_color=POLICY_COLORS.get(res.policy),
                             hovertext=[f"{res.policy} req {r.rid}: TTFT {r.ttft_s:.2f} s, latency {r.latency_s:.2f} s"
                                        for r in reqs], hoverinfo="text"))
    style(fig, "Latency of each request (arrival to last token)", "request", "latency (s)", height=340)
    fig.update_layout(barmode="group")
    return fig


def load_chart(points) -> go.Figure:
    """The same request, alone and amid busier traffic: time to first token plus the rest of its decode."""
    labels = ["alone" if p.rate_per_s <= 0 else f"{p.rate_per_s:g} req/s" for p in points]
    ttft = [p.probe.ttft_s for p in points]
    rest = [p.probe.latency_s - p.probe.ttft_s for p in points]
    fig = go.Figure([
        go.Bar(x=labels, y=ttft, name="time to first token", marker_color=COLORS["warn"]),
        go.Bar(x=labels, y=rest, name="decoding its tokens", marker_color=COLORS["primary"],
               text=[f"{a + b:.2f} s<br>batch \u2248{p.mean_batch_while_decoding:.1f}"
                     for a, b, p in zip(ttft, rest, points)], textposition="outside"),
    ])
    style(fig, f"Your request ({len(points[0].probe.token_ids)} tokens), alone and on a busier server",
          "background traffic (mean arrival rate)", "your latency (s)", height=380)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(rangemode="tozero")
    top = max((a + b for a, b in zip(ttft, rest)), default=1.0)
    fig.update_yaxes(range=[0, top * 1.3])
    return fig
