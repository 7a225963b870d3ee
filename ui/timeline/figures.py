"""Figures for the prefill-vs-decode page (no st.* calls here). Inputs are engine.timeline.experiment records."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from engine.timeline.experiment import STAGES, Breakdown, CacheComparison, Sweep, Timeline
from engine.timeline.memory import MemoryComparison
from engine.timeline.roofline import FloorCheck, HardwareProbe, RooflinePoint
from ui.frame.figures import COLORS, style
from ui.frame.html import visible

STAGE_COLORS = {
    "embedding": "#9467bd", "attention": COLORS["primary"], "MLP": COLORS["warn"], "norms": "#17becf",
    "output projection": COLORS["accent"], "sampling": COLORS["good"], "other": COLORS["muted"],
}
MB = 2**20


def gantt(tl: Timeline) -> go.Figure:
    """Every forward pass of the run as a bar on one time axis, to scale: one prefill lane, one decode lane."""
    fig = go.Figure()
    for phase, lane, color in (("prefill", "prefill pass", COLORS["warn"]), ("decode", "decode passes", COLORS["primary"])):
        bars = [b for b in tl.bars if b.phase == phase]
        if not bars:
            continue
        fig.add_trace(go.Bar(
            y=[lane] * len(bars), x=[b.ms for b in bars], base=[b.start_ms for b in bars], orientation="h",
            name=phase, marker=dict(color=color, line=dict(color="white", width=1.5 if phase == "decode" else 0)),
            customdata=[[b.index, b.tokens_in, repr(visible(b.token))[1:-1], b.start_ms] for b in bars],
            hovertemplate="step %{customdata[0]}: %{customdata[1]} token(s) in, %{x:.1f} ms, starts at "
                          "%{customdata[3]:.0f} ms<br>chose '%{customdata[2]}'<extra></extra>",
        ))
    if tl.bars:
        fig.add_vline(x=tl.ttft_ms, line_dash="dash", line_color=COLORS["accent"])
        late = tl.ttft_ms > 0.6 * max(1.0, tl.total_ms)  # label on the left of the line, or it runs off the chart
        fig.add_annotation(x=tl.ttft_ms, y=1.02, yref="paper", showarrow=False, xanchor="right" if late else "left",
                           text=f"first token at {tl.ttft_ms:.0f} ms " if late else f" first token at {tl.ttft_ms:.0f} ms",
                           font=dict(color=COLORS["accent"]))
    style(fig, f"Timeline of this run: 1 prefill pass, then {max(0, len(tl.bars) - 1)} decode passes (to scale)",
          "time since the prompt was submitted (ms)", "", height=300)
    fig.update_layout(barmode="overlay", showlegend=False, bargap=0.35)
    # What each pass reads, under its lane's name: written on the prefill bar, it ran past a short bar and across
    # the first-token line (walkthrough 2026-11-29); beside the axis it stays in the chart at any bar width.
    decodes = max(0, len(tl.bars) - 1)
    fig.update_yaxes(categoryorder="array", categoryarray=["decode passes", "prefill pass"],
                     tickvals=["decode passes", "prefill pass"],
                     ticktext=["decode passes<br>1 token each" if decodes else "decode passes",
                               f"prefill pass<br>{tl.bars[0].tokens_in} prompt tokens" if tl.bars else "prefill pass"])
    fig.update_xaxes(range=[0, max(1.0, tl.total_ms) * 1.02])
    return fig


def _err(spreads):
    med = np.array([s.median for s in spreads])
    return dict(type="data", symmetric=False, array=np.array([s.hi for s in spreads]) - med,
                arrayminus=med - np.array([s.lo for s in spreads]), thickness=1.5, width=5)


def sweep_chart(sw: Sweep) -> go.Figure:
    """Measured TTFT and TPOT against prompt length; whiskers span min..max over repeats."""
    xs = [r.prompt_tokens for r in sw.rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[r.ttft_ms.median for r in sw.rows], error_y=_err([r.ttft_ms for r in sw.rows]),
                             mode="lines+markers", name="time to first token (prefill)", line_color=COLORS["warn"]))
    fig.add_trace(go.Scatter(x=xs, y=[r.tpot_ms.median for r in sw.rows], error_y=_err([r.tpot_ms for r in sw.rows]),
                             mode="lines+markers", name="time per output token (one decode step)",
                             line_color=COLORS["primary"]))
    style(fig, "Prompt length: prefill grows with it, a decode step barely moves",
          "prompt length (tokens)", "time (ms, median; whiskers min..max)", height=400)
    fig.update_xaxes(type="log", tickvals=xs, ticktext=[str(x) for x in xs])
    fig.update_yaxes(rangemode="tozero")
    return fig


def cache_chart(cc: CacheComparison) -> go.Figure:
    """Per-step time with the KV cache vs recomputing the whole sequence every step."""
    steps = list(range(1, len(cc.cached_ms) + 1))
    seq = [cc.prompt_tokens + i for i in range(len(cc.recompute_ms))]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=list(cc.recompute_ms), mode="lines+markers", name="without cache",
                             line_color=COLORS["accent"], customdata=seq,
                             hovertemplate="token %{x}: %{customdata} tokens recomputed, %{y:.1f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=list(cc.cached_ms), mode="lines+markers", name="with KV cache",
                             line_color=COLORS["primary"], customdata=[cc.prompt_tokens] + [1] * (len(steps) - 1),
                             hovertemplate="token %{x}: %{customdata} token(s) in, %{y:.1f} ms<extra></extra>"))
    style(fig, "Time per generated token, with and without the KV cache",
          "generated token (1 = the prefill pass)", "time of the pass (ms)", height=380)
    fig.update_yaxes(rangemode="tozero")
    return fig


def breakdown_chart(bd: Breakdown) -> go.Figure:
    """Share of each stage in a prefill pass and a decode pass (medians of the measured stage times)."""
    rows = [(f"prefill ({bd.prefill.tokens_in} tokens)", bd.prefill), ("decode (1 token)", bd.decode)]
    fig = go.Figure()
    for stage in STAGES:
        shares = [p.shares()[stage] * 100 for _, p in rows]
        ms = [p.stage_ms[stage].median for _, p in rows]
        fig.add_trace(go.Bar(
            y=[label for label, _ in rows], x=shares, name=stage, orientation="h", marker_color=STAGE_COLORS[stage],
            text=[f"{s:.0f}%" if s >= 4 else "" for s in shares], textposition="inside", insidetextanchor="middle",
            customdata=ms, hovertemplate=f"{stage}: %{{x:.1f}}% (%{{customdata:.2f}} ms median)<extra></extra>"))
    style(fig, "Where one forward pass spends its time", "share of the pass (%, medians over repeats)", "", height=330)
    fig.update_layout(barmode="stack", legend=dict(y=-0.45, yanchor="top", x=0.5, xanchor="center"),
                      margin=dict(l=150, r=20, t=60, b=110))
    fig.update_xaxes(range=[0, 100])
    return fig


def floor_chart(fc: FloorCheck) -> go.Figure:
    """The derived floor of a decode step (weights / bandwidth) beside the step, both from rounds measured alternately
    (engine.timeline.experiment.floor_beside_step): medians, whiskers min to max."""
    bars = (fc.floor_ms, fc.step_ms)
    fig = go.Figure(go.Bar(
        x=["floor: weight bytes / bandwidth (derived)", "decode step (measured)"], y=[b.median for b in bars],
        marker_color=[COLORS["muted"], COLORS["primary"]],
        error_y=dict(type="data", symmetric=False, array=[b.hi - b.median for b in bars],
                     arrayminus=[b.median - b.lo for b in bars], thickness=1.5),
        text=[f"{b.median:.2f} ms" for b in bars], textposition="inside", insidetextanchor="start",
        textfont=dict(color="white", size=16)))
    style(fig, f"One decode step vs its memory-bandwidth floor ({fc.read_gb_s.median:.1f} GB/s measured beside it)",
          "", "time (ms)", height=360)
    fig.update_yaxes(range=[0, max(b.hi for b in bars) * 1.25])
    return fig


def roofline_chart(probe: HardwareProbe, points: list[RooflinePoint]) -> go.Figure:
    """Roofline (Williams et al. 2009): attainable GFLOP/s = min(peak, bandwidth x intensity), both axes log."""
    bw, peak = probe.read_gb_s.median, probe.matmul_gflop_s.median
    ai = np.logspace(-2, 3, 200)
    roof = np.minimum(peak, bw * ai)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ai, y=roof, mode="lines", name="roof: min(matmul peak, bandwidth x intensity)",
                             line=dict(color="#334155", width=3)))
    ridge = peak / bw
    fig.add_annotation(x=np.log10(ridge), y=np.log10(peak), text=f"ridge: {ridge:.1f} FLOP/byte", showarrow=True,
                       ay=-30, ax=0)
    for p, color in zip(points, (COLORS["warn"], COLORS["primary"], COLORS["good"], COLORS["accent"])):
        fig.add_trace(go.Scatter(
            x=[p.intensity], y=[p.achieved_gflop_s], mode="markers+text", name=p.label,
            marker=dict(size=16, color=color, line=dict(color="white", width=1)),
            text=[f"{p.label}: {p.intensity:.2g} FLOP/B"], textposition="middle right",
            hovertemplate=f"{p.label}: {p.tokens} token(s), context {p.context}<br>intensity %{{x:.3g}} FLOP/byte<br>"
                          "achieved %{y:.3g} GFLOP/s<extra></extra>"))
    style(fig, "Roofline: prefill and decode on this machine", "arithmetic intensity (FLOP per byte, log)",
          "throughput (GFLOP/s, log)", height=440)
    fig.update_xaxes(type="log", dtick=1, exponentformat="power")
    fig.update_yaxes(type="log", dtick=1, exponentformat="power")
    return fig


def memory_chart(mem: MemoryComparison) -> go.Figure:
    """Peak and held tensor memory of one forward pass: training (keeps activations) vs inference mode."""
    labels = ["keeps activations for backward", "torch.inference_mode"]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[mem.training_peak_bytes / MB, mem.inference_peak_bytes / MB],
                         name="peak during the pass", marker_color=COLORS["warn"],
                         text=[f"{mem.training_peak_bytes / MB:.1f}", f"{mem.inference_peak_bytes / MB:.1f}"],
                         textposition="outside"))
    fig.add_trace(go.Bar(x=labels, y=[mem.training_held_bytes / MB, mem.inference_held_bytes / MB],
                         name="still held after the pass", marker_color=COLORS["primary"],
                         text=[f"{mem.training_held_bytes / MB:.1f}", f"{mem.inference_held_bytes / MB:.1f}"],
                         textposition="outside"))
    style(fig, f"Memory of one forward pass over {mem.tokens} tokens (weights not included)", "",
          "tensor memory (MiB)", height=380)
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, max(mem.training_peak_bytes, mem.training_held_bytes, 1) / MB * 1.2])
    return fig


def kernel_lanes(p, title: str) -> go.Figure:
    """One traced step (engine.timeline.profile.StepProfile) as two lanes on one time axis, to scale: the host
    (operators called from Python, or the compiled graph's call) above the device (kernels on a GPU; the
    innermost operators on a CPU). Every span is a segment of one trace per lane (thousands draw fast)."""
    fig = go.Figure()
    lanes = (("host", "host: Python + dispatch", COLORS["warn"]), ("device", f"device: {p.op_word}", COLORS["primary"]))
    for lane, label, color in lanes:
        xs, ys, names = [], [], []
        for sp in (s for s in p.spans if s.lane == lane):
            xs += [sp.start_ms, sp.start_ms + max(sp.ms, 1e-4), None]
            ys += [label, label, None]
            names += [sp.name[:80], sp.name[:80], None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=color, width=22), name=label,
                                 customdata=names, hovertemplate="%{customdata}<extra></extra>", connectgaps=False))
    style(fig, title, "time in the step (ms, traced)", "", height=250)
    fig.update_layout(showlegend=False, margin=dict(l=190, r=20, t=60, b=55))
    fig.update_yaxes(categoryorder="array", categoryarray=[lanes[1][1], lanes[0][1]])
    fig.update_xaxes(range=[0, max(p.wall_ms, 1e-3) * 1.02])
    return fig
