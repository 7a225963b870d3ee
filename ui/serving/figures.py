"""Figures for the serving-engine page (no st.* calls here). Inputs are engine.serving records."""
from __future__ import annotations

import math

import plotly.graph_objects as go

from engine.serving.concurrency import ConcurrencyLevel, ConcurrencySweep
from engine.serving.measure import NextToken, PromptSweep, RequestTimeline, server_split
from ui.frame.figures import COLORS, style, unique_labels


def _ms(x: float) -> float:
    return x * 1000.0


def request_timeline(tl: RequestTimeline) -> go.Figure:
    """One request on a time axis: the wait for the first token (prefill and queueing), then one tick per streamed
    chunk (its width = the gap since the previous chunk), to scale."""
    fig = go.Figure()
    fig.add_trace(go.Bar(y=["first token"], x=[_ms(tl.ttft_s)], base=[0], orientation="h", name="waiting",
                         marker_color=COLORS["warn"],
                         hovertemplate="sent \u2192 first chunk: %{x:.0f} ms<extra></extra>"))
    # the first chunk is the end of the wait; each later chunk is drawn from the previous one's arrival to its own
    fig.add_trace(go.Bar(
        y=["chunks"] * len(tl.chunk_s), x=[2.0] + [_ms(g) for g in tl.itl_s],
        base=[_ms(tl.chunk_s[0]) - 1.0] + [_ms(t) for t in tl.chunk_s[:-1]], orientation="h", name="streamed chunks",
        marker=dict(color=COLORS["primary"], line=dict(color="white", width=1.5)),
        customdata=[[i + 1, n] for i, n in enumerate(tl.chunk_tokens)],
        hovertemplate="chunk %{customdata[0]} (%{customdata[1]} token(s)) arrived; gap %{x:.1f} ms<extra></extra>"))
    rows = ["chunks", "first token"]
    split = server_split(tl)
    if split:
        # llama.cpp's own durations, on its clock: its prompt time is drawn ending where the first token arrived
        # (the first token is sampled from the prompt's last batch), so what lies before it is everything the
        # server did not count: sending, queueing for a slot, parsing, and the first token's way back
        pm, ttft = split["server_prompt_ms"], _ms(tl.ttft_s)
        fig.add_trace(go.Bar(y=["server: outside its prompt time"], x=[split["outside_ms"]], base=[0],
                             orientation="h", marker_color=COLORS["muted"], name="outside the server's prompt time",
                             hovertemplate="TTFT − server prompt time: %{x:.0f} ms<extra></extra>"))
        fig.add_trace(go.Bar(y=["server: prompt"], x=[pm], base=[max(0.0, ttft - pm)], orientation="h",
                             marker_color=COLORS["good"], name="server: prompt",
                             hovertemplate=f"server's prompt time (prompt_ms): %{{x:.0f}} ms for "
                                           f"{split.get('prompt_n')} tokens<extra></extra>"))
        rows = ["chunks", "server: prompt", "server: outside its prompt time", "first token"]
        if "server_predicted_ms" in split:
            fig.add_trace(go.Bar(y=["server: generating"], x=[split["server_predicted_ms"]], base=[ttft],
                                 orientation="h", marker_color=COLORS["good"], opacity=0.6, name="server: generating",
                                 hovertemplate="server's generation time (predicted_ms): %{x:.0f} ms<extra></extra>"))
            rows = ["chunks", "server: generating"] + rows[1:]
    fig.add_vline(x=_ms(tl.ttft_s), line_dash="dash", line_color=COLORS["accent"])
    fig.add_annotation(x=_ms(tl.ttft_s), y=1.02, yref="paper", showarrow=False, xanchor="left",
                       text=f" first token at {_ms(tl.ttft_s):.0f} ms", font=dict(color=COLORS["accent"]))
    style(fig, f"One request to the server: {tl.completion_tokens} tokens in {len(tl.chunk_s)} streamed chunks "
               "(to scale)" + (", with the server's own timings" if split else ""),
          "time since the request was sent (ms)", "", height=300 + (110 if split else 0))
    fig.update_layout(barmode="overlay", showlegend=False, bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=rows)
    fig.update_xaxes(range=[0, max(1.0, _ms(tl.end_s)) * 1.02])
    return fig


def itl_chart(tl: RequestTimeline) -> go.Figure:
    """The gap before each chunk (inter-token latency when a chunk is one token)."""
    gaps = [_ms(g) for g in tl.itl_s]
    fig = go.Figure(go.Bar(x=list(range(2, len(gaps) + 2)), y=gaps, marker_color=COLORS["primary"],
                           hovertemplate="chunk %{x}: %{y:.1f} ms<extra></extra>"))
    if gaps and math.isfinite(tl.tpot_s):
        fig.add_hline(y=_ms(tl.tpot_s), line_dash="dash", line_color=COLORS["accent"],
                      annotation_text=f"time per output token {_ms(tl.tpot_s):.1f} ms", annotation_position="top left")
    style(fig, "Inter-token latency: the gap before each streamed chunk", "chunk number (1 = first token)",
          "gap since the previous chunk (ms)", height=320)
    fig.update_layout(showlegend=False)
    return fig


def _err(spreads, k: float = 1000.0):
    med = [s.median * k for s in spreads]
    return dict(type="data", symmetric=False, array=[s.hi * k - m for s, m in zip(spreads, med)],
                arrayminus=[m - s.lo * k for s, m in zip(spreads, med)], thickness=1.5, width=5)


def prompt_sweep_chart(sw: PromptSweep) -> go.Figure:
    """TTFT (left axis) and time per output token (right axis) against prompt length, medians with min..max."""
    xs = [p.prompt_tokens if p.prompt_tokens is not None else p.target_tokens for p in sw.points]
    fig = go.Figure([
        go.Scatter(x=xs, y=[_ms(p.ttft_s.median) for p in sw.points], error_y=_err([p.ttft_s for p in sw.points]),
                   mode="lines+markers", name="time to first token (ms)", line=dict(color=COLORS["warn"], width=3)),
        go.Scatter(x=xs, y=[_ms(p.tpot_s.median) for p in sw.points], error_y=_err([p.tpot_s for p in sw.points]),
                   mode="lines+markers", name="time per output token (ms)", yaxis="y2",
                   line=dict(color=COLORS["primary"], width=3)),
    ])
    counted = all(p.prompt_tokens is not None for p in sw.points)
    style(fig, "Prompt length against time to first token and time per output token",
          "prompt length (tokens" + (", counted by the server)" if counted else ", requested)"),
          "time to first token (ms)", height=420)
    fig.update_layout(yaxis=dict(rangemode="tozero"),
                      yaxis2=dict(title=dict(text="time per output token (ms)"), overlaying="y", side="right",
                                  rangemode="tozero", showgrid=False),
                      margin=dict(l=70, r=80, t=80, b=55))
    fig.update_xaxes(type="log", tickvals=xs, ticktext=[str(x) for x in xs])  # only the measured lengths
    return fig


def concurrency_chart(cs: ConcurrencySweep) -> go.Figure:
    """Throughput of all requests together (bars, left) and one request's latency (line, right) against the number
    of parallel requests."""
    lv = cs.levels
    xs = [str(x.concurrency) for x in lv]
    fig = go.Figure([
        go.Bar(x=xs, y=[x.throughput_tok_s for x in lv], name="throughput, all requests (tokens/s)",
               marker_color=COLORS["primary"], text=[f"{x.throughput_tok_s:.0f}" for x in lv], textposition="outside"),
        go.Scatter(x=xs, y=[x.latency_s.median for x in lv], name="one request's latency (s, median)", yaxis="y2",
                   mode="lines+markers", line=dict(color=COLORS["accent"], width=3),
                   error_y=_err([x.latency_s for x in lv], 1.0)),
    ])
    style(fig, "More users at once: throughput vs each request's latency", "requests sent at once (count)",
          "throughput (tokens/s)", height=420)
    top = max([x.throughput_tok_s for x in lv if math.isfinite(x.throughput_tok_s)] or [1.0])
    fig.update_layout(yaxis=dict(range=[0, top * 1.2]),
                      yaxis2=dict(title=dict(text="latency per request (s)"), overlaying="y", side="right",
                                  rangemode="tozero", showgrid=False),
                      margin=dict(l=70, r=80, t=80, b=55))
    return fig


def concurrency_gantt(level: ConcurrencyLevel) -> go.Figure:
    """Every request of one concurrency level on the wall clock: waiting for its first token, then streaming."""
    reqs = list(level.requests)
    names = [f"request {i + 1}" for i in range(len(reqs))]
    fig = go.Figure([
        go.Bar(y=names, x=[_ms(r.ttft_s) for r in reqs], base=[_ms(r.start_s) for r in reqs], orientation="h",
               name="waiting for the first token", marker_color=COLORS["warn"],
               hovertemplate="%{y}: first token after %{x:.0f} ms<extra></extra>"),
        go.Bar(y=names, x=[_ms(r.end_s - r.ttft_s) for r in reqs], base=[_ms(r.start_s + r.ttft_s) for r in reqs],
               orientation="h", name="streaming tokens", marker_color=COLORS["primary"],
               customdata=[r.completion_tokens for r in reqs],
               hovertemplate="%{y}: %{customdata} tokens in %{x:.0f} ms<extra></extra>"),
    ])
    style(fig, f"{level.concurrency} requests sent at the same moment, on the wall clock",
          "time since the first request was sent (ms)", "", height=max(260, 40 * len(reqs) + 140))
    fig.update_layout(barmode="overlay", bargap=0.3)
    fig.update_yaxes(autorange="reversed")
    return fig


def next_token_bars(nt: NextToken) -> go.Figure:
    """The server's top next tokens and their probabilities, in the sampling page's style (most likely at the top,
    the token the server chose in red)."""
    ys = unique_labels(nt.tokens)[::-1]
    probs = list(nt.probs)[::-1]
    toks = list(nt.tokens)[::-1]
    colors = [COLORS["accent"] if t == nt.chosen else COLORS["primary"] for t in toks]
    fig = go.Figure(go.Bar(y=ys, x=probs, orientation="h", marker_color=colors, textposition="auto",
                           text=[f"{p:.1%}" for p in probs],
                           hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    style(fig, f"Next token from the server: top {len(nt.tokens)} by probability (red = the token it sent)",
          "probability (0 to 1)", "token", height=max(320, 34 * len(ys) + 150))
    fig.update_layout(showlegend=False, margin=dict(l=110, r=20, t=70, b=55))
    fig.update_xaxes(range=[0, max(1e-9, max(probs or [0])) * 1.1])
    return fig


def kv_usage_chart(cs: ConcurrencySweep) -> go.Figure | None:
    """KV-cache usage (and running requests) sampled from /metrics while each concurrency level ran; None when the
    server reported neither."""
    fig = go.Figure()
    any_kv = any_run = False
    palette = [COLORS["primary"], COLORS["warn"], COLORS["good"], COLORS["accent"], "#9467bd", "#17becf"]
    for i, lv in enumerate(cs.levels):
        kv = [(s.t_s, s.kv_usage) for s in lv.metrics if s.kv_usage is not None]
        run = [(s.t_s, s.running) for s in lv.metrics if s.running is not None]
        color = palette[i % len(palette)]
        if kv:
            any_kv = True
            fig.add_trace(go.Scatter(x=[t for t, _ in kv], y=[v * 100 for _, v in kv], mode="lines+markers",
                                     name=f"KV cache used, {lv.concurrency} parallel", line=dict(color=color)))
        if run:
            any_run = True
            fig.add_trace(go.Scatter(x=[t for t, _ in run], y=[v for _, v in run], mode="lines", yaxis="y2",
                                     name=f"running requests, {lv.concurrency} parallel",
                                     line=dict(color=color, dash="dot")))
    if not (any_kv or any_run):
        return None
    style(fig, "Inside the server during the sweep: KV-cache usage and running requests",
          "time since the level's requests were sent (s)", "KV cache in use (% of its capacity)", height=420)
    fig.update_layout(yaxis=dict(rangemode="tozero"),
                      yaxis2=dict(title=dict(text="running requests"), overlaying="y", side="right",
                                  rangemode="tozero", showgrid=False),
                      margin=dict(l=70, r=80, t=80, b=55))
    return fig


def spec_live_chart(cs: ConcurrencySweep) -> go.Figure | None:
    """Drafted and accepted tokens while the sweep ran, from the server's /metrics counters sampled every 0.25 s
    (levels one after another on one clock); None when the server exports no drafted-token counter."""
    t, drafted, accepted = [], [], []
    offset = 0.0
    base = cs.metrics_before
    for lv in cs.levels:
        for smp in lv.metrics:
            if smp.spec_draft_tokens is None:
                continue
            if base is None or base.spec_draft_tokens is None:
                base = smp
            t.append(offset + smp.t_s)
            drafted.append(smp.spec_draft_tokens - base.spec_draft_tokens)
            accepted.append((smp.spec_accepted or 0.0) - (base.spec_accepted or 0.0))
        offset += lv.wall_s
    if not t:
        return None
    fig = go.Figure([
        go.Scatter(x=t, y=drafted, mode="lines+markers", name="drafted tokens", line=dict(color=COLORS["warn"], width=3)),
        go.Scatter(x=t, y=accepted, mode="lines+markers", name="accepted drafted tokens",
                   line=dict(color="#22c55e", width=3)),
    ])
    style(fig, "Speculative decoding live: drafted and accepted tokens since the sweep began (server counters)",
          "time into the sweep, levels one after another (s)", "count since the sweep began (tokens)", height=380)
    fig.update_layout(yaxis=dict(rangemode="tozero"))
    return fig


def spec_per_position_chart(rates) -> go.Figure:
    """Share of the server's drafts whose token at each position was accepted, in the race page's colours
    (accepted green, the rest red)."""
    xs = [str(i + 1) for i in range(len(rates))]
    acc = [min(1.0, max(0.0, r)) * 100 for r in rates]
    fig = go.Figure([
        go.Bar(x=xs, y=acc, name="accepted", marker_color="#22c55e", text=[f"{a:.0f}%" for a in acc],
               textposition="inside"),
        go.Bar(x=xs, y=[100 - a for a in acc], name="not accepted (rejected, or the draft was shorter)",
               marker_color="#ef4444"),
    ])
    style(fig, "Acceptance per draft position, from the server's counters",
          "position in the draft (1 = first drafted token)", "share of drafts (%)", height=360)
    fig.update_layout(barmode="stack", yaxis=dict(range=[0, 100]))
    return fig
